"""Flow control inside steps and from outside (SPEC §8, R-FC-*, R-EXT-01..06)."""

from __future__ import annotations

import logging
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import Executor
from flask_geneva import FlowControlSignal
from flask_geneva import InvalidStateError
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingThreeSteps
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import hero_counter
from tests.support.workflow import make_user
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

T0 = datetime(2030, 4, 1, 8, 0, tzinfo=UTC)


class FlowAfterSignal(geneva.Workflow):
    """Its first step calls the action named by the hero's email, then counts."""

    @step
    def act(self):
        getattr(self, self.hero.email.split("@")[0])()
        self.hero.counter += 1000  # must never run

    @step
    def tail(self):
        self.hero.counter += 1


class FlowSwallow(geneva.Workflow):
    @step
    def act(self):
        try:
            self.pause()
        except Exception:  # noqa: BLE001 - the point: a signal is not an Exception
            self.hero.counter += 1000

    @step
    def tail(self):
        pass


class FlowSkipLast(geneva.Workflow):
    @step
    def only(self):
        self.skip()


class FlowInStepPause(geneva.Workflow):
    @step
    def first(self):
        self.hero.counter += 1

    @step
    def gate(self):
        if self.hero.counter < 2:
            self.hero.counter += 1
            self.pause()
        self.hero.counter += 10

    @step
    def last(self):
        pass


class FlowReattempt(geneva.Workflow):
    @step
    def poll(self):
        self.hero.counter += 1
        if self.hero.counter < 3:
            self.reattempt(wait=timedelta(minutes=5))


class FlowFinish(geneva.Workflow):
    @step
    def early(self):
        self.finish()

    @step
    def never(self):
        self.hero.counter += 1


class FlowSuspendRegular(geneva.Workflow):
    @step
    def regular(self):
        self.suspend()


class FlowSuspendsWithWait(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        if not it.resumed:
            self.suspend(wait=timedelta(minutes=7))


class FlowCancelIfSignals(geneva.Workflow):
    def _cancel_from_condition(self):
        self.cancel()

    cancel_conditions = ["_cancel_from_condition"]

    @step
    def work(self):
        self.hero.counter += 1


class FlowSkipIfSignals(geneva.Workflow):
    @step(skip_if=lambda wf: wf.skip())
    def work(self):
        self.hero.counter += 1


class FlowPerformingExternal(geneva.Workflow):
    """Its body asks another thread to run an external operation on it."""

    operation = "pause"

    @step
    def work(self):
        externally(self.id, FlowPerformingExternal.operation)
        self.hero.counter += 1

    @step
    def tail(self):
        pass


class FlowOtherWorkflow(geneva.Workflow):
    """Its body pauses another workflow: that is an external operation (R-FC-01)."""

    target_id = None

    @step
    def work(self):
        geneva.Workflow.get(FlowOtherWorkflow.target_id).pause()
        self.hero.counter += 1


def _set_action(user, action):
    user.email = f"{action}@example.com"
    db.session.commit()


# -- in-step signals (R-FC-02, R-FC-10..15) --------------------------------------------


@pytest.mark.parametrize("action", ["pause", "skip", "cancel", "finish", "reattempt"])
def test_code_after_a_signal_does_not_run(user, action):
    """A flow-control call ends the body at once (R-FC-02)."""
    _set_action(user, action)
    workflow = FlowAfterSignal.create(hero=user)
    perform_next_step(workflow)
    assert hero_counter(user.id) == 0


def test_signals_are_base_exceptions():
    """Signals derive from BaseException, not Exception (R-FC-02)."""
    assert issubclass(FlowControlSignal, BaseException)
    assert not issubclass(FlowControlSignal, Exception)


def test_except_exception_does_not_swallow_pause(user):
    """`except Exception` in a body cannot catch a pause (R-FC-02)."""
    workflow = FlowSwallow.create(hero=user)
    execution = perform_next_step(workflow)
    assert workflow_row(workflow.id)["state"] == "paused"
    assert execution_row(execution.id)["state"] == "canceled"
    assert hero_counter(user.id) == 0


def test_in_step_pause_cancels_the_execution_and_resume_reruns_it(user):
    """In-step pause: execution canceled, workflow paused at this step; resume re-runs
    it (R-FC-11).
    """
    workflow = FlowInStepPause.create(hero=user)
    perform_next_step(workflow)
    with clock.frozen(T0):
        gate = perform_next_step(workflow)
    row = execution_row(gate.id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert row["canceled_at"] == row["finished_at"] == T0
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"], wf["current_step_name"]) == (
        "paused",
        "gate",
        None,
    )
    assert wf["transitioned_at"] == T0
    assert hero_counter(user.id) == 2  # writes before the signal persist (R-EXE-38)
    again = workflow.resume()
    assert again.step_name == "gate"
    assert again.id != gate.id
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 12


def test_in_step_skip_advances_to_the_next_step(user):
    """In-step skip: execution skipped, next step scheduled (R-FC-12)."""
    _set_action(user, "skip")
    workflow = FlowAfterSignal.create(hero=user)
    execution = perform_next_step(workflow)
    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("skipped", "skipped")
    assert row["skipped_at"] == row["finished_at"]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("ready", "tail")
    speedrun_workflow(workflow)
    assert hero_counter(user.id) == 1


def test_in_step_skip_on_the_last_step_finishes(user):
    """Skipping the last step finishes the workflow (R-FC-12)."""
    workflow = FlowSkipLast.create(hero=user)
    perform_next_step(workflow)
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("finished", None)


def test_in_step_cancel_cancels_the_workflow(user):
    """In-step cancel: execution and workflow canceled (R-FC-10)."""
    _set_action(user, "cancel")
    workflow = FlowAfterSignal.create(hero=user)
    execution = perform_next_step(workflow)
    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert len(execution_rows(workflow.id)) == 1


def test_in_step_reattempt_reschedules_with_wait(user):
    """In-step reattempt: completed/reattempted with reason flow_control, same step
    after wait (R-FC-13, R-SE-30).
    """
    workflow = FlowReattempt.create(hero=user)
    with clock.frozen(T0):
        first = perform_next_step(workflow)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("scheduled", None),
    ]
    assert rows[0]["id"] == first.id
    assert rows[0]["metadata"]["reattempt_reason"] == "flow_control"
    assert rows[1]["step_name"] == "poll"
    assert rows[1]["scheduled_for"] == T0 + timedelta(minutes=5)
    assert workflow_row(workflow.id)["state"] == "ready"
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 3


