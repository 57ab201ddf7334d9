"""A live worker's execution whose run ended is recovered (R-WRK-18, R-EXE-35).

Real Celery workers and databases: the run ends without finalize committing
(finalize fails, or a BaseException escapes the step) while the worker lives on
and heartbeats; its heartbeat thread releases the execution (worker_id NULL,
job_id naming the worker), and recovery takes it: the next dispatcher run
(R-FLT-11), and housekeeping's stuck criteria count it too (R-HK-20,
R-WRK-06). Before, it stayed ``in_progress`` for as long as the worker lived.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from tests.apps import basic
from tests.support.common_workflows import EscapesWithCancelledError
from tests.support.worker_harness import stop
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_files
from tests.worker import heartbeat_worker

FLAG_DIR_VARIABLE = heartbeat_worker.FLAG_DIR_VARIABLE
INCLUDE = ("--include", "tests.worker.test_live_worker_release")


_executions = heartbeat_worker.executions
_housekeeping = heartbeat_worker.run_housekeeping


def _released(app, workflow_id):
    return [(r.state, r.worker_id) for r in _executions(app, workflow_id)] == [
        ("in_progress", None)
    ]


def test_an_execution_whose_finalize_failed_in_a_live_worker_is_recovered(
    heartbeat_app, start_worker, worker_database_url, tmp_path
):
    """The worker is alive, but the step's run is over: its finalize raised
    (here a lock timeout on the workflow row; in production a failover between
    the body and finalize). The worker's heartbeat releases the execution once
    GENEVA_WORKER_DEAD_AFTER passed since it started, and the age rule
    (GENEVA_STUCK_IN_PROGRESS_THRESHOLD) recovers it (R-WRK-18, R-WRK-06)."""
    app = heartbeat_app
    configured = sa.make_url(worker_database_url)
    backend = configured.get_backend_name()
    # Added to the URL's own query (CI's PostgreSQL URL carries options already).
    if backend == "postgresql":
        options = configured.query.get("options", "")
        options = " ".join(filter(None, [str(options), "-c lock_timeout=1000"]))
        extra = {"options": options}
    elif backend == "mysql":
        extra = {"init_command": "SET innodb_lock_wait_timeout=1"}
    else:
        pytest.skip("needs a server database")
    url = configured.update_query_dict(extra).render_as_string(hide_password=False)
    workflow_id = heartbeat_worker.create(
        app, heartbeat_worker.ReleasedOnce, "finalize@example.com"
    )
    worker = start_worker(*INCLUDE, database_url=url)
    wait_for_files(tmp_path, "started-*")
    with app.app_context():
        engine = basic.db.engine
    locker = engine.connect()
    trans = locker.begin()
    wf = basic.db.metadata.tables["geneva_drive_workflows"]
    locker.execute(sa.select(wf.c.id).where(wf.c.id == workflow_id).with_for_update())
    (tmp_path / "release").touch()
    wait_for_files(tmp_path, "ran-*", timeout=30)
    time.sleep(3)  # the finalize waits 1 s for the lock, then fails
    trans.rollback()
    locker.close()
    wait_for(lambda: _released(app, workflow_id), timeout=30)
    assert worker.poll() is None  # the worker lives on and heartbeats
    summary = _housekeeping(
        app, GENEVA_STUCK_IN_PROGRESS_THRESHOLD=timedelta(seconds=1)
    )
    rows = _executions(app, workflow_id)
    assert summary["stuck_in_progress_recovered"] == 1, (summary, rows)
    assert rows[0].state != "in_progress"


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_step_escaping_with_cancelled_error_is_recovered(
    heartbeat_app, start_worker, processes, pool
):
    """asyncio.CancelledError (a BaseException, no flow-control signal) escapes
    the step: it is logged at ERROR with the execution id (R-EXE-35), the
    worker's heartbeat releases the execution and the age rule recovers it
    (R-WRK-18)."""
    app = heartbeat_app
    workflow_id = heartbeat_worker.create(
        app, EscapesWithCancelledError, "cancelled@example.com"
    )
    [(execution_id, *_)] = _executions(app, workflow_id)
    worker = start_worker(*INCLUDE, f"--pool={pool}", "--concurrency=1")
    wait_for(lambda: _released(app, workflow_id), timeout=60)
    assert worker.poll() is None
    summary = _housekeeping(
        app, GENEVA_STUCK_IN_PROGRESS_THRESHOLD=timedelta(seconds=1)
    )
    assert summary["stuck_in_progress_recovered"] == 1, _executions(app, workflow_id)
    stop(worker)
    log = processes.log(worker)
    assert f"step execution {execution_id}: CancelledError escaped the step" in log
