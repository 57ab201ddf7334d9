"""Resuming and skipping after failures and pauses (R-EXT-04, R-EXT-20..23)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import InvalidStateError
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row

T0 = datetime(2030, 6, 1, 7, 0, tzinfo=UTC)


class ResumeSkipFlaky(geneva.Workflow):
    """``flaky`` fails until its attempt number reaches the threshold."""

    threshold = 2
    attempts = 0

    @step
    def flaky(self):
        ResumeSkipFlaky.attempts += 1
        if ResumeSkipFlaky.attempts < ResumeSkipFlaky.threshold:
            raise RuntimeError(f"attempt {ResumeSkipFlaky.attempts} failed")
        self.hero.counter += 1

    @step
    def tail(self):
        self.hero.counter += 100


class ResumeSkipDelayed(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(wait=timedelta(minutes=5))
    def second(self):
        self.hero.counter += 1

    @step
    def third(self):
        self.hero.counter += 10


def _fail_once(workflow):
    with pytest.raises(RuntimeError):
        perform_next_step(workflow)


def test_resume_retries_the_failed_step(user):
    """Resume creates a new execution of the failed step; next_step_name is unchanged
    (R-EXT-23, R-EXE-47).
    """
    ResumeSkipFlaky.threshold, ResumeSkipFlaky.attempts = 2, 0
    workflow = ResumeSkipFlaky.create(hero=user)
    _fail_once(workflow)
    assert workflow_row(workflow.id)["next_step_name"] == "flaky"
    retry = workflow.resume()
    assert retry.step_name == "flaky"
    assert workflow_row(workflow.id)["next_step_name"] == "flaky"
    speedrun_workflow(workflow)
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("flaky", "failed"),
        ("flaky", "completed"),
        ("tail", "completed"),
    ]
    assert workflow_row(workflow.id)["state"] == "finished"


def test_skip_on_a_failure_paused_workflow_advances(user):
    """Skip on a failure-paused workflow schedules the next step and lets it finish
    (R-EXT-04).
    """
    ResumeSkipFlaky.threshold, ResumeSkipFlaky.attempts = 99, 0
    workflow = ResumeSkipFlaky.create(hero=user)
    _fail_once(workflow)
    workflow.skip()
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"], wf["transitioned_at"]) == (
        "ready",
        "tail",
        None,
    )
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("flaky", "failed"),
        ("tail", "scheduled"),
    ]
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 100


def test_resume_after_external_pause_reuses_the_execution(user):
    """Resume after an external pause reuses the scheduled execution (R-EXT-21)."""
    workflow = ResumeSkipDelayed.create(hero=user)
    perform_next_step(workflow)
    scheduled_id = workflow.current_execution.id
    workflow.pause()
    assert workflow.resume().id == scheduled_id
    assert len(execution_rows(workflow.id)) == 2


def test_resume_preserves_the_original_time_until_it_passes(user, geneva_jobs):
    """Before its time passes the resumed execution keeps its eta; afterwards it runs at
    once (R-EXT-21).
    """
    with clock.frozen(T0) as frozen:
        workflow = ResumeSkipDelayed.create(hero=user)
        perform_next_step(workflow)
        scheduled_id = workflow.current_execution.id
        workflow.pause()
        geneva_jobs.clear()
        frozen.advance(timedelta(minutes=1))
        workflow.resume()
        assert [(p.step_execution_id, p.eta) for p in geneva_jobs.enqueued] == [
            (scheduled_id, T0 + timedelta(minutes=5))
        ]
        assert geneva_jobs.drain(respect_eta=True) == 0
        workflow.pause()
        frozen.advance(timedelta(minutes=10))
        geneva_jobs.clear()
        workflow.resume()
        assert [(p.step_execution_id, p.eta) for p in geneva_jobs.enqueued] == [
            (scheduled_id, None)
        ]
        geneva_jobs.drain(respect_eta=True)
    assert execution_row(scheduled_id)["state"] == "completed"
    assert execution_row(scheduled_id)["scheduled_for"] == T0 + timedelta(minutes=5)
    assert hero_counter(user.id) == 11


def test_skip_on_an_externally_paused_workflow_advances(user):
    """Skip from an external pause cancels the preserved execution and advances
    (R-EXT-04, R-SCH-03).
    """
    workflow = ResumeSkipDelayed.create(hero=user)
    perform_next_step(workflow)
    preserved_id = workflow.current_execution.id
    workflow.pause()
    workflow.skip()
    row = execution_row(preserved_id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert row["finished_at"] == row["canceled_at"]
    assert workflow_row(workflow.id)["next_step_name"] == "third"
    speedrun_workflow(workflow)
    assert hero_counter(user.id) == 10


@pytest.mark.parametrize("state", ["finished", "canceled"])
def test_skip_rejects_finished_and_canceled(user, state):
    """skip() on terminal workflows raises (R-EXT-04)."""
    workflow = ResumeSkipDelayed.create(hero=user)
    workflow.transition_to(state)
    with pytest.raises(InvalidStateError, match=f"Cannot skip on a {state} workflow"):
        workflow.skip()


def test_several_retries_then_a_skip(user):
    """Failed retries accumulate; a final skip moves on (R-EXT-23, R-EXT-04)."""
    ResumeSkipFlaky.threshold, ResumeSkipFlaky.attempts = 99, 0
    workflow = ResumeSkipFlaky.create(hero=user)
    _fail_once(workflow)
    for _ in range(2):
        workflow.resume()
        _fail_once(workflow)
    workflow.skip()
    speedrun_workflow(workflow)
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("flaky", "failed"),
        ("flaky", "failed"),
        ("flaky", "failed"),
        ("tail", "completed"),
    ]
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 100