def test_in_step_finish_finishes_and_clears_step_names(user):
    """In-step finish: completed/success, workflow finished, both names cleared
    (R-FC-14).
    """
    with clock.frozen(T0):
        workflow = FlowFinish.create(hero=user)
        execution = perform_next_step(workflow)
    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"], wf["next_step_name"]) == (
        "finished",
        None,
        None,
    )
    assert wf["transitioned_at"] == T0
    assert len(execution_rows(workflow.id)) == 1
    assert hero_counter(user.id) == 0


def _flow_control_lines(caplog):
    """The flow-control log lines, without their workflow and execution tags."""
    return [
        message.rsplit("] ", 1)[-1]
        for message in caplog.messages
        if "flow control:" in message
    ]


@pytest.mark.parametrize("action", ["pause", "skip", "cancel", "finish"])
def test_in_step_calls_are_logged(user, caplog, action):
    """Each in-step call logs "flow control: <action> called from step" (R-FC-03)."""
    _set_action(user, action)
    workflow = FlowAfterSignal.create(hero=user)
    with caplog.at_level(logging.INFO, logger="flask_geneva"):
        perform_next_step(workflow)
    assert _flow_control_lines(caplog) == [f"flow control: {action} called from step"]


def test_in_step_reattempt_and_suspend_log_their_wait(user, caplog):
    """reattempt() logs its wait and rewind, suspend() its wait (R-FC-03)."""
    with caplog.at_level(logging.INFO, logger="flask_geneva"):
        perform_next_step(FlowReattempt.create(hero=user))
        perform_next_step(FlowSuspendsWithWait.create(hero=user))
    assert _flow_control_lines(caplog) == [
        "flow control: reattempt called from step",
        "flow control: reattempt wait=0:05:00 rewind=False",
        "flow control: suspend called from step",
        "flow control: suspend wait=0:07:00",
    ]


def test_external_calls_are_not_logged_as_in_step(user, caplog):
    """An operator's pause is not an in-step call (R-FC-03, R-FC-01)."""
    workflow = CountingThreeSteps.create(hero=user)
    with caplog.at_level(logging.INFO, logger="flask_geneva"):
        workflow.pause()
    assert _flow_control_lines(caplog) == []


