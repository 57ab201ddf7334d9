"""A worker judged with a shorter dead-after than its own is not killed (R-WRK-17).

Real Celery workers and databases: each process judges a worker with the
greater of its own ``GENEVA_WORKER_DEAD_AFTER`` and the one the worker recorded
at registration, so a rolling deploy or a beat process with other settings can
slow recovery, never recover a live worker's running step (issue 17, h20
finding 2).
"""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

from flask_geneva import step
from tests.apps import basic
from tests.worker import heartbeat_worker
from tests.worker.conftest import wait_for

FLAG_DIR_VARIABLE = "GENEVA_TEST_DEAD_AFTER_FLAG_DIR"
HEARTBEAT = heartbeat_worker.HEARTBEAT
DEAD_AFTER = heartbeat_worker.DEAD_AFTER
INCLUDE = ("--include", "tests.worker.test_worker_dead_after_mismatch")


class DeadAfterBlocking(basic.geneva.Workflow):
    @step
    def blocking(self):
        flags = heartbeat_worker.block_until_released(FLAG_DIR_VARIABLE, os.getpid())
        (flags / f"ran-{os.getpid()}-{time.monotonic_ns()}").touch()

    @step
    def after(self):
        pass


def _create(app, email):
    return heartbeat_worker.create(app, DeadAfterBlocking, email)


_executions = heartbeat_worker.executions
_housekeeping = heartbeat_worker.run_housekeeping
_start_worker = heartbeat_worker.start_worker
_stop = heartbeat_worker.stop


def test_a_worker_with_a_longer_interval_than_the_recoverers_dead_after(
    heartbeat_app, broker_url, worker_database_url, tmp_path
):
    """Rolling deploy: the worker heartbeats every 2 s with its own dead-after
    8 s; the process running housekeeping has interval 0.5 s and dead-after 1 s,
    and another worker heartbeats every 0.2 s (the evidence, R-WRK-14). The
    slow worker recorded 8 s at registration, so housekeeping judges it with
    8 s, not 1 s: its running step is never recovered, and runs once
    (R-WRK-17)."""
    app = heartbeat_app
    workflow_id = _create(app, "mismatch@example.com")
    slow = _start_worker(
        tmp_path,
        worker_database_url,
        broker_url,
        "--pool=solo",
        *INCLUDE,
        name="slow",
        GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL="2",
        GENEVA_TEST_WORKER_DEAD_AFTER="8",
    )
    fast = None
    try:
        wait_for(lambda: list(tmp_path.glob("started-*")), timeout=60)
        # Another (idle) worker with the new, short interval: the evidence.
        fast = _start_worker(
            tmp_path,
            worker_database_url,
            broker_url,
            "--pool=solo",
            *INCLUDE,
            name="fast",
            GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL="0.2",
            GENEVA_TEST_WORKER_DEAD_AFTER="0.5",
        )
        time.sleep(5)
        recovered = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not recovered:
            recovered = _housekeeping(
                app, GENEVA_WORKER_HEARTBEAT_INTERVAL=0.5, GENEVA_WORKER_DEAD_AFTER=1.0
            )["stuck_in_progress_recovered"]
            time.sleep(0.1)
        assert slow.poll() is None
        # The worker is alive and still running the step: nothing may be recovered.
        assert recovered == 0, _executions(app, workflow_id)
        with app.app_context(), basic.db.engine.connect() as connection:
            workers = basic.db.metadata.tables["geneva_drive_workers"]
            recorded = set(connection.scalars(sa.select(workers.c.dead_after_ms)))
        assert recorded == {8000, 500}
        (tmp_path / "release").touch()
        wait_for(
            lambda: (
                [r.state for r in _executions(app, workflow_id)]
                == ["completed", "completed"]
            ),
            timeout=60,
        )
        assert len(list(tmp_path.glob("ran-*"))) == 1
    finally:
        (tmp_path / "release").touch()
        _stop(slow)
        if fast is not None:
            _stop(fast)
