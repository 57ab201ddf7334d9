"""Inline continuation: a completed step claims the next one in its own finalize (§7.9).

The Celery task path (``perform_step_execution``) runs against the recording
backend: a publication recorded means the chain ended there.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import event

from flask_geneva import ExceptionPolicy
from flask_geneva import Executor
from flask_geneva import resumable_step
from flask_geneva import signals
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import hero_counter
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row


class Boom(Exception):
    """A step failure."""


class InlineFiveSteps(geneva.Workflow):
    """Five steps; each adds one to the hero's counter."""

    hooks: list[tuple[str, str]] = []

    _steps = step.repeat(5, lambda wf: setattr(wf.hero, "counter", wf.hero.counter + 1))

    def before_step_execution(self, execution):
        InlineFiveSteps.hooks.append(("before", execution.step_name))

    def after_step_execution(self, execution):
        InlineFiveSteps.hooks.append(("after", execution.step_name))


class InlineNoOps(geneva.Workflow):
    """Five steps that do nothing."""

    _steps = step.repeat(5, lambda wf: None)


class InlineThreeNoOps(geneva.Workflow):
    """Three steps that do nothing."""

    _steps = step.repeat(3, lambda wf: None)


class InlineSixNoOps(geneva.Workflow):
    """Six steps that do nothing."""

    _steps = step.repeat(6, lambda wf: None)


class InlineWaitingThird(EmptyTwoSteps):
    @step(wait=timedelta(seconds=30))
    def third(self):
        pass


