"""The test helpers for regular steps (SPEC §14, R-TH-01..10, R-TH-20)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import WorkflowState
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import assert_step_executed
from flask_geneva.testing import assert_workflow_state
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import perform_step_inline
from flask_geneva.testing import speedrun_current_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row

T0 = datetime(2030, 8, 1, 5, 0, tzinfo=UTC)


class HelpersThreeSteps(geneva.Workflow):
    @step
    def one(self):
        self.hero.counter += 1

    @step(wait=timedelta(days=3))
    def two(self):
        self.hero.counter += 10

    @step(skip_if=True)
    def three(self):
        self.hero.counter += 100


class HelpersPausing(geneva.Workflow):
    @step
    def one(self):
        self.hero.counter += 1

    @step
    def stop(self):
        self.pause()

    @step
    def never(self):
        self.hero.counter += 1000


class HelpersEndless(geneva.Workflow):
    @step
    def poll(self):
        self.hero.counter += 1
        self.reattempt()


class HelpersPollUntil(geneva.Workflow):
    """Reattempts itself until the hero's counter reaches ``limit``."""

    limit = 3

    @step
    def poll(self):
        self.hero.counter += 1
        if self.hero.counter < HelpersPollUntil.limit:
            self.reattempt()


class HelpersImmediate(geneva.Workflow):
    @step
    def one(self):
        self.hero.counter += 1

    @step(wait=timedelta(minutes=1))
    def two(self):
        self.hero.counter += 10


class HelpersFailing(geneva.Workflow):
    @step
    def broken(self):
        raise ValueError("broken step")


