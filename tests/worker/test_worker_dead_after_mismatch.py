"""A worker judged with a shorter dead-after than its own is not killed (R-WRK-17).

Real Celery workers and databases: each process judges a worker with the
greater of its own ``GENEVA_WORKER_DEAD_AFTER`` and the one the worker recorded
at registration, so a rolling deploy or a beat process with other settings can
slow recovery, never recover a live worker's running step (issue 17, h20
finding 2).
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from tests.apps import basic
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_files
from tests.worker import heartbeat_worker

FLAG_DIR_VARIABLE = heartbeat_worker.FLAG_DIR_VARIABLE
INCLUDE = ("--include", "tests.worker.test_worker_dead_after_mismatch")
_executions = heartbeat_worker.executions
_housekeeping = heartbeat_worker.run_housekeeping


def test_a_worker_with_a_longer_interval_than_the_recoverers_dead_after(
    heartbeat_app, start_worker, tmp_path
):
    """Rolling deploy: the worker heartbeats every 2 s with its own dead-after
    8 s; the process running housekeeping has interval 0.5 s and dead-after 1 s,
    and another worker heartbeats every 0.2 s (the evidence, R-WRK-14). The
    slow worker recorded 8 s at registration, so housekeeping judges it with
    8 s, not 1 s: its running step is never recovered, and runs once
    (R-WRK-17)."""
    app = heartbeat_app
    workflow_id = heartbeat_worker.create(
        app, heartbeat_worker.ReleasedOnce, "mismatch@example.com"
    )
    slow = start_worker(
        *INCLUDE,
        name="slow",
        env={
            "GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL": "2",
            "GENEVA_TEST_WORKER_DEAD_AFTER": "8",
        },
    )
    try:
        wait_for_files(tmp_path, "started-*")
        # Another (idle) worker with the new, short interval: the evidence.
        start_worker(
            *INCLUDE,
            name="fast",
            env={
                "GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL": "0.2",
                "GENEVA_TEST_WORKER_DEAD_AFTER": "0.5",
            },
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
        (tmp_path / "release").touch()  # no blocked step delays the workers' stop