class InlineOtherQueue(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(job_options={"queue": "slow"})
    def second(self):
        pass


class InlineOtherPriority(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(job_options={"priority": 7})
    def second(self):
        pass


class InlineSameQueue(EmptyTwoSteps):
    default_job_options = {"queue": "bulk", "priority": 3}


class InlineSkipIf(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(skip_if=lambda wf: wf.hero.archived)
    def second(self):
        pass

    @step
    def third(self):
        pass


class InlineCancelIf(geneva.Workflow):
    cancel_conditions = [lambda wf: wf.hero.blocked]

    @step
    def first(self):
        self.hero.blocked = True

    @step
    def second(self):
        pass


class InlineSignal(geneva.Workflow):
    @step
    def first(self):
        self.reattempt()

    @step
    def second(self):
        pass


class InlineFailingSecond(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(on_exception=ExceptionPolicy("pause"))
    def second(self):
        raise Boom("second failed")

    @step
    def third(self):
        pass


class InlinePausedFromOutside(geneva.Workflow):
    @step
    def first(self):
        pass

    @step
    def second(self):
        externally(self.id, "pause")

    @step
    def third(self):
        pass


class InlineResumableSecond(geneva.Workflow):
    @step
    def first(self):
        pass

    @resumable_step
    def walk(self, it):
        pass


class InlineSlowSteps(geneva.Workflow):
    _steps = step.repeat(4, lambda wf: time.sleep(0.1))


def _published(geneva_jobs):
    return [p.step_execution_id for p in geneva_jobs.enqueued]


def test_the_task_runs_due_steps_of_the_same_route_inline(app, user, geneva_jobs):
    """One delivery runs all five steps, each with its own row and one commit (R-EXE-70)."""
    user_id = user.id
    workflow_id, first_id = start_without_jobs(InlineFiveSteps, user, geneva_jobs)
    perform_step_execution(first_id)
    assert _published(geneva_jobs) == []
    rows = execution_rows(workflow_id)
    assert [(r["state"], r["outcome"]) for r in rows] == [("completed", "success")] * 5
    assert len({r["job_id"] for r in rows}) == 5
    assert all(r["started_at"] is not None for r in rows)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert hero_counter(user_id) == 5


def test_each_continued_step_commits_once(app, user, geneva_jobs):
    """No-op steps: the first claim, then one commit per step (R-EXE-70)."""
    workflow_id, first_id = start_without_jobs(InlineNoOps, user, geneva_jobs)
    commits = []

    def count_commit(*_args):
        commits.append(1)

    event.listen(db.engine, "commit", count_commit)
    try:
        perform_step_execution(first_id)
    finally:
        event.remove(db.engine, "commit", count_commit)
    assert workflow_row(workflow_id)["state"] == "finished"
    # The claim of the first step, then one commit per step (finalize + next claim).
    assert len(commits) == 1 + 5


def _chain_statements(workflow_cls, user, geneva_jobs):
    """The statements of one task that runs all steps of ``workflow_cls`` inline."""
    workflow_id, first_id = start_without_jobs(workflow_cls, user, geneva_jobs)
    with recorded_statements() as statements:
        perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    return statements


@pytest.mark.backends("postgresql")
def test_a_continued_step_sends_one_statement(app, user, geneva_jobs):
    """One guarded statement ends the step and claims the next, no lock first (R-EXE-79, R-EXE-81).

    Three more steps in the chain cost three more statements: per continued
    step one data-modifying CTE holding the finished execution's and its
    workflow's UPDATE, guarded by what the claim committed, and the next
    execution's INSERT. No finalize sends a locking read.
    """
    # A first chain makes the hero type known: both measured claims probe
    # the hero in their lock (R-EXE-83).
    _chain_statements(InlineThreeNoOps, user, geneva_jobs)
    short = _chain_statements(InlineThreeNoOps, user, geneva_jobs)
    long = _chain_statements(InlineSixNoOps, user, geneva_jobs)
    assert (len(long) - len(short)) / 3 == 1
    merged = [s for s in long if "INSERT INTO geneva_drive_step_executions" in s]
    assert len(merged) == 5
    assert all(s.lstrip().upper().startswith("WITH") for s in merged)
    # The task's locking reads: the delivered step's claim and the last
    # step's finalize (it ends the workflow: no INSERT to guard), however
    # many steps ran between them.
    assert sum("FOR UPDATE" in s for s in short) == 2
    assert sum("FOR UPDATE" in s for s in long) == 2


def test_budget_of_steps_ends_the_chain_and_publishes(app, user, geneva_jobs):
    """GENEVA_INLINE_CONTINUATION_MAX_STEPS bounds the steps of one task (R-EXE-72)."""
    app.config["GENEVA_INLINE_CONTINUATION_MAX_STEPS"] = 2
    workflow_id, first_id = start_without_jobs(InlineFiveSteps, user, geneva_jobs)
    perform_step_execution(first_id)
    rows = execution_rows(workflow_id)
    assert [r["state"] for r in rows] == ["completed", "completed", "scheduled"]
    assert _published(geneva_jobs) == [rows[2]["id"]]


@pytest.mark.parametrize(
    "setting",
    ["GENEVA_INLINE_CONTINUATION_BUDGET", "GENEVA_INLINE_CONTINUATION_MAX_STEPS"],
)
def test_zero_turns_continuation_off(app, user, geneva_jobs, setting):
    """A budget or step count of 0 runs one step per task (R-EXE-72)."""
    app.config[setting] = 0
    workflow_id, first_id = start_without_jobs(InlineFiveSteps, user, geneva_jobs)
    perform_step_execution(first_id)
    rows = execution_rows(workflow_id)
    assert [r["state"] for r in rows] == ["completed", "scheduled"]
    assert _published(geneva_jobs) == [rows[1]["id"]]


@pytest.mark.parametrize(("budget", "states"), [(0.05, 1), (60, 4)])
def test_time_budget_ends_the_chain(app, user, geneva_jobs, budget, states):
    """No step is claimed once the budget has passed since the task began (R-EXE-72).

    Each step sleeps 0.1 s: with a 0.05 s budget the first step alone exceeds it,
    with 60 s all four run in the one task, whatever the machine's load.
    """
    app.config["GENEVA_INLINE_CONTINUATION_BUDGET"] = budget
    workflow_id, first_id = start_without_jobs(InlineSlowSteps, user, geneva_jobs)
    perform_step_execution(first_id)
    rows = execution_rows(workflow_id)
    assert [r["state"] for r in rows][:states] == ["completed"] * states
    if states < 4:
        assert [r["state"] for r in rows] == ["completed"] * states + ["scheduled"]
        assert _published(geneva_jobs) == [rows[states]["id"]]
    else:
        assert workflow_row(workflow_id)["state"] == "finished"


def test_a_waiting_step_ends_the_chain(app, user, geneva_jobs):
    """A step with a wait is published with its eta, not claimed (R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(InlineWaitingThird, user, geneva_jobs)
    perform_step_execution(first_id)
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "completed", "success"),
        ("third", "scheduled", None),
    ]
    (publication,) = geneva_jobs.enqueued
    assert publication.eta is not None


@pytest.mark.parametrize("workflow_cls", [InlineOtherQueue, InlineOtherPriority])
def test_another_queue_or_priority_ends_the_chain(app, user, geneva_jobs, workflow_cls):
    """The next step is published when its queue or priority differs (R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(workflow_cls, user, geneva_jobs)
    perform_step_execution(first_id)
    assert [r["state"] for r in execution_rows(workflow_id)] == [
        "completed",
        "scheduled",
    ]
    assert len(geneva_jobs.enqueued) == 1


def test_a_resumable_next_step_ends_the_chain(app, user, geneva_jobs):
    """A resumable step is published, not claimed inline (R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(InlineResumableSecond, user, geneva_jobs)
    perform_step_execution(first_id)
    assert [r["state"] for r in execution_rows(workflow_id)] == [
        "completed",
        "scheduled",
    ]
    assert len(geneva_jobs.enqueued) == 1


def test_the_same_queue_and_priority_continue(app, user, geneva_jobs):
    """Class-level job options shared by both steps do not end the chain (R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(InlineSameQueue, user, geneva_jobs)
    perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert geneva_jobs.enqueued == []


def test_a_holding_skip_condition_is_left_to_the_delivery(app, user, geneva_jobs):
    """skip_if that holds: published, and its delivery skips it (R-EXE-73)."""
    user.archived = True
    db.session.commit()
    workflow_id, first_id = start_without_jobs(InlineSkipIf, user, geneva_jobs)
    perform_step_execution(first_id)
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]
    geneva_jobs.drain()
    assert [r[:2] for r in execution_history(workflow_id)] == [
        ("first", "completed"),
        ("second", "skipped"),
        ("third", "completed"),
    ]


def test_a_cancel_condition_that_became_true_is_left_to_the_delivery(
    app, user, geneva_jobs
):
    """A cancel condition made true by the step: nothing claimed (R-EXE-73, R-EXE-20)."""
    workflow_id, first_id = start_without_jobs(InlineCancelIf, user, geneva_jobs)
    perform_step_execution(first_id)
    assert [r["state"] for r in execution_rows(workflow_id)] == [
        "completed",
        "scheduled",
    ]
    geneva_jobs.drain()
    assert workflow_row(workflow_id)["state"] == "canceled"


def test_a_flow_control_signal_ends_the_chain(app, user, geneva_jobs):
    """A reattempt is published as without continuation (R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(InlineSignal, user, geneva_jobs)
    perform_step_execution(first_id)
    assert execution_history(workflow_id) == [
        ("first", "completed", "reattempted"),
        ("first", "scheduled", None),
    ]
    assert len(geneva_jobs.enqueued) == 1


def test_a_failing_continued_step_applies_its_policy_and_fails_the_task(
    app, user, geneva_jobs
):
    """The second step's exception pauses the workflow and escapes the task (R-EXE-75)."""
    workflow_id, first_id = start_without_jobs(InlineFailingSecond, user, geneva_jobs)
    with pytest.raises(Boom):
        perform_step_execution(first_id)
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "failed", "failed"),
    ]
    assert workflow_row(workflow_id)["state"] == "paused"
    assert geneva_jobs.enqueued == []


def test_a_pause_from_another_session_stops_the_chain(app, user, geneva_jobs):
    """Paused while the second step ran: it is recorded, the third is not run (R-EXE-71, R-EXE-42)."""
    workflow_id, first_id = start_without_jobs(
        InlinePausedFromOutside, user, geneva_jobs
    )
    perform_step_execution(first_id)
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "completed", "success"),
        ("third", "scheduled", None),
    ]
    assert workflow_row(workflow_id)["state"] == "paused"
    assert geneva_jobs.enqueued == []


def test_signals_and_hooks_fire_for_every_step(app, user, geneva_jobs):
    """precondition/step/finalize and the hooks, once per continued step (R-EXE-74)."""
    InlineFiveSteps.hooks.clear()
    events = []

    def record(name):
        def receiver(sender, payload):
            events.append((name, payload["execution_id"], payload.get("outcome")))

        return receiver

    receivers = {
        "precondition": record("precondition"),
        "step": record("step"),
        "finalize": record("finalize"),
    }
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver, sender=InlineFiveSteps)
    try:
        workflow_id, first_id = start_without_jobs(InlineFiveSteps, user, geneva_jobs)
        perform_step_execution(first_id)
    finally:
        for name, receiver in receivers.items():
            getattr(signals, name).disconnect(receiver, sender=InlineFiveSteps)
    ids = [r["id"] for r in execution_rows(workflow_id)]
    assert len(ids) == 5
    expected = []
    for execution_id in ids:
        expected += [
            ("precondition", execution_id, "passed"),
            ("step", execution_id, "completed"),
            ("finalize", execution_id, None),
        ]
    assert [(n, i, o if n != "finalize" else None) for n, i, o in events] == expected
    names = [r["step_name"] for r in execution_rows(workflow_id)]
    assert InlineFiveSteps.hooks == [
        (hook, name) for name in names for hook in ("before", "after")
    ]


