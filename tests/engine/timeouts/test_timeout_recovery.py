"""Recovery of a step that ran past its timeout records StepTimeout (R-STO-20,
R-STO-21, R-HK-24..29).

Celery's hard time limit kills the process still running a step
``GENEVA_STEP_TIMEOUT_GRACE`` after its timeout; the worker's heartbeats then
stop and recovery finds the execution ``in_progress``. It applies its rules as
for any lost worker (``GENEVA_STUCK_RECOVERY_ACTION``), and records the timeout
as the cause when the worker heartbeat past the timeout (or, without a known
heartbeat, when the timeout has passed).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine.operators.dispatcher import run_dispatcher
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.housekeeping import make_in_progress
from tests.support.workers import DEAD_AFTER
from tests.support.workers import heartbeat_settings  # noqa: F401 - app_config
from tests.support.workers import insert_worker
from tests.support.workers import running_on
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row

STEP_TIMEOUT = "flask_geneva.exceptions.StepTimeout"
WORKER_LOST = "flask_geneva.exceptions.WorkerLostError"


class RecoverTimedOneMinute(geneva.Workflow):
    @step(timeout=timedelta(minutes=1))
    def work(self):
        pass


class RecoverTimedTenMinutes(geneva.Workflow):
    @step(timeout=timedelta(minutes=10))
    def work(self):
        pass


def _recovered(workflow_id):
    rows = execution_rows(workflow_id)
    db.session.expire_all()
    recovered = db.session.get(geneva.StepExecution, rows[0]["id"])
    db.session.rollback()
    return recovered


def _dead_worker_running(workflow_cls):
    """A workflow whose step started 10 min ago on a worker that last heartbeat
    2 min ago (dead: DEAD_AFTER is 60 s), while another worker heartbeats."""
    insert_worker(timedelta(0))
    dead = insert_worker(DEAD_AFTER * 2)
    workflow = running_on(workflow_cls, dead)
    update_execution(
        workflow.current_execution.id, started_at=clock.now() - timedelta(minutes=10)
    )
    db.session.rollback()
    return workflow, dead


@pytest.mark.parametrize("recover_with", ["housekeeping", "dispatcher"])
def test_a_worker_that_heartbeat_past_the_timeout_records_step_timeout(
    app, recover_with
):
    """Heartbeats after the one-minute timeout: the worker died running the step
    past it; StepTimeout is recorded with the worker and the recovery's rules are
    kept (completed/recovered, the step scheduled again) (R-STO-20, R-STO-21,
    R-HK-24, R-HK-29)."""
    workflow, dead = _dead_worker_running(RecoverTimedOneMinute)
    if recover_with == "housekeeping":
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    else:
        assert run_dispatcher(current_context()).recovered == 1
    recovered = _recovered(workflow.id)
    assert (recovered.state, recovered.outcome) == ("completed", "recovered")
    assert recovered.error_class_name == STEP_TIMEOUT
    message = recovered.error_message
    assert message.startswith("step 'work' ran past its timeout of 1 min (in progress")
    assert f"worker {dead} (celery@host, host host, pid 4242) was lost" in message
    assert (
        f"recovered by {'the dispatcher' if recover_with == 'dispatcher' else 'housekeeping'}"
        in message
    )
    details = recovered.read_metadata("recovery")
    assert (details["cause"], details["by"], details["timeout_seconds"]) == (
        "timeout",
        recover_with,
        60.0,
    )
    assert details["worker"]["id"] == dead
    assert recovered.exception_info["class"] == STEP_TIMEOUT
    assert execution_history(workflow.id)[1] == ("work", "scheduled", None)


def test_a_worker_lost_before_the_timeout_records_worker_lost(app):
    """Its last heartbeat came before the ten-minute timeout passed: the worker
    was lost, not the timeout (R-STO-21, R-HK-29)."""
    workflow, _ = _dead_worker_running(RecoverTimedTenMinutes)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    recovered = _recovered(workflow.id)
    assert recovered.error_class_name == WORKER_LOST
    assert recovered.read_metadata("recovery")["cause"] == "worker_lost"


def test_the_age_rule_records_the_timeout_once_it_passed(app):
    """Without a worker (the age rule), an execution in progress longer than its
    timeout records StepTimeout; the recovery action cancel still applies
    (R-STO-20, R-HK-20, R-HK-25)."""
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    workflow = RecoverTimedOneMinute.create(hero=make_user())
    make_in_progress(workflow, clock.now() - timedelta(hours=2))
    db.session.rollback()
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    recovered = _recovered(workflow.id)
    assert (recovered.state, recovered.outcome) == ("canceled", "recovered")
    assert recovered.error_class_name == STEP_TIMEOUT
    assert "no worker is recorded for it" in recovered.error_message
    assert recovered.read_metadata("recovery")["cause"] == "timeout"
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_an_operator_recovery_records_the_timeout(app):
    """workflow.recover() of a dead worker's execution past its timeout records
    StepTimeout naming the operator (R-STO-20, R-HK-28)."""
    workflow, _ = _dead_worker_running(RecoverTimedOneMinute)
    workflow.recover(actor="bob", via="cli")
    recovered = _recovered(workflow.id)
    assert recovered.error_class_name == STEP_TIMEOUT
    assert "recovered by bob via cli" in recovered.error_message
    details = recovered.read_metadata("recovery")
    assert (details["cause"], details["by"], details["actor"]) == (
        "timeout",
        "operator",
        "bob",
    )
