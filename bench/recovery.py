"""Recovery after kill -9, with the default settings: how long until the step runs again.

Runs the deployment the README describes: a Celery worker (prefork, Celery's
default pool) and a separate ``celery beat`` process with
``flask_geneva.beat_schedule()``, both on the library's default settings
(``GENEVA_WORKER_HEARTBEAT_INTERVAL`` 15 s, ``GENEVA_WORKER_DEAD_AFTER`` 60 s,
``GENEVA_DISPATCH_INTERVAL`` 30 s, ``GENEVA_RELEASE_SPREAD`` 5 s) and
``flask_geneva.celery_defaults()``. Each round starts a workflow whose step
blocks, waits a random 0-15 s once the step runs (so the kill falls anywhere in
the heartbeat and dispatcher cycles), kills the worker's whole process group
with SIGKILL, restarts the worker at once (as a supervisor would) and measures
the time from the kill to the start of the step's next run (the recovered
execution's successor's ``started_at``). Prints each round and the
min/median/max (R-WRK-12: the worst case is about 60 + 30 + 5 s).

Usage::

    python bench/recovery.py --kills 5 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench \\
        --broker redis://127.0.0.1:6379/14

A server database is needed (on SQLite a blocked step would hold up the
heartbeats, see the README).

The database's geneva tables are dropped and created again; the broker's
default queue is purged.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from celery import Celery

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import flask_geneva  # noqa: E402
from bench.worker_process import purge_celery_queue  # noqa: E402
from bench.worker_process import start_celery  # noqa: E402
from flask_geneva import step  # noqa: E402
from flask_geneva.core.config import DEFAULTS  # noqa: E402
from tests.apps import basic  # noqa: E402

#: The worker's and beat's database (the bench passes ``--database-url`` on).
DATABASE_URL = os.environ.get(
    "GENEVA_BENCH_DATABASE_URL", "sqlite:////tmp/geneva-recovery-bench.sqlite3"
)
BROKER_URL = os.environ.get("GENEVA_BENCH_BROKER_URL", "redis://127.0.0.1:6379/15")
FLAG_DIR = "GENEVA_BENCH_FLAG_DIR"


def build(database_url: str, broker_url: str) -> tuple[Any, Celery]:
    """The Flask and Celery apps of the bench, the worker and beat: defaults only."""
    celery = Celery("geneva_recovery_bench")
    celery.conf.update(flask_geneva.celery_defaults(), broker_url=broker_url)
    # As the README's worker module: the dispatcher and housekeeping on beat.
    celery.conf.beat_schedule = flask_geneva.beat_schedule()
    app = basic.create_app(
        database_url,
        celery=celery,
        TESTING=False,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
    )
    basic.geneva.init_celery(celery, app=app)
    return app, celery


app, celery = build(DATABASE_URL, BROKER_URL)


class BenchRecoveryBlocking(basic.geneva.Workflow):
    """One step that blocks until the bench writes ``release-<workflow id>``."""

    __geneva_type__ = "BenchRecoveryBlocking"
    may_proceed_without_hero = True

    @step
    def blocking(self) -> None:
        flags = Path(os.environ[FLAG_DIR])
        deadline = time.monotonic() + 900
        while not (flags / f"release-{self.id}").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the bench never released the step")
            time.sleep(0.1)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` every 0.2 s until truthy; raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


def executions(workflow_id: Any) -> list[Any]:
    """The workflow's executions, oldest first."""
    execution_cls = basic.geneva.StepExecution
    session = basic.db.session
    rows = session.execute(
        sa.select(
            execution_cls.id,
            execution_cls.state,
            execution_cls.outcome,
            execution_cls.started_at,
            execution_cls.worker_id,
        )
        .where(execution_cls.workflow_id == workflow_id)
        .order_by(execution_cls.created_at, execution_cls.id)
    ).all()
    session.rollback()
    return list(rows)


