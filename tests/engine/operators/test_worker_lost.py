"""A recovered in-progress execution says its worker was lost (issue 34, R-HK-29).

Recovery used to end it ``completed``/``recovered`` with no error and empty
details, which read as if the step (a payment, say) had completed. It now
records ``WorkerLostError`` with the worker's name and its last heartbeat (or,
without a worker, how long it had been in progress) in the error columns and
the metadata key ``recovery``.
"""

from __future__ import annotations

from datetime import UTC
from datetime import timedelta

import pytest

from flask_geneva import WorkerLostError
from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.db import workers as worker_rows
from flask_geneva.engine.operators.dispatcher import run_dispatcher
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingOneStep
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workers import DEAD_AFTER
from tests.support.workers import heartbeat_settings  # noqa: F401 - app_config
from tests.support.workers import insert_worker
from tests.support.workers import running_on
from tests.support.workers import workers_table
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

WORKER_LOST = "flask_geneva.exceptions.WorkerLostError"


def _recovered(workflow_id):
    """The workflow's first execution (the recovered one) as the ORM reads it,
    and the id of the execution recovery scheduled after it."""
    rows = execution_rows(workflow_id)
    db.session.expire_all()
    recovered = db.session.get(geneva.StepExecution, rows[0]["id"])
    db.session.rollback()
    return recovered, [row["id"] for row in rows[1:]]


def _last_heartbeat(worker_id):
    with db.engine.connect() as connection:
        return worker_rows.last_heartbeat(connection, workers_table(), worker_id)


@pytest.mark.parametrize("recover_with", ["housekeeping", "dispatcher"])
def test_an_execution_of_a_dead_worker_records_the_worker_lost(app, recover_with):
    """The recovered execution names the dead worker (id, node, host, pid) and its
    last heartbeat under WorkerLostError; the step runs again as a new execution
    with a new id (R-HK-29, R-WRK-06, R-HK-24)."""
    insert_worker(timedelta(0))  # another worker heartbeats: evidence (R-WRK-14)
    dead = insert_worker(DEAD_AFTER + timedelta(seconds=15))
    workflow = running_on(CountingOneStep, dead)
    stuck_id = workflow.current_execution.id
    db.session.rollback()  # on SQLite a read holds the write lock
    heartbeat = _last_heartbeat(dead)
    if recover_with == "housekeeping":
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    else:
        assert run_dispatcher(current_context()).recovered == 1
    recovered, rerun = _recovered(workflow.id)
    assert recovered.id == stuck_id
    assert (recovered.state, recovered.outcome) == ("completed", "recovered")
    assert recovered.error_class_name == WORKER_LOST
    message = recovered.error_message
    assert f"worker {dead} (celery@host, host host, pid 4242)" in message
    assert f"last heartbeat {heartbeat:%Y-%m-%d %H:%M:%S} UTC" in message
    assert "may have run in part or in full" in message
    details = recovered.read_metadata("recovery")
    assert details["cause"] == "worker_lost"
    assert details["by"] == recover_with
    assert details["worker"] == {
        "id": dead,
        "node_name": "celery@host",
        "hostname": "host",
        "pid": 4242,
        "last_heartbeat_at": heartbeat.replace(tzinfo=UTC).isoformat(),
    }
    assert recovered.exception_info["class"] == WORKER_LOST
    assert len(rerun) == 1
    assert rerun[0] != stuck_id  # the rerun is a new execution (docs/at-least-once.md)


def test_an_execution_whose_worker_row_is_gone_says_so(app):
    """A worker id with no row: the message says the worker is no longer
    registered and its last heartbeat is unknown (R-HK-29, R-WRK-14)."""
    insert_worker(timedelta(0))
    workflow = running_on(CountingOneStep, "0f0f0f0f-0000-4000-8000-000000000000")
    run_housekeeping()
    recovered, _ = _recovered(workflow.id)
    assert recovered.error_class_name == WORKER_LOST
    assert (
        "worker 0f0f0f0f-0000-4000-8000-000000000000 is no longer registered"
        in recovered.error_message
    )
    assert recovered.read_metadata("recovery")["worker"] == {
        "id": "0f0f0f0f-0000-4000-8000-000000000000",
        "last_heartbeat_at": None,
    }


def test_an_execution_without_a_worker_records_its_age(app):
    """Recovered for age (no worker recorded): WorkerLostError says since when it
    was in progress and that no worker is recorded (R-HK-29, R-HK-20)."""
    workflow = CountingOneStep.create(hero=make_user())
    execution_id = make_in_progress(workflow, T0 - timedelta(hours=2))
    with clock.frozen(T0):
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    recovered, _ = _recovered(workflow.id)
    assert recovered.id == execution_id
    assert recovered.error_class_name == WORKER_LOST
    assert "in progress since 2030-05-01 08:00:00 UTC" in recovered.error_message
    assert "no worker is recorded for it" in recovered.error_message
    details = recovered.read_metadata("recovery")
    assert (details["cause"], details["by"], details["worker"]) == (
        "stuck",
        "housekeeping",
        None,
    )


def test_an_operator_recovery_records_who_recovered(app):
    """``recover()`` of a dead worker's execution records WorkerLostError with the
    worker and the operator (R-HK-29, R-HK-28)."""
    insert_worker(timedelta(0))
    dead = insert_worker(DEAD_AFTER + timedelta(seconds=15))
    workflow = running_on(CountingOneStep, dead)
    update_execution(
        workflow.current_execution.id,
        started_at=clock.now() - timedelta(minutes=5),
    )
    workflow.recover(actor="bob", via="cli")
    recovered, _ = _recovered(workflow.id)
    assert recovered.error_class_name == WORKER_LOST
    assert f"worker {dead} (celery@host" in recovered.error_message
    assert "recovered by bob via cli" in recovered.error_message
    details = recovered.read_metadata("recovery")
    assert (details["cause"], details["by"]) == ("worker_lost", "operator")


def test_worker_lost_error_is_a_geneva_error():
    """The class whose name the execution records is public and picklable
    (R-HK-29, §15.6)."""
    import pickle

    from flask_geneva.exceptions import GenevaError

    error = WorkerLostError("worker gone")
    assert isinstance(error, GenevaError)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert str(copy) == "worker gone"
