"""Recovery of a step that ran past its timeout applies the step's exception
policies to StepTimeout (R-STO-20, R-STO-21, R-HK-24..29, R-CNT-01).

Celery's hard time limit kills the process still running a step
``GENEVA_STEP_TIMEOUT_GRACE`` after its timeout; the worker's heartbeats then
stop and recovery finds the execution ``in_progress``. It records the timeout
as the cause when the worker heartbeat past the timeout (or, without a known
heartbeat, when the timeout has passed), and hands the ``StepTimeout`` to the
step's policies as finalize does with the soft limit's: a step that hangs is
not reattempted forever. A worker lost before the timeout keeps
``GENEVA_STUCK_RECOVERY_ACTION``; a paused or ended workflow keeps R-HK-27.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import StepTimeout
from flask_geneva import on_exception
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine.operators.dispatcher import run_dispatcher
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.housekeeping import RecordingReporter
from tests.support.housekeeping import make_in_progress
from tests.support.workers import DEAD_AFTER
from tests.support.workers import insert_worker
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import in_other_thread
from tests.support.workflow import make_user
from tests.support.workflow import run_together
from tests.support.workflow import signal_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

STEP_TIMEOUT = "flask_geneva.exceptions.StepTimeout"
WORKER_LOST = "flask_geneva.exceptions.WorkerLostError"
T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


class RecoverTimedDefault(geneva.Workflow):
    @step(timeout=timedelta(minutes=1))
    def work(self):
        pass

    @step
    def tail(self):
        pass


class RecoverTimedTenMinutes(geneva.Workflow):
    @step(timeout=timedelta(minutes=10))
    def work(self):
        pass


class RecoverTimedReattempt(geneva.Workflow):
    @step(
        timeout=timedelta(minutes=1),
        on_exception=ExceptionPolicy(
            "reattempt",
            wait=timedelta(minutes=5),
            max_reattempts=2,
            terminal_action="cancel",
        ),
    )
    def work(self):
        pass


class RecoverTimedSkip(geneva.Workflow):
    @step(
        timeout=timedelta(minutes=1),
        on_exception=[
            ExceptionPolicy("cancel", matching=KeyError),
            ExceptionPolicy("skip", matching=StepTimeout, report="never"),
        ],
    )
    def work(self):
        pass

    @step
    def tail(self):
        pass


class RecoverTimedClassCancel(geneva.Workflow):
    exception_policies = [on_exception(StepTimeout, action="cancel")]

    @step(timeout=timedelta(minutes=1))
    def work(self):
        pass


class RecoverTimedHandler(geneva.Workflow):
    handled: list = []

    @step(timeout=timedelta(minutes=1), on_exception=ExceptionPolicy(handler="note"))
    def work(self):
        pass

    @step
    def tail(self):
        pass

    def note(self, error):
        RecoverTimedHandler.handled.append((self.id, type(error).__name__))
        self.skip()


class RecoverTimedSignal(geneva.Workflow):
    """Its worker dies in the body (SystemExit escapes it, R-EXE-35)."""

    @step(wait_for="approved", timeout=timedelta(minutes=1), on_exception="skip")
    def work(self):
        raise SystemExit("the worker process is killed")

    @step
    def tail(self):
        pass


class LateBody:
    """The body of :class:`RecoverLateWorker`: it hangs past its timeout (the
    frozen clock moves two hours), during which recovery runs."""

    frozen = None
    runs = 0
    recovered: int | None = None


class RecoverLateWorker(geneva.Workflow):
    @step(timeout=timedelta(minutes=1), on_exception="reattempt")
    def work(self):
        LateBody.runs += 1
        LateBody.frozen.advance(timedelta(hours=2))
        LateBody.recovered = in_other_thread(
            lambda: run_housekeeping()["stuck_in_progress_recovered"]
        )


@pytest.fixture
def reporter():
    return RecordingReporter()


@pytest.fixture
def app_config(reporter):
    return {
        "GENEVA_WORKER_HEARTBEAT_INTERVAL": timedelta(seconds=15),
        "GENEVA_WORKER_DEAD_AFTER": DEAD_AFTER,
        "GENEVA_ERROR_REPORTER": reporter,
    }


def _running_on_dead_worker(workflow, minutes_ago=10):
    """The workflow's current execution in progress since ``minutes_ago`` on a
    worker that last heartbeat 2 min ago (dead: DEAD_AFTER is 60 s), while
    another worker heartbeats; returns the dead worker's id."""
    db.session.rollback()  # SQLite: no read transaction while the rows are written
    insert_worker(timedelta(0))
    dead = insert_worker(DEAD_AFTER * 2)
    execution_id = make_in_progress(
        workflow, clock.now() - timedelta(minutes=minutes_ago)
    )
    update_execution(execution_id, worker_id=dead)
    db.session.rollback()
    return dead