def test_suspend_in_a_regular_step_is_an_error(user):
    """suspend() in a regular step raises InvalidStateError handled by the policy
    (R-FC-15).
    """
    workflow = FlowSuspendRegular.create(hero=user)
    execution_id = workflow.current_execution.id
    with pytest.raises(InvalidStateError, match="resumable_step"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert "resumable_step" in row["error_message"]
    assert workflow_row(workflow.id)["state"] == "paused"


# -- flow control while conditions run (R-FC-01, R-EXE-23) -----------------------------


@pytest.mark.parametrize("workflow_cls", [FlowCancelIfSignals, FlowSkipIfSignals])
def test_flow_control_in_conditions_is_a_condition_error(user, workflow_cls):
    """Flow control inside cancel_if/skip_if raises InvalidStateError, handled as a
    condition exception (R-FC-01, R-EXE-23).
    """
    workflow = workflow_cls.create(hero=user)
    execution_id = workflow.current_execution.id
    with pytest.raises(InvalidStateError, match="conditions"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert "conditions" in row["error_message"]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == ("paused", None)
    assert hero_counter(user.id) == 0


# -- external operations (R-EXT-01..06) ------------------------------------------------


def test_external_pause_from_ready_keeps_the_scheduled_execution(user):
    """External pause leaves the scheduled execution untouched (R-EXT-01)."""
    with clock.frozen(T0):
        workflow = CountingThreeSteps.create(hero=user)
    before = execution_rows(workflow.id)
    with clock.frozen(T0 + timedelta(minutes=1)):
        workflow.pause()
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["transitioned_at"]) == ("paused", T0 + timedelta(minutes=1))
    after = execution_rows(workflow.id)
    assert after == before
    assert (after[0]["state"], after[0]["outcome"]) == ("scheduled", None)


@pytest.mark.parametrize("state", ["paused", "finished", "canceled"])
def test_external_pause_is_rejected_unless_ready_or_performing(user, state):
    """pause() from paused/finished/canceled raises "Cannot pause a <state> workflow"
    (R-EXT-01).
    """
    workflow = CountingThreeSteps.create(hero=user)
    workflow.transition_to(state)
    with pytest.raises(InvalidStateError, match=f"^Cannot pause a {state} workflow$"):
        workflow.pause()
    assert workflow_row(workflow.id)["state"] == state


def test_resume_after_external_pause_then_run(user):
    """After an external pause and resume the workflow runs to the end (R-EXT-01,
    R-EXT-21).
    """
    workflow = CountingThreeSteps.create(hero=user)
    workflow.pause()
    workflow.resume()
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 111


def test_external_skip_marks_the_execution_and_schedules_the_next(user):
    """External skip from ready: execution skipped, next step scheduled (R-EXT-04)."""
    workflow = CountingThreeSteps.create(hero=user)
    first_id = workflow.current_execution.id
    with clock.frozen(T0):
        workflow.skip()
    row = execution_row(first_id)
    assert (row["state"], row["outcome"]) == ("skipped", "skipped")
    assert row["skipped_at"] == row["finished_at"] == T0
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("ready", "second")
    assert execution_rows(workflow.id)[-1]["state"] == "scheduled"


def test_external_skip_walks_all_steps_and_finishes(user):
    """Repeated skips walk the steps and finally finish (R-EXT-05)."""
    workflow = CountingThreeSteps.create(hero=user)
    for expected in ("second", "third"):
        workflow.skip()
        assert workflow_row(workflow.id)["next_step_name"] == expected
    workflow.skip()
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("finished", None)
    assert [r["state"] for r in execution_rows(workflow.id)] == ["skipped"] * 3
    assert hero_counter(user.id) == 0


def test_external_skip_from_paused(user):
    """Skip on a paused workflow makes it ready and schedules the next step
    (R-EXT-04).
    """
    workflow = CountingThreeSteps.create(hero=user)
    first_id = workflow.current_execution.id
    workflow.pause()
    workflow.skip()
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["transitioned_at"], wf["next_step_name"]) == (
        "ready",
        None,
        "second",
    )
    assert execution_row(first_id)["state"] == "canceled"
    speedrun_workflow(workflow)
    assert hero_counter(user.id) == 110


@pytest.mark.parametrize("state", ["finished", "canceled"])
def test_external_skip_is_rejected_on_terminal_workflows(user, state):
    """skip() on finished/canceled raises "Cannot skip on a <state> workflow"
    (R-EXT-04).
    """
    workflow = CountingThreeSteps.create(hero=user)
    workflow.transition_to(state)
    with pytest.raises(InvalidStateError, match=f"^Cannot skip on a {state} workflow$"):
        workflow.skip()