class Named:
    """An object whose str() is a step name (R-TH-10)."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


# -- speedrun_workflow (R-TH-01) -------------------------------------------------------


def test_speedrun_runs_to_completion_ignoring_waits(user):
    """speedrun_workflow runs every step, ignoring waits, and returns the workflow
    (R-TH-01).
    """
    with clock.frozen(T0):
        workflow = HelpersThreeSteps.create(hero=user)
        returned = speedrun_workflow(workflow)
    assert returned is workflow
    assert workflow.state == "finished"
    assert hero_counter(user.id) == 11
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow.id)] == [
        ("one", "completed"),
        ("two", "completed"),
        ("three", "skipped"),
    ]


def test_speedrun_stops_on_pause(user):
    """speedrun_workflow stops when the workflow pauses (R-TH-01)."""
    workflow = HelpersPausing.create(hero=user)
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "paused"
    assert hero_counter(user.id) == 1


def test_speedrun_propagates_step_exceptions_after_state_handling(user):
    """A failing step pauses the workflow and its exception escapes (R-TH-01)."""
    workflow = HelpersFailing.create(hero=user)
    with pytest.raises(ValueError, match="broken step"):
        speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "paused"


def test_speedrun_raises_after_max_iterations(user):
    """An endless workflow raises RuntimeError naming max_iterations (R-TH-01)."""
    workflow = HelpersEndless.create(hero=user)
    with pytest.raises(RuntimeError, match=r"max_iterations=5.*infinite loop"):
        speedrun_workflow(workflow, max_iterations=5)
    assert hero_counter(user.id) == 5


def test_speedrun_finishing_on_the_last_allowed_iteration_is_fine(user):
    """A workflow that finishes exactly on the last allowed iteration does not raise
    (R-TH-01, BTR-20).
    """
    HelpersPollUntil.limit = 3
    workflow = HelpersPollUntil.create(hero=user)
    speedrun_workflow(workflow, max_iterations=3)
    assert workflow_row(workflow.id)["state"] == "finished"


# -- perform_next_step (R-TH-03) -------------------------------------------------------


def test_perform_next_step_runs_one_step_at_a_time(user):
    """perform_next_step runs only the current execution and returns it (R-TH-03)."""
    workflow = HelpersThreeSteps.create(hero=user)
    first = perform_next_step(workflow)
    assert first.step_name == "one"
    assert hero_counter(user.id) == 1
    assert workflow.next_step_name == "two"
    second = perform_next_step(workflow)  # its 3-day wait is ignored
    assert second.step_name == "two"
    assert hero_counter(user.id) == 11


def test_perform_next_step_returns_none_without_a_current_execution(user):
    """perform_next_step returns None when nothing is scheduled (R-TH-03)."""
    workflow = HelpersPausing.create(hero=user)
    speedrun_workflow(workflow)
    assert perform_next_step(workflow) is None


# -- assertions (R-TH-06/07) -----------------------------------------------------------


def test_assert_step_executed(user):
    """assert_step_executed checks the state of some execution of the step (R-TH-06)."""
    workflow = HelpersThreeSteps.create(hero=user)
    speedrun_workflow(workflow)
    assert_step_executed(workflow, "one")
    assert_step_executed(workflow, Named("three"), "skipped")
    with pytest.raises(
        AssertionError,
        match=r"^Expected step 'three' to be completed, but it was not found$",
    ):
        assert_step_executed(workflow, "three")
    with pytest.raises(
        AssertionError,
        match=r"^Expected step 'missing' to be completed, but it was not found$",
    ):
        assert_step_executed(workflow, "missing")


def test_assert_workflow_state(user):
    """assert_workflow_state refreshes and compares str(expected) (R-TH-07)."""
    workflow = HelpersThreeSteps.create(hero=user)
    assert_workflow_state(workflow, "ready")
    assert_workflow_state(workflow, WorkflowState.READY)
    with pytest.raises(
        AssertionError, match=r"^Expected workflow to be finished, but was ready$"
    ):
        assert_workflow_state(workflow, "finished")
    with pytest.raises(ValueError, match=r"^'finshed' is not a workflow state"):
        assert_workflow_state(workflow, "finshed")


# -- perform_step_inline (R-TH-04) -----------------------------------------------------


def test_perform_step_inline_runs_a_named_step_without_publishing(user, geneva_jobs):
    """perform_step_inline runs the named step now, without a job, keeping
    next_step_name (R-TH-04).
    """
    workflow = HelpersThreeSteps.create(hero=user)
    scheduled_id = workflow.current_execution.id
    geneva_jobs.clear()
    execution = perform_step_inline(workflow, "two")
    assert execution.step_name == "two"
    assert hero_counter(user.id) == 10
    rows = {r["id"]: r for r in execution_rows(workflow.id)}
    assert (rows[scheduled_id]["state"], rows[scheduled_id]["outcome"]) == (
        "canceled",
        "canceled",
    )
    assert rows[execution.id]["state"] == "completed"
    assert all(p.step_execution_id != execution.id for p in geneva_jobs.enqueued)


def test_perform_step_inline_accepts_str_able_names_and_repeats(user):
    """Names may be str()-able; the same step can run repeatedly (R-TH-04, R-TH-10)."""
    workflow = HelpersThreeSteps.create(hero=user)
    first = perform_step_inline(workflow, Named("one"))
    second = perform_step_inline(workflow, "one")
    assert first.id != second.id
    assert hero_counter(user.id) == 2


def test_perform_step_inline_defaults_to_the_next_step(user):
    """Without a name perform_step_inline runs next_step_name (R-TH-04)."""
    workflow = HelpersThreeSteps.create(hero=user)
    execution = perform_step_inline(workflow)
    assert execution.step_name == "one"
    assert hero_counter(user.id) == 1


def test_perform_step_inline_rejects_unknown_steps(user):
    """An unknown name raises ValueError listing the available steps (R-TH-04)."""
    workflow = HelpersThreeSteps.create(hero=user)
    with pytest.raises(ValueError, match="Available steps") as raised:
        perform_step_inline(workflow, "nope")
    assert str(raised.value) == (
        "Step 'nope' is not defined in HelpersThreeSteps. "
        "Available steps: one, two, three"
    )
    assert len(execution_rows(workflow.id)) == 1


# -- speedrun_current_step (R-TH-02) ---------------------------------------------------


def test_speedrun_current_step_runs_only_the_current_step(user):
    """speedrun_current_step runs the current step and not the next one (R-TH-02)."""
    workflow = HelpersThreeSteps.create(hero=user)
    execution = speedrun_current_step(workflow)
    assert (execution.step_name, execution.state) == ("one", "completed")
    assert hero_counter(user.id) == 1
    assert workflow_row(workflow.id)["next_step_name"] == "two"


def test_speedrun_current_step_returns_none_without_execution(user):
    """speedrun_current_step returns None without a current execution (R-TH-02)."""
    workflow = HelpersPausing.create(hero=user)
    speedrun_workflow(workflow)
    assert speedrun_current_step(workflow) is None


# -- geneva_jobs (R-TH-20) -------------------------------------------------------------


def test_drain_runs_recorded_jobs_until_done(user, geneva_jobs):
    """drain() runs recorded jobs FIFO, including jobs published while draining
    (R-TH-20).
    """
    workflow = HelpersImmediate.create(hero=user)
    ran = geneva_jobs.drain()
    assert ran == 2
    assert geneva_jobs.enqueued == []
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 11


def test_drain_respects_eta_when_asked(user, geneva_jobs):
    """drain(respect_eta=True) keeps future jobs queued (R-TH-20)."""
    with clock.frozen(T0):
        HelpersThreeSteps.create(hero=user)
        app_delay = timedelta(days=3)
        ran = geneva_jobs.drain(respect_eta=True)
    assert ran == 1
    assert hero_counter(user.id) == 1
    # The 3-day wait lives in the database, not in the broker (R-DSP-01).
    assert geneva_jobs.enqueued == []
    assert execution_rows(workflow_row_id(user))[-1]["scheduled_for"] == T0 + app_delay


def workflow_row_id(user):
    """The id of the user's HelpersThreeSteps workflow."""
    from tests.apps.basic import db

    return db.session.scalars(HelpersThreeSteps.for_hero(user)).one().id


def test_drain_records_failures_and_goes_on(user, geneva_jobs):
    """A failing task is recorded and draining continues (R-TH-20)."""
    HelpersFailing.create(hero=user)
    HelpersImmediate.create(hero=user)
    ran = geneva_jobs.drain()
    assert ran == 3
    assert [type(error) for _, error in geneva_jobs.failures] == [ValueError]
    assert hero_counter(user.id) == 11


def test_drain_limit(user, geneva_jobs):
    """drain() stops with RuntimeError after limit tasks when more remain (R-TH-20)."""
    HelpersEndless.create(hero=user)
    with pytest.raises(RuntimeError, match="limit=3"):
        geneva_jobs.drain(limit=3)
    assert hero_counter(user.id) == 3
    assert len(geneva_jobs.enqueued) == 1