def _dead_worker_running(workflow_cls, minutes_ago=10):
    workflow = workflow_cls.create(hero=make_user())
    dead = _running_on_dead_worker(workflow, minutes_ago)
    return workflow, dead


def _execution(workflow_id, index=0):
    rows = execution_rows(workflow_id)
    db.session.expire_all()
    execution = db.session.get(geneva.StepExecution, rows[index]["id"])
    db.session.rollback()
    return execution


@pytest.mark.parametrize("recover_with", ["housekeeping", "dispatcher"])
def test_a_timed_out_step_without_a_policy_is_paused_by_the_default(
    app, reporter, recover_with
):
    """The worker heartbeat past the one-minute timeout and died: recovery records
    StepTimeout naming the worker and hands it to the policies; without one the
    default pauses the workflow (failed/failed), nothing is scheduled, and the
    error is reported after the commit (R-STO-20, R-STO-21, R-POL-40, R-HK-29)."""
    workflow, dead = _dead_worker_running(RecoverTimedDefault)
    if recover_with == "housekeeping":
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    else:
        assert run_dispatcher(current_context()).recovered == 1
    assert execution_history(workflow.id) == [("work", "failed", "failed")]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == ("paused", None)
    recovered = _execution(workflow.id)
    assert recovered.error_class_name == STEP_TIMEOUT
    message = recovered.error_message
    assert message.startswith("step 'work' ran past its timeout of 1 min (in progress")
    assert f"worker {dead} (celery@host, host host, pid 4242) was lost" in message
    by = "the dispatcher" if recover_with == "dispatcher" else "housekeeping"
    assert f"recovered by {by}" in message
    details = recovered.read_metadata("recovery")
    assert (details["cause"], details["by"], details["timeout_seconds"]) == (
        "timeout",
        recover_with,
        60.0,
    )
    assert details["worker"]["id"] == dead
    decision = recovered.read_metadata("policy_decision")
    assert (decision["source"], decision["action"], decision["reported"]) == (
        "default",
        "pause",
        True,
    )
    assert [type(error).__name__ for error, _ in reporter.calls] == ["StepTimeout"]
    context = reporter.calls[0][1]
    assert context["geneva_drive"]["step_execution_id"] == recovered.id
    assert context["recovery"] is True


def test_a_reattempt_policy_counts_each_timeout_and_ends_the_loop(app):
    """Each recovery of a timed-out run is a policy reattempt (completed/
    reattempted, reason exception_policy) after the policy's wait, counted
    towards max_reattempts: the third timeout applies the terminal action
    instead of scheduling the step again (R-STO-20, R-CNT-01, R-POL-10, R-SE-21)."""
    workflow = RecoverTimedReattempt.create(hero=make_user())
    for attempt in range(3):
        _running_on_dead_worker(workflow)
        before = clock.now()
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
        if attempt < 2:
            retry = execution_rows(workflow.id)[-1]
            assert retry["state"] == "scheduled"
            due = retry["scheduled_for"]
            due = due.replace(tzinfo=UTC) if due.tzinfo is None else due
            assert due - before >= timedelta(minutes=5) - timedelta(seconds=1)
        db.session.expire_all()
        workflow = geneva.Workflow.get(workflow.id)
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "completed", "reattempted"),
        ("work", "failed", "canceled"),
    ]
    assert workflow_row(workflow.id)["state"] == "canceled"
    first, _, last = (_execution(workflow.id, index) for index in range(3))
    assert first.reattempt_reason == "exception_policy"
    # R-SE-21: a reattempted execution has its error in the metadata only.
    assert first.error_class_name is None
    assert first.exception_info["class"] == STEP_TIMEOUT
    assert first.read_metadata("recovery")["cause"] == "timeout"
    decision = last.read_metadata("policy_decision")
    assert (
        decision["action"],
        decision["terminal"],
        decision["consecutive_reattempts"],
    ) == ("cancel", True, 2)
    assert last.error_class_name == STEP_TIMEOUT