def test_external_skip_with_expected_step_skips_only_that_step(user):
    """skip(expected_step=...) refuses once the current step moved on (R-EXT-04/05)."""
    workflow = CountingThreeSteps.create(hero=user)
    workflow.skip(expected_step="first")
    assert workflow.next_step_name == "second"
    with pytest.raises(
        InvalidStateError,
        match=r"^Cannot skip step 'first': the current step of workflow \d+ is now 'second'",
    ):
        workflow.skip(expected_step="first")
    db.session.expire_all()
    assert (workflow.state, workflow.next_step_name) == ("ready", "second")
    workflow.skip()  # without the guard, repeated skips walk on (R-EXT-05)
    assert workflow.next_step_name == "third"


@pytest.mark.parametrize("method", ["reattempt", "finish", "suspend"])
def test_in_step_only_operations_fail_outside_a_step(user, method):
    """reattempt/finish/suspend outside a step raise InvalidStateError (R-EXT-06)."""
    workflow = CountingThreeSteps.create(hero=user)
    with pytest.raises(
        InvalidStateError, match="can only be called from within a step"
    ):
        getattr(workflow, method)()
    assert workflow_row(workflow.id)["state"] == "ready"


def test_external_pause_of_a_performing_workflow(user):
    """Pausing a performing workflow from outside pauses it; the executor records the
    completed body and preserves the next step, so resume() never runs the finished
    step again (R-EXT-02, R-EXE-42 amended).
    """
    FlowPerformingExternal.operation = "pause"
    workflow = FlowPerformingExternal.create(hero=user)
    execution_id = workflow.current_execution.id
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("paused", "tail")
    assert wf["transitioned_at"] is not None
    assert len(execution_rows(workflow.id)) == 2
    assert hero_counter(user.id) == 1
    resumed = workflow.resume()
    assert resumed.step_name == "tail"


def test_external_cancel_of_a_performing_workflow(user):
    """Canceling a performing workflow from outside cancels it; the executor records the
    completed body and schedules nothing (R-EXT-03, R-EXE-42 amended).
    """
    FlowPerformingExternal.operation = "cancel"
    workflow = FlowPerformingExternal.create(hero=user)
    execution_id = workflow.current_execution.id
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    assert hero_counter(user.id) == 1
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert len(execution_rows(workflow.id)) == 1


def test_skip_of_a_performing_workflow_is_rejected(user):
    """skip() is not allowed on a performing workflow (R-EXT-04)."""
    FlowPerformingExternal.operation = "skip"
    workflow = FlowPerformingExternal.create(hero=user)
    with pytest.raises(
        InvalidStateError, match=r"^Cannot skip on a performing workflow$"
    ):
        perform_next_step(workflow)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [("failed", "failed")]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_flow_control_on_another_workflow_is_external(user):
    """Inside a step, flow control on a different workflow acts externally (R-FC-01)."""
    target = CountingThreeSteps.create(hero=make_user())
    FlowOtherWorkflow.target_id = target.id
    workflow = FlowOtherWorkflow.create(hero=user)
    perform_next_step(workflow)
    assert workflow_row(target.id)["state"] == "paused"
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 1


@pytest.mark.parametrize(
    ("held", "stored", "action", "expected"),
    [
        ("paused", "ready", "pause", "paused"),
        ("ready", "paused", "resume", "ready"),
        ("finished", "paused", "cancel", "canceled"),
        ("finished", "paused", "skip", "ready"),
    ],
)
def test_operator_actions_check_the_locked_row_not_a_stale_copy(
    user, held, stored, action, expected
):
    """An operator action on a stale copy of a workflow (it says ``held``, the row
    says ``stored``) acts on the state read under the lock, not on the copy's
    (R-EXT-01, R-EXT-03, R-EXT-04, R-EXT-20).
    """
    workflow_id = CountingThreeSteps.create(hero=user).id
    db.session.commit()
    update_workflow(workflow_id, state=held)
    stale = db.session.get(geneva.Workflow, workflow_id, populate_existing=True)
    db.session.expunge(stale)
    db.session.commit()
    update_workflow(workflow_id, state=stored)
    assert stale.state == held
    getattr(stale, action)()
    assert workflow_row(workflow_id)["state"] == expected