def test_test_helpers_run_one_step(app, user, geneva_jobs):
    """perform_next_step, Executor.execute and drain() never continue inline (R-EXE-77)."""
    workflow = InlineFiveSteps.create(hero=user)
    workflow_id = workflow.id
    perform_next_step(workflow)
    assert [r["state"] for r in execution_rows(workflow_id)] == [
        "completed",
        "scheduled",
    ]
    Executor.execute(execution_rows(workflow_id)[1]["id"])
    assert len(execution_rows(workflow_id)) == 3
    geneva_jobs.clear()
    perform_next_step(workflow)
    assert len(geneva_jobs.enqueued) == 1
    # drain() runs the fourth and the fifth step as two tasks.
    assert geneva_jobs.drain() == 2
    assert workflow_row(workflow_id)["state"] == "finished"


def test_executor_execute_can_continue_inline(app, user, geneva_jobs):
    """Executor.execute(continue_inline=True) runs the chain as the task does (R-EXE-70)."""
    workflow_id, first_id = start_without_jobs(InlineFiveSteps, user, geneva_jobs)
    Executor.execute(first_id, continue_inline=True)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert geneva_jobs.enqueued == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("GENEVA_INLINE_CONTINUATION_BUDGET", -1),
        ("GENEVA_INLINE_CONTINUATION_BUDGET", 7200),
        ("GENEVA_INLINE_CONTINUATION_MAX_STEPS", -1),
        ("GENEVA_INLINE_CONTINUATION_MAX_STEPS", 2.5),
        ("GENEVA_INLINE_CONTINUATION_MAX_STEPS", True),
    ],
)
def test_invalid_settings_are_refused(key, value):
    """Bad budget or step counts name the key and the allowed values (R-CFG-01, R-EXE-72)."""
    from flask_geneva.core.config import config_from_mapping
    from flask_geneva.exceptions import GenevaConfigurationError

    with pytest.raises(GenevaConfigurationError, match=key):
        config_from_mapping({key: value}, testing=True)