def test_a_skip_policy_and_a_class_policy_decide_whatever_the_recovery_action(
    app, reporter
):
    """The step's matching policy (skip) and a class-level policy (cancel) decide,
    not GENEVA_STUCK_RECOVERY_ACTION; report="never" reports nothing (R-STO-20,
    R-POL-30, R-POL-40, R-REP-01)."""
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    skipped, _ = _dead_worker_running(RecoverTimedSkip)
    canceled, _ = _dead_worker_running(RecoverTimedClassCancel)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 2
    assert execution_history(skipped.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]
    assert workflow_row(skipped.id)["state"] == "ready"
    assert _execution(skipped.id).error_class_name == STEP_TIMEOUT
    assert execution_history(canceled.id) == [("work", "failed", "canceled")]
    assert workflow_row(canceled.id)["state"] == "canceled"
    decision = _execution(canceled.id).read_metadata("policy_decision")
    assert (decision["source"], decision["action"]) == ("class_specific", "cancel")
    assert [type(error).__name__ for error, _ in reporter.calls] == ["StepTimeout"]


def test_an_imperative_handler_runs_in_recovery(app):
    """A handler policy is called with the workflow and the StepTimeout; its skip
    decides (R-STO-20, R-POL-11)."""
    RecoverTimedHandler.handled = []
    workflow, _ = _dead_worker_running(RecoverTimedHandler)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert RecoverTimedHandler.handled == [(workflow.id, "StepTimeout")]
    assert execution_history(workflow.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]


def test_a_worker_lost_before_the_timeout_keeps_the_recovery_action(app):
    """Its last heartbeat came before the ten-minute timeout passed: the worker
    was lost, not the timeout; WorkerLostError is recorded and the recovery
    action reattempts as before, no policy decides (R-STO-21, R-HK-24, R-HK-29)."""
    workflow, _ = _dead_worker_running(RecoverTimedTenMinutes, minutes_ago=5)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert execution_history(workflow.id) == [
        ("work", "completed", "recovered"),
        ("work", "scheduled", None),
    ]
    recovered = _execution(workflow.id)
    assert recovered.error_class_name == WORKER_LOST
    assert recovered.read_metadata("recovery")["cause"] == "worker_lost"
    assert recovered.read_metadata("policy_decision") is None


def test_the_age_rule_applies_the_policy_once_the_timeout_passed(app):
    """Without a worker (the age rule), an execution in progress longer than its
    timeout records StepTimeout and its policy (skip) decides (R-STO-20,
    R-STO-21, R-HK-20)."""
    workflow = RecoverTimedSkip.create(hero=make_user())
    make_in_progress(workflow, clock.now() - timedelta(hours=2))
    db.session.rollback()
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert execution_history(workflow.id)[0] == ("work", "skipped", "skipped")
    recovered = _execution(workflow.id)
    assert "no worker is recorded for it" in recovered.error_message
    assert recovered.read_metadata("recovery")["cause"] == "timeout"


