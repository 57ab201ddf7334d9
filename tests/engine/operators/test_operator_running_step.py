"""Resume, skip and rewind while an execution is still in progress (R-EXT-26).

Two situations: the step really runs (its body calls the operations through another
thread, a real external caller), and the worker died, leaving the execution
``in_progress`` until recovery (the rows are set as after a SIGKILL).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from flask_geneva import Executor
from flask_geneva import InvalidStateError
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import geneva
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row


class RunningStepOperator(geneva.Workflow):
    """``work`` pauses its own workflow from outside, then tries ``operations``."""

    operations: tuple[tuple[str, dict], ...] = ()
    outcomes: list = []

    @step
    def work(self):
        externally(self.id, "pause")
        for name, kwargs in RunningStepOperator.operations:
            try:
                RunningStepOperator.outcomes.append(
                    ("done", externally(self.id, name, **kwargs))
                )
            except InvalidStateError as error:
                RunningStepOperator.outcomes.append(("refused", str(error)))
        self.hero.counter += 1

    @step
    def tail(self):
        self.hero.counter += 10


@pytest.fixture(autouse=True)
def _reset():
    RunningStepOperator.operations = ()
    RunningStepOperator.outcomes = []


def _operator_actions(workflow_id):
    meta = workflow_row(workflow_id)["metadata"] or {}
    return [
        (a["action"], a["from_state"], a["to_state"], a["execution_id"])
        for a in meta.get("operator_actions", [])
    ]


def _running_refusal(action, workflow_id, execution_id):
    return (
        rf"^Cannot {action} workflow {workflow_id}: step execution {execution_id} "
        r"\(step 'work'\) is still in progress; wait for it to finish, or recover it"
    )


def test_resume_during_the_step_withdraws_the_pause(user, geneva_jobs):
    """resume() of a workflow paused during its step returns it to performing; the
    executor then finalizes normally and schedules the next step (R-EXT-26, R-EXE-44).
    """
    RunningStepOperator.operations = (("resume", {}),)
    workflow = RunningStepOperator.create(hero=user)
    execution_id = workflow.current_execution.id
    Executor.execute(execution_id)
    assert RunningStepOperator.outcomes == [("done", execution_id)]
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"], wf["transitioned_at"]) == (
        "ready",
        "tail",
        None,
    )
    tail = execution_rows(workflow.id)[1]
    assert tail["state"] == "scheduled"
    assert tail["id"] in [p.step_execution_id for p in geneva_jobs.enqueued]
    assert _operator_actions(workflow.id) == [
        ("pause", "performing", "paused", None),
        ("resume", "paused", "performing", execution_id),
    ]


#: skip() and resume(rewind=True): the operations that would leave the running
#: step's outcome behind, and how their refusal words them.
SKIP_AND_REWIND = pytest.mark.parametrize(
    ("operation", "kwargs", "wording"),
    [
        ("skip", {}, "skip"),
        ("resume", {"rewind": True}, "resume from the beginning"),
    ],
)


@SKIP_AND_REWIND
def test_skip_and_rewind_during_the_step_are_refused(
    user, geneva_jobs, operation, kwargs, wording
):
    """skip() and resume(rewind=True) while the step runs refuse with
    InvalidStateError naming the running execution; the step's completion is then
    recorded and nothing ran twice (R-EXT-26, R-EXE-42).
    """
    RunningStepOperator.operations = ((operation, kwargs),)
    workflow = RunningStepOperator.create(hero=user)
    execution_id = workflow.current_execution.id
    Executor.execute(execution_id)
    [(result, message)] = RunningStepOperator.outcomes
    assert result == "refused"
    assert re.match(_running_refusal(wording, workflow.id, execution_id), message)
    assert "flask geneva recover" in message
    assert execution_row(execution_id)["outcome"] == "success"
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow.id)] == [
        ("work", "completed"),
        ("tail", "scheduled"),
    ]
    assert workflow_row(workflow.id)["state"] == "paused"
    assert hero_counter(user.id) == 1


def _dead_worker_workflow(user):
    """A workflow whose execution stays in_progress (its worker died), then paused."""
    workflow = RunningStepOperator.create(hero=user)
    execution_id = make_in_progress(workflow, clock.now() - timedelta(minutes=5))
    workflow.pause()
    return workflow, execution_id


@SKIP_AND_REWIND
def test_skip_and_rewind_after_a_dead_worker_are_refused(
    user, geneva_jobs, operation, kwargs, wording
):
    """With the execution left in_progress by a dead worker, skip() and
    resume(rewind=True) refuse with InvalidStateError, never a unique-index
    violation, and change nothing (R-EXT-26, R-DM-11).
    """
    workflow, execution_id = _dead_worker_workflow(user)
    before = execution_rows(workflow.id)
    with pytest.raises(
        InvalidStateError, match=_running_refusal(wording, workflow.id, execution_id)
    ):
        getattr(workflow, operation)(**kwargs)
    assert execution_rows(workflow.id) == before
    assert workflow_row(workflow.id)["state"] == "paused"


def test_resume_after_a_dead_worker_withdraws_the_pause(user, geneva_jobs):
    """resume() with the execution left in_progress makes the workflow performing
    again and creates no execution; recovery then handles the dead run (R-EXT-26).
    """
    workflow, execution_id = _dead_worker_workflow(user)
    geneva_jobs.clear()
    assert workflow.resume().id == execution_id
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == ("performing", "work")
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]
    assert geneva_jobs.enqueued == []


@pytest.mark.parametrize(
    ("method", "wording"),
    [
        ("schedule_next_step", "schedule the next step of"),
        ("reschedule_current_step", "reschedule the current step of"),
    ],
)
def test_scheduling_helpers_refuse_while_a_step_runs(
    user, geneva_jobs, method, wording
):
    """Workflow.schedule_next_step()/reschedule_current_step() would create a second
    active execution: they refuse with InvalidStateError, not an IntegrityError
    (R-EXT-26, R-DM-11).
    """
    workflow = RunningStepOperator.create(hero=user)
    execution_id = make_in_progress(workflow, clock.now())
    before = execution_rows(workflow.id)
    with pytest.raises(
        InvalidStateError,
        match=rf"^Cannot {wording} workflow {workflow.id}: step execution "
        rf"{execution_id} \(step 'work'\) is still in progress",
    ):
        getattr(workflow, method)()
    assert execution_rows(workflow.id) == before
