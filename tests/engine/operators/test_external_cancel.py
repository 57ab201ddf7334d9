"""External cancel (R-EXT-03)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
from sqlalchemy.orm.attributes import set_committed_value

from flask_geneva import InvalidStateError
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

T0 = datetime(2030, 7, 1, 6, 0, tzinfo=UTC)


class ExternalCancelTwoSteps(geneva.Workflow):
    @step
    def first(self):
        self.hero.counter += 1

    @step(wait=timedelta(days=1))
    def second(self):
        self.hero.counter += 10


class ExternalCancelFailing(geneva.Workflow):
    @step
    def broken(self):
        raise RuntimeError("broken")


def _assert_canceled(workflow_id, execution_id, at):
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert row["canceled_at"] == row["finished_at"] == at
    wf = workflow_row(workflow_id)
    assert (wf["state"], wf["transitioned_at"]) == ("canceled", at)


def test_cancel_a_fresh_workflow(user):
    """Cancel from ready cancels the immediate scheduled execution (R-EXT-03)."""
    workflow = ExternalCancelTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    with clock.frozen(T0):
        workflow.cancel()
    _assert_canceled(workflow.id, execution_id, T0)


def test_cancel_with_a_future_scheduled_execution(user):
    """Cancel also cancels an execution scheduled in the future (R-EXT-03)."""
    workflow = ExternalCancelTwoSteps.create(hero=user)
    perform_next_step(workflow)
    future_id = workflow.current_execution.id
    with clock.frozen(T0):
        workflow.cancel()
    _assert_canceled(workflow.id, future_id, T0)
    perform_next_step(workflow)
    assert hero_counter(user.id) == 1


def test_cancel_a_paused_workflow_cancels_the_preserved_execution(user):
    """Cancel from an external pause cancels the preserved execution (R-EXT-03)."""
    workflow = ExternalCancelTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    workflow.pause()
    with clock.frozen(T0):
        workflow.cancel()
    _assert_canceled(workflow.id, execution_id, T0)


def test_cancel_a_failure_paused_workflow(user):
    """Cancel from a failure pause cancels the workflow; the failed execution stays
    failed (R-EXT-03).
    """
    workflow = ExternalCancelFailing.create(hero=user)
    with pytest.raises(RuntimeError):
        perform_next_step(workflow)
    with clock.frozen(T0):
        workflow.cancel()
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [("failed", "failed")]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["transitioned_at"]) == ("canceled", T0)


@pytest.mark.parametrize("state", ["finished", "canceled"])
def test_cancel_rejects_finished_and_canceled(user, state):
    """cancel() on terminal workflows raises "Cannot cancel a <state> workflow"
    (R-EXT-03).
    """
    workflow = ExternalCancelTwoSteps.create(hero=user)
    workflow.transition_to(state)
    with pytest.raises(InvalidStateError, match=f"^Cannot cancel a {state} workflow$"):
        workflow.cancel()


def test_canceled_workflow_cannot_be_resumed_or_paused(user):
    """A canceled workflow rejects resume() and pause() (R-EXT-01, R-EXT-20)."""
    workflow = ExternalCancelTwoSteps.create(hero=user)
    workflow.cancel()
    with pytest.raises(InvalidStateError, match="Cannot resume a canceled workflow"):
        workflow.resume()
    with pytest.raises(InvalidStateError, match="Cannot pause a canceled workflow"):
        workflow.pause()
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_cancel_rechecks_the_state_under_the_lock(user):
    """A stale object cannot cancel a workflow finished meanwhile (R-EXT-03, §8.2)."""
    workflow = ExternalCancelTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    update_workflow(workflow.id, state="finished")
    set_committed_value(workflow, "state", "ready")  # a stale in-memory copy
    with pytest.raises(InvalidStateError, match=r"^Cannot cancel a finished workflow$"):
        workflow.cancel()
    assert workflow_row(workflow.id)["state"] == "finished"
    assert execution_row(execution_id)["state"] == "scheduled"


def test_delivery_after_cancel_does_not_run_the_step(user):
    """A job delivered after cancel runs nothing (R-EXE-11/12)."""
    workflow = ExternalCancelTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    workflow.cancel()
    from flask_geneva import Executor

    Executor.execute(execution_id)
    assert hero_counter(user.id) == 0
    assert execution_row(execution_id)["state"] == "canceled"