def test_a_skipped_wait_for_step_consumes_its_claimed_signal(app):
    """A wait_for step claimed its signal, then its worker died past the timeout;
    the skip policy applied by recovery consumes the signal, as finalize's skip
    would (R-STO-20, R-WSIG-15)."""
    with clock.frozen(T0) as frozen:
        workflow = RecoverTimedSignal.create(hero=make_user())
        perform_next_step(workflow)  # parks at the gate
        workflow.signal("approved")
        with pytest.raises(SystemExit):
            perform_next_step(workflow)
        db.session.rollback()
        assert execution_history(workflow.id)[-1] == ("work", "in_progress", None)
        assert [row["state"] for row in signal_rows(workflow.id)] == ["claimed"]
        frozen.advance(timedelta(hours=2))
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert execution_history(workflow.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]
    assert [row["state"] for row in signal_rows(workflow.id)] == ["consumed"]


@pytest.mark.parametrize("state", ["paused", "canceled"])
def test_a_paused_or_canceled_workflow_keeps_its_recovery(app, reporter, state):
    """An operator paused or canceled the workflow while the step ran: their
    state wins, as in finalize; the execution is recovered as R-HK-27 says,
    StepTimeout recorded, no policy decides (R-STO-20, R-HK-27, R-EXE-42)."""
    workflow, _ = _dead_worker_running(RecoverTimedReattempt)
    update_workflow(workflow.id, state=state)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    expected = (
        ("completed", "recovered") if state == "paused" else ("canceled", "canceled")
    )
    assert execution_history(workflow.id) == [("work", *expected)]
    assert workflow_row(workflow.id)["state"] == state
    recovered = _execution(workflow.id)
    assert recovered.error_class_name == STEP_TIMEOUT
    assert recovered.read_metadata("policy_decision") is None
    assert reporter.calls == []


def test_an_operator_recovery_applies_the_policy(app):
    """workflow.recover() of a dead worker's execution past its timeout applies
    its policy (reattempt) and names the operator (R-STO-20, R-HK-28)."""
    workflow, _ = _dead_worker_running(RecoverTimedReattempt)
    workflow.recover(actor="bob", via="cli")
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "scheduled", None),
    ]
    recovered = _execution(workflow.id)
    assert "recovered by bob via cli" in recovered.exception_info["message"]
    details = recovered.read_metadata("recovery")
    assert (details["cause"], details["by"], details["actor"]) == (
        "timeout",
        "operator",
        "bob",
    )


def test_recovery_while_the_late_worker_still_runs_then_its_finalize_is_left(app):
    """The body hangs past its timeout and recovery applies the policy meanwhile
    (a reattempt); when the late body returns, its finalize finds the execution
    no longer in progress and leaves it: the body ran once, one reattempt is
    scheduled (R-STO-20, R-EXE-41)."""
    LateBody.runs, LateBody.recovered = 0, None
    with clock.frozen(T0) as frozen:
        LateBody.frozen = frozen
        workflow = RecoverLateWorker.create(hero=make_user())
        perform_next_step(workflow)
    assert (LateBody.runs, LateBody.recovered) == (1, 1)
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "scheduled", None),
    ]
    assert _execution(workflow.id).read_metadata("recovery")["cause"] == "timeout"


# SQLite has one writer: the racers would wait for its lock, not for the rows'.
@pytest.mark.backends("postgresql", "mysql")
def test_recoveries_racing_on_one_timed_out_step_apply_its_policy_once(app):
    """Housekeeping, the dispatcher and an operator recover one timed-out
    execution at once: under the row locks one applies the policy, the others
    find it no longer in progress and leave it (R-STO-20, R-HK-23, R-HK-28)."""
    workflow, _ = _dead_worker_running(RecoverTimedReattempt)
    workflow_id = workflow.id

    def operator():
        try:
            geneva.Workflow.get(workflow_id).recover(actor="bob", via="cli")
        except InvalidStateError:
            return 0
        return 1

    results = run_together(
        app,
        [
            lambda: run_housekeeping()["stuck_in_progress_recovered"],
            lambda: run_dispatcher(current_context()).recovered,
            operator,
        ],
    )
    assert sum(results) == 1
    assert execution_history(workflow_id) == [
        ("work", "completed", "reattempted"),
        ("work", "scheduled", None),
    ]