def last_heartbeat(worker_id: str) -> datetime | None:
    """The registered worker's last heartbeat."""
    workers = basic.db.metadata.tables["geneva_drive_workers"]
    session = basic.db.session
    value = session.scalar(
        sa.select(workers.c.last_heartbeat_at).where(workers.c.id == worker_id)
    )
    session.rollback()
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--database-url", default=DATABASE_URL)
    parser.add_argument("--broker", default=BROKER_URL)
    parser.add_argument(
        "--max-phase",
        type=float,
        default=15.0,
        help="the kill comes a random 0..max-phase seconds after the step started",
    )
    args = parser.parse_args()
    flags = tempfile.TemporaryDirectory(prefix="geneva-recovery-")
    environment = {
        "GENEVA_BENCH_DATABASE_URL": args.database_url,
        "GENEVA_BENCH_BROKER_URL": args.broker,
        FLAG_DIR: flags.name,
    }
    os.environ[FLAG_DIR] = flags.name
    bench_app, bench_celery = build(args.database_url, args.broker)
    with bench_app.app_context():
        basic.db.drop_all()
        basic.db.create_all()
    purge_celery_queue(bench_celery)
    logs = Path(flags.name)

    def start(command: list[str], name: str) -> subprocess.Popen[bytes]:
        # Its own process group: kill -9 of the group takes the children too.
        return start_celery(
            "bench.recovery:celery",
            command,
            logs / f"{name}.log",
            environment,
            own_process_group=True,
        )

    def start_worker() -> subprocess.Popen[bytes]:
        return start(["worker", "--pool=prefork", "-l", "info"], "worker")

    print(
        "defaults: heartbeat {}, dead after {}, dispatch interval {}, release spread {}".format(
            *(
                DEFAULTS[key]
                for key in (
                    "GENEVA_WORKER_HEARTBEAT_INTERVAL",
                    "GENEVA_WORKER_DEAD_AFTER",
                    "GENEVA_DISPATCH_INTERVAL",
                    "GENEVA_RELEASE_SPREAD",
                )
            )
        ),
        flush=True,
    )
    beat = start(["beat", f"--schedule={logs / 'beat-schedule'}", "-l", "info"], "beat")
    worker = start_worker()
    results: list[float] = []
    try:
        with bench_app.app_context():
            for round_number in range(1, args.kills + 1):
                workflow_id = BenchRecoveryBlocking.create(hero=None).id
                basic.db.session.remove()
                running = wait_until(
                    lambda workflow_id=workflow_id: [
                        row
                        for row in executions(workflow_id)
                        if row.state == "in_progress"
                    ],
                    120,
                    "the step to start",
                )[0]
                time.sleep(random.uniform(0, args.max_phase))  # noqa: S311 - not crypto
                beat_at = last_heartbeat(running.worker_id)
                killed_at = time.time()
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                worker = start_worker()

                def rerun(workflow_id: Any = workflow_id) -> Any:
                    rows = executions(workflow_id)
                    return len(rows) > 1 and rows[1].started_at is not None and rows[1]

                again = wait_until(rerun, 600, "the step to run again")
                seconds = again.started_at.timestamp() - killed_at
                since_beat = (
                    killed_at - beat_at.timestamp() if beat_at else float("nan")
                )
                results.append(seconds)
                print(
                    f"kill {round_number}: {since_beat:5.1f} s after the last "
                    f"heartbeat; step ran again {seconds:6.1f} s after the kill",
                    flush=True,
                )
                (Path(flags.name) / f"release-{workflow_id}").touch()
                wait_until(
                    lambda workflow_id=workflow_id: all(
                        row.state == "completed" for row in executions(workflow_id)
                    ),
                    120,
                    "the rerun to finish",
                )
    finally:
        for process in (worker, beat):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
    if results:
        print(
            f"kill -9 -> step running again, {len(results)} kills: "
            f"min {min(results):.1f} s, median {statistics.median(results):.1f} s, "
            f"max {max(results):.1f} s"
        )


if __name__ == "__main__":
    main()
