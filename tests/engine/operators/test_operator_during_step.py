"""An operator pausing or canceling a workflow while its step runs (R-EXE-42 amended).

The body pauses its own workflow through another thread (a real external operation,
its own session and transaction), then ends in one of the ways of R-EXE-35. The
execution must record what the body did, and a body that returned must never run
again because of the operator's click.
"""

from __future__ import annotations

import pytest

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row


class Boom(Exception):
    pass


class OperatorPausedMidStep(geneva.Workflow):
    """``charge`` adds 100 (a payment, say) while an operator pauses the workflow.

    ``ending`` says how the body then ends: ``"return"``, ``"raise"`` or the name of
    an in-step flow-control method.
    """

    ending = "return"
    operation = "pause"

    @step
    def charge(self):
        externally(self.id, OperatorPausedMidStep.operation)
        self.hero.counter += 100
        ending = OperatorPausedMidStep.ending
        if ending == "raise":
            raise Boom("gateway answered 502")
        if ending != "return":
            getattr(self, ending)()

    @step
    def receipt(self):
        self.hero.counter += 1


class OperatorPausedLastStep(geneva.Workflow):
    @step
    def charge(self):
        externally(self.id, "pause")
        self.hero.counter += 100


@pytest.fixture(autouse=True)
def _reset():
    OperatorPausedMidStep.ending = "return"
    OperatorPausedMidStep.operation = "pause"


def _run_first_step(workflow):
    execution_id = workflow.current_execution.id
    Executor.execute(execution_id)
    return execution_id


def test_completed_body_under_pause_never_runs_again(user, geneva_jobs):
    """A body that returned under an external pause is completed/success; the next
    step waits unpublished, resume() publishes it, and the charge happened once
    (R-EXE-42a, R-EXT-01, R-EXT-21, R-DSP-03).
    """
    workflow = OperatorPausedMidStep.create(hero=user)
    geneva_jobs.clear()
    execution_id = _run_first_step(workflow)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"], wf["next_step_name"]) == (
        "paused",
        None,
        "receipt",
    )
    preserved = execution_rows(workflow.id)[1]
    assert (preserved["step_name"], preserved["state"]) == ("receipt", "scheduled")
    assert geneva_jobs.enqueued == []  # nothing published while paused
    assert hero_counter(user.id) == 100

    resumed = workflow.resume()
    assert resumed.id == preserved["id"]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [preserved["id"]]
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 101
    assert [r["step_name"] for r in execution_rows(workflow.id)] == [
        "charge",
        "receipt",
    ]


def test_completed_last_step_under_pause_finishes_on_resume(user, geneva_jobs):
    """When the paused step was the last one, resume() finishes the workflow instead of
    running anything again (R-EXE-42a).
    """
    workflow = OperatorPausedLastStep.create(hero=user)
    execution_id = _run_first_step(workflow)
    assert execution_row(execution_id)["outcome"] == "success"
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("paused", None)
    assert workflow.resume() is None
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("finished", None)
    assert len(execution_rows(workflow.id)) == 1
    assert hero_counter(user.id) == 100


def test_completed_body_under_cancel_schedules_nothing(user, geneva_jobs):
    """Under an external cancel the body's completion is recorded and nothing is
    scheduled (R-EXE-42a).
    """
    OperatorPausedMidStep.operation = "cancel"
    workflow = OperatorPausedMidStep.create(hero=user)
    execution_id = _run_first_step(workflow)
    assert execution_row(execution_id)["outcome"] == "success"
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert len(execution_rows(workflow.id)) == 1


def test_exception_under_pause_is_recorded_and_retried_on_resume(user, geneva_jobs):
    """A captured exception under an external pause is failed/failed with its error,
    not re-raised; resume() retries the step (R-EXE-42b, R-EXE-43).
    """
    OperatorPausedMidStep.ending = "raise"
    workflow = OperatorPausedMidStep.create(hero=user)
    execution_id = _run_first_step(workflow)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"], row["error_message"]) == (
        "failed",
        "failed",
        "gateway answered 502",
    )
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"], wf["current_step_name"]) == (
        "paused",
        "charge",
        None,
    )
    assert hero_counter(user.id) == 0  # the failed body's writes were rolled back
    assert workflow.resume().step_name == "charge"


@pytest.mark.parametrize(
    ("ending", "recorded", "workflow_state", "preserved"),
    [
        ("reattempt", ("completed", "reattempted"), "paused", "charge"),
        ("skip", ("skipped", "skipped"), "paused", "receipt"),
        ("pause", ("canceled", "canceled"), "paused", None),
        ("cancel", ("canceled", "canceled"), "canceled", None),
        ("finish", ("completed", "success"), "finished", None),
    ],
)
def test_in_step_signal_under_pause_is_recorded_as_the_signal(
    user, geneva_jobs, ending, recorded, workflow_state, preserved
):
    """An in-step signal under an external pause is recorded as §8.1 records it; its
    follow-up is preserved unpublished for resume(), cancel and finish end the
    workflow (R-EXE-42d, R-FC-10..14).
    """
    OperatorPausedMidStep.ending = ending
    workflow = OperatorPausedMidStep.create(hero=user)
    geneva_jobs.clear()
    execution_id = _run_first_step(workflow)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == recorded
    assert row["metadata"]["flow_control"]["action"] == ending
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == (workflow_state, None)
    later = [(r["step_name"], r["state"]) for r in execution_rows(workflow.id)[1:]]
    assert later == ([(preserved, "scheduled")] if preserved else [])
    assert geneva_jobs.enqueued == []
