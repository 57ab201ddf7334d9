"""Real workers register, heartbeat, die and are recovered by liveness (R-WRK-02..07).

Workers run ``tests.apps.worker_app`` with a 0.5 s heartbeat and a 3 s dead-after
(``GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL`` / ``..._DEAD_AFTER``). The blocking
step waits for a flag file, so the test can kill a worker (or one prefork child)
while the execution is ``in_progress``.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy as sa

from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import WORKER_APP
from tests.support.worker_harness import celery_command
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_files
from tests.support.worker_harness import wait_for_state
from tests.worker import heartbeat_worker

FLAG_DIR_VARIABLE = "GENEVA_TEST_WRK_FLAG_DIR"
HEARTBEAT = heartbeat_worker.HEARTBEAT
DEAD_AFTER = heartbeat_worker.DEAD_AFTER
INCLUDE = ("--include", "tests.worker.test_worker_heartbeats")


class WrkWorkerBlocking(basic.geneva.Workflow):
    """Its first step blocks until the test writes the ``release`` flag."""

    @step
    def blocking(self):
        # No database access while blocking: on SQLite a read would hold the
        # write lock (BEGIN IMMEDIATE) and block the heartbeats.
        heartbeat_worker.block_until_released(FLAG_DIR_VARIABLE, os.getpid())
        self.hero.counter += 1

    @step
    def after(self):
        self.hero.counter += 10


def _create(app, email):
    return heartbeat_worker.create(app, WrkWorkerBlocking, email)


_worker_rows = heartbeat_worker.worker_rows
_executions = heartbeat_worker.executions
_housekeeping = heartbeat_worker.run_housekeeping


def _outcomes_once_finished(app, workflow_id):
    """Wait until the workflow is finished; ``(step_name, outcome)`` of each of
    its executions, oldest first."""
    wait_for_state(app, workflow_id, "finished")
    return [(r.step_name, r.outcome) for r in _executions(app, workflow_id)]


def test_a_killed_worker_is_recovered_within_the_dead_after(
    heartbeat_app, start_worker, tmp_path
):
    """SIGKILL of a solo worker mid-step: while another worker heartbeats, its
    execution is recovered once its heartbeats stop for GENEVA_WORKER_DEAD_AFTER,
    although the step is far younger than the age threshold, and re-run to the
    end (R-WRK-02/05/06/07, R-WRK-14).
    """
    app = heartbeat_app
    workflow_id = _create(app, "killed@example.com")
    worker = start_worker(*INCLUDE)
    wait_for_files(tmp_path, "started-*")
    [row] = _worker_rows(app)
    assert row.pid == worker.pid
    [(stuck_id, _, state, _, worker_id)] = _executions(app, workflow_id)
    assert (state, worker_id) == ("in_progress", row.id)
    # A second, idle worker: its heartbeats after the kill are the evidence that
    # the database is up and the first worker is dead (R-WRK-14).
    survivor = start_worker(*INCLUDE)
    wait_for(lambda: len(_worker_rows(app)) == 2, timeout=60)
    # While the worker lives, recovery leaves the execution alone.
    assert _housekeeping(app)["stuck_in_progress_recovered"] == 0
    killed_at = time.monotonic()
    worker.kill()
    worker.wait(timeout=30)

    def recovered():
        return _housekeeping(app)["stuck_in_progress_recovered"] == 1

    wait_for(recovered, timeout=30, interval=0.5)
    elapsed = time.monotonic() - killed_at
    assert DEAD_AFTER - 0.5 <= elapsed < DEAD_AFTER + 10
    # The dead worker held nothing any more: pruned by the same run.
    assert [r.pid for r in _worker_rows(app)] == [survivor.pid]
    # The survivor runs the rescheduled step once released.
    (tmp_path / "release").touch()
    wait_for_state(app, workflow_id, "finished")
    rows = _executions(app, workflow_id)
    assert [
        (r.step_name, r.outcome) for r in rows
    ] == heartbeat_worker.RECOVERED_AND_RERUN
    assert {r.state for r in rows} == {"completed"}
    assert rows[0].id == stuck_id


def test_the_dispatcher_task_recovers_a_killed_workers_step(
    heartbeat_app, start_worker, tmp_path
):
    """Without housekeeping: the dispatcher's periodic task, run by a second worker,
    recovers the killed worker's execution and the workflow finishes (R-WRK-06)."""
    from flask_geneva.core.publications import DISPATCH_DUE_TASK

    app = heartbeat_app
    workflow_id = _create(app, "dispatcher@example.com")
    worker = start_worker(*INCLUDE)
    wait_for_files(tmp_path, "started-*")
    worker.kill()
    worker.wait(timeout=30)
    (tmp_path / "release").touch()
    time.sleep(DEAD_AFTER + 0.5)
    start_worker(*INCLUDE)
    app.extensions["geneva"].celery.send_task(DISPATCH_DUE_TASK)
    assert (
        _outcomes_once_finished(app, workflow_id)
        == heartbeat_worker.RECOVERED_AND_RERUN
    )


DISPATCH_INTERVAL = 1.0


@pytest.fixture
def start_beat(processes, tmp_path, broker_url, worker_database_url):
    """Start ``celery beat`` for the worker app (the dispatcher every second)."""

    def start():
        return processes.start(
            celery_command(
                WORKER_APP,
                "beat",
                f"--schedule={tmp_path / 'beat-schedule'}",
                "--max-interval=1",
                "-l",
                "info",
            ),
            name="beat",
            env={
                "GENEVA_TEST_BROKER_URL": broker_url,
                "GENEVA_TEST_WORKER_DATABASE_URL": worker_database_url,
            },
        )

    return start


