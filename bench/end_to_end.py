"""End to end: N workflows x 10 no-op steps through a real worker and broker.

Compares flask_geneva with a bare Celery chain of ten tasks per "workflow" doing
the same row writes as a step (per step: mark the run row performing and the job
row running in one transaction; mark the job done, insert the next job row and
advance the run row in a second one). The bare chain takes no row locks: those
reads are what the engine adds for its guarantees (R-EXE-10/11). Both go through
the same ``celery worker`` subprocess and broker. Prints both throughputs
(steps/s) and their ratio; the target is a ratio >= 0.8. Usage::

    python bench/end_to_end.py --workflows 200 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --broker redis://127.0.0.1:6379/15 --concurrency 4

SQLite (the default database) runs the worker with ``--pool=solo``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from celery import Celery
from celery import chain

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import flask_geneva  # noqa: E402
from flask_geneva import step  # noqa: E402
from tests.apps import basic  # noqa: E402

STEPS = 10
DATABASE_URL = os.environ.get("GENEVA_BENCH_DATABASE_URL", "")
BROKER_URL = os.environ.get("GENEVA_BENCH_BROKER_URL", "redis://127.0.0.1:6379/15")

bare_metadata = sa.MetaData()
bare_runs = sa.Table(
    "bench_bare_runs",
    bare_metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("step", sa.Integer, nullable=False, default=0),
    sa.Column("state", sa.String(20), nullable=False, default="ready"),
    sa.Column("updated_at", sa.DateTime(timezone=True)),
)
bare_jobs = sa.Table(
    "bench_bare_jobs",
    bare_metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.Integer, nullable=False, index=True),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True)),
    sa.Column("updated_at", sa.DateTime(timezone=True)),
)


class BenchEndToEndTenSteps(basic.geneva.Workflow):
    """Ten steps that do nothing."""

    __geneva_type__ = "BenchEndToEndTenSteps"
    may_proceed_without_hero = True
    _steps = step.repeat(STEPS, lambda wf: None)


def build(database_url: str, broker_url: str) -> tuple[Any, Celery]:
    """The Flask app and the Celery app both benchmarks use."""
    celery = Celery("geneva_bench")
    celery.conf.update(flask_geneva.celery_defaults(), broker_url=broker_url)
    app = basic.create_app(
        database_url,
        TESTING=False,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
    )
    basic.geneva.init_celery(celery, app=app)

    @celery.task(name="bench.bare_step", ignore_result=True)
    def bare_step(run_id: int, number: int) -> None:
        now = sa.func.now()
        with app.app_context():
            engine = basic.db.engine
            with engine.begin() as connection:
                connection.execute(
                    sa.update(bare_runs)
                    .where(bare_runs.c.id == run_id)
                    .values(state="performing", updated_at=now)
                )
                connection.execute(
                    sa.update(bare_jobs)
                    .where(bare_jobs.c.run_id == run_id)
                    .where(bare_jobs.c.step == number)
                    .values(state="in_progress", updated_at=now)
                )
            with engine.begin() as connection:
                connection.execute(
                    sa.update(bare_jobs)
                    .where(bare_jobs.c.run_id == run_id)
                    .where(bare_jobs.c.step == number)
                    .values(state="completed", updated_at=now)
                )
                last = number + 1 == STEPS
                if not last:
                    connection.execute(
                        sa.insert(bare_jobs).values(
                            run_id=run_id,
                            step=number + 1,
                            state="scheduled",
                            created_at=now,
                            updated_at=now,
                        )
                    )
                connection.execute(
                    sa.update(bare_runs)
                    .where(bare_runs.c.id == run_id)
                    .values(
                        step=number + 1,
                        state="finished" if last else "performing",
                        updated_at=now,
                    )
                )

    return app, celery


if os.environ.get("GENEVA_BENCH_WORKER"):
    # What `celery -A bench.end_to_end:celery worker` loads.
    app, celery = build(DATABASE_URL, BROKER_URL)


def wait_until(
    predicate: Callable[[], bool], timeout: float, log_path: Path | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            if log_path is not None:
                print(log_path.read_text(errors="replace")[-5000:])
            raise SystemExit(f"not done within {timeout} s")
        time.sleep(0.05)


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux /proc).

    Returns 0.0 where /proc is not available. Used to print the worker's CPU cost
    per step, which stays meaningful on a busy machine where throughput does not.
    """
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        pending.extend(int(child) for child in children.split())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--broker", default=BROKER_URL)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory()
    url = args.database_url or f"sqlite:///{Path(tmp.name) / 'bench.sqlite3'}"
    sqlite = url.startswith("sqlite")
    app, celery = build(url, args.broker)
    with app.app_context():
        basic.db.drop_all()
        basic.db.create_all()
        bare_metadata.drop_all(basic.db.engine)
        bare_metadata.create_all(basic.db.engine)
    with celery.connection_for_write() as connection:
        connection.default_channel.queue_purge("celery")

    pool = ["--pool=solo"] if sqlite else ["--pool=prefork", f"-c{args.concurrency}"]
    log_path = Path(tmp.name) / "worker.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench.end_to_end:celery",
        "worker",
        *pool,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "warning",
    ]
    worker = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        command,
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "GENEVA_BENCH_WORKER": "1",
            "GENEVA_BENCH_DATABASE_URL": url,
            "GENEVA_BENCH_BROKER_URL": args.broker,
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        with app.app_context():
            session = basic.db.session
            workflow_cls = basic.geneva.Workflow

            def finished_workflows() -> int:
                count = session.scalar(
                    sa.select(sa.func.count(workflow_cls.id)).where(
                        workflow_cls.state == "finished"
                    )
                )
                session.rollback()
                return int(count or 0)

            # Warm up: the worker is ready once one workflow went through.
            BenchEndToEndTenSteps.create(allow_multiple=True)
            wait_until(lambda: finished_workflows() == 1, 60, log_path)

            started = time.perf_counter()
            cpu_before = process_tree_cpu_seconds(worker.pid)
            for _ in range(args.workflows):
                BenchEndToEndTenSteps.create(allow_multiple=True, commit=False)
            session.commit()
            wait_until(lambda: finished_workflows() == args.workflows + 1, args.timeout)
            geneva_seconds = time.perf_counter() - started
            geneva_cpu = process_tree_cpu_seconds(worker.pid) - cpu_before

            engine = basic.db.engine

            def finished_runs() -> int:
                with engine.connect() as connection:
                    return int(
                        connection.scalar(
                            sa.select(sa.func.count()).where(
                                bare_runs.c.state == "finished"
                            )
                        )
                        or 0
                    )

            started = time.perf_counter()
            cpu_before = process_tree_cpu_seconds(worker.pid)
            with engine.begin() as connection:
                run_ids = [
                    connection.execute(
                        sa.insert(bare_runs).values(state="ready", step=0)
                    ).inserted_primary_key[0]
                    for _ in range(args.workflows)
                ]
                connection.execute(
                    sa.insert(bare_jobs),
                    [
                        {"run_id": run_id, "step": 0, "state": "scheduled"}
                        for run_id in run_ids
                    ],
                )
            for run_id in run_ids:
                chain(
                    celery.signature(
                        "bench.bare_step", args=(run_id, number), immutable=True
                    )
                    for number in range(STEPS)
                ).apply_async()
            wait_until(lambda: finished_runs() == args.workflows, args.timeout)
            bare_seconds = time.perf_counter() - started
            bare_cpu = process_tree_cpu_seconds(worker.pid) - cpu_before
            basic.db.session.remove()
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()

    steps = args.workflows * STEPS
    geneva_rate = steps / geneva_seconds
    bare_rate = steps / bare_seconds
    print(f"database: {sa.make_url(url).get_backend_name()}  broker: {args.broker}")
    print(f"workers: {' '.join(pool)}  workflows: {args.workflows} x {STEPS} steps")
    print(
        f"flask_geneva: {geneva_rate:8.1f} steps/s ({geneva_seconds:.2f} s; "
        f"worker CPU {geneva_cpu / steps * 1000:.2f} ms/step)"
    )
    print(
        f"bare chain:   {bare_rate:8.1f} steps/s ({bare_seconds:.2f} s; "
        f"worker CPU {bare_cpu / steps * 1000:.2f} ms/step)"
    )
    print(f"ratio:        {geneva_rate / bare_rate:8.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