def test_beats_dispatcher_reruns_a_killed_workers_step(
    heartbeat_app, start_worker, start_beat, tmp_path, monkeypatch
):
    """The deployment the README describes, with shortened settings: a worker and
    Celery beat running flask_geneva.beat_schedule(). After kill -9 of the worker
    mid-step and a restart (as a supervisor does), the dispatcher's periodic run
    recovers the step once the heartbeats stopped for GENEVA_WORKER_DEAD_AFTER and
    it runs again; no housekeeping runs. The dispatcher's runs are recorded with
    the worker's node name (R-WRK-06, R-WRK-12, R-WRK-13, R-HK-40)."""
    monkeypatch.setenv("GENEVA_TEST_DISPATCH_INTERVAL", str(DISPATCH_INTERVAL))
    app = heartbeat_app
    workflow_id = _create(app, "beat@example.com")
    worker = start_worker(*INCLUDE)
    wait_for_files(tmp_path, "started-*")
    start_beat()
    killed_at = time.monotonic()
    worker.kill()
    worker.wait(timeout=30)
    (tmp_path / "release").touch()
    start_worker(*INCLUDE)

    def rerun_started():
        rows = _executions(app, workflow_id)
        return len(rows) >= 2 and rows[1].state != "scheduled"

    wait_for(rerun_started, timeout=60, interval=0.25)
    elapsed = time.monotonic() - killed_at
    # Dead after 3 s, found by the next run (every second), plus the new worker's
    # start: never the hour of the age rule.
    assert DEAD_AFTER - 0.5 <= elapsed < DEAD_AFTER + DISPATCH_INTERVAL + 30
    assert (
        _outcomes_once_finished(app, workflow_id)
        == heartbeat_worker.RECOVERED_AND_RERUN
    )
    runs_table = basic.db.metadata.tables["geneva_drive_maintenance_runs"]
    with app.app_context(), basic.db.engine.connect() as connection:
        [run] = connection.execute(sa.select(runs_table)).all()
    assert run.name == "dispatcher"
    assert run.node_name.startswith("celery@")
    assert run.outcome in ("running", "succeeded")


def test_a_live_worker_running_a_long_step_is_never_recovered(
    heartbeat_app, start_worker, tmp_path
):
    """A step running longer than the (shortened) age threshold on a live worker is
    never recovered (R-WRK-06)."""
    app = heartbeat_app
    workflow_id = _create(app, "long@example.com")
    start_worker(*INCLUDE)
    wait_for_files(tmp_path, "started-*")
    deadline = time.monotonic() + DEAD_AFTER * 2
    while time.monotonic() < deadline:
        summary = _housekeeping(app, GENEVA_STUCK_IN_PROGRESS_THRESHOLD=1)
        assert summary["stuck_in_progress_recovered"] == 0
        time.sleep(0.5)
    (tmp_path / "release").touch()
    assert _outcomes_once_finished(app, workflow_id) == [
        ("blocking", "success"),
        ("after", "success"),
    ]


def test_a_prefork_child_killed_alone_is_detected(
    heartbeat_app, start_worker, tmp_path
):
    """Only the pool child running the step is killed; the parent lives on and
    starts a new child. The dead child's execution is recovered (R-WRK-02/06)."""
    app = heartbeat_app
    workflow_id = _create(app, "child@example.com")
    parent = start_worker(*INCLUDE, "--pool=prefork", "--concurrency=1")
    [started] = wait_for_files(tmp_path, "started-*")
    child_pid = int(started.name.rsplit("-", 1)[1])
    assert child_pid != parent.pid
    [row] = _worker_rows(app)
    assert row.pid == child_pid
    os.kill(child_pid, signal.SIGKILL)
    (tmp_path / "release").touch()

    def recovered():
        return _housekeeping(app)["stuck_in_progress_recovered"] == 1

    wait_for(recovered, timeout=30, interval=0.5)
    assert parent.poll() is None
    assert (
        _outcomes_once_finished(app, workflow_id)
        == heartbeat_worker.RECOVERED_AND_RERUN
    )
    rows = _executions(app, workflow_id)
    # The replacement child registered itself and ran the rest.
    live = [r for r in _worker_rows(app) if r.pid != child_pid]
    assert [r.id for r in live] == [rows[1].worker_id]


@pytest.mark.parametrize("pool", ["solo", "threads", "prefork"])
def test_clean_shutdown_leaves_no_worker_rows(heartbeat_app, start_worker, pool):
    """SIGTERM (warm shutdown) deregisters every process of the worker (R-WRK-04)."""
    app = heartbeat_app
    concurrency = "1" if pool == "solo" else "2"
    worker = start_worker(f"--pool={pool}", f"--concurrency={concurrency}")
    expected = 2 if pool == "prefork" else 1
    rows = wait_for(
        lambda: (found := _worker_rows(app)) and len(found) == expected and found,
        timeout=60,
    )
    assert all(r.node_name and r.node_name.startswith("celery@") for r in rows)
    assert all(r.queues == "celery" for r in rows)
    before = rows[0].last_heartbeat_at
    wait_for(lambda: _worker_rows(app)[0].last_heartbeat_at > before, timeout=10)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    assert _worker_rows(app) == []
