"""End to end: N workflows x 10 no-op steps through a real worker and broker.

Compares flask_geneva with a bare Celery chain of ten tasks per "workflow" doing
the same row writes as a step (per step: mark the workflow row performing and the
execution row in progress in one transaction; complete the execution, insert the
next one and set the workflow ready (or finished) in a second one). The bare
chain takes no row locks and reads nothing: those reads are what the engine adds
for its guarantees (R-EXE-10/11). Both go through the same ``celery worker``
subprocess and broker, and the sides alternate in rounds (medians printed).

``--baseline`` picks the bare chain's tables:

* ``geneva-tables`` (default): the chain writes workflow and execution rows in
  flask_geneva's own two tables, so both sides maintain the same indexes
  (R-DM-02/07) and the ratio measures the engine's own overhead;
* ``own-tables``: two minimal tables with one index each, which also charges the
  schema's index maintenance to flask_geneva.

Prints both throughputs (steps/s), the CPU per step of the worker and of the
local database and broker, and their ratio; the target is a ratio >= 0.8.
``--sides flask_geneva`` runs flask_geneva alone (no bare chain, no ratio), e.g.
to compare worker counts (issue 40: 8 processes against 2 over 10,000
workflows). The deadlocks the database server detected in the bench's database
during the run (warm-up included; retried by the engine, R-EXE-80) are printed
and written to ``--json``: PostgreSQL's ``pg_stat_database.deadlocks`` of the
database, MariaDB's ``Innodb_deadlocks`` (server-wide: other databases' count
too); none on SQLite. Usage::

    python bench/end_to_end.py --workflows 200 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        --broker redis://127.0.0.1:6379/15 --concurrency 4
    python bench/end_to_end.py --sides flask_geneva --workflows 10000 \\
        --rounds 1 --concurrency 8 --database-url ... --json out.json

SQLite (the default database) runs the worker with ``--pool=solo``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from celery import Celery
from celery import chain

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import flask_geneva  # noqa: E402
from bench import scratch  # noqa: E402
from bench.worker_process import QUIET_WORKER_OPTIONS  # noqa: E402
from bench.worker_process import process_tree_cpu_seconds  # noqa: E402
from bench.worker_process import purge_celery_queue  # noqa: E402
from bench.worker_process import server_cpu_seconds  # noqa: E402
from bench.worker_process import start_celery  # noqa: E402
from bench.worker_process import stop  # noqa: E402
from flask_geneva import step  # noqa: E402
from flask_geneva.core import clock  # noqa: E402
from tests.apps import basic  # noqa: E402

STEPS = 10
#: ``type`` of the bare chain's workflow rows (``--baseline geneva-tables``); no
#: class has it, and nothing publishes their executions but the chain itself.
BARE_TYPE = "BenchBareChain"
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


def build(
    database_url: str,
    broker_url: str,
    *,
    track_modifications: bool = False,
    inline_budget: float | None = None,
) -> tuple[Any, Celery]:
    """The Flask app and the Celery app both benchmarks use.

    ``track_modifications`` turns on Flask-SQLAlchemy's
    ``SQLALCHEMY_TRACK_MODIFICATIONS`` (session listeners on every flush and
    commit), to show that geneva's speed does not depend on it (R-DM-41).
    ``inline_budget`` sets ``GENEVA_INLINE_CONTINUATION_BUDGET`` in seconds (0
    turns inline continuation off, R-EXE-70); None keeps the default.
    """
    extra: dict[str, Any] = {}
    if inline_budget is not None:
        extra["GENEVA_INLINE_CONTINUATION_BUDGET"] = inline_budget
    celery = Celery("geneva_bench")
    celery.conf.update(flask_geneva.celery_defaults(), broker_url=broker_url)
    app = basic.create_app(
        database_url,
        celery=celery,
        TESTING=False,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
        SQLALCHEMY_TRACK_MODIFICATIONS=track_modifications,
        **extra,
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

    @celery.task(name="bench.bare_step_geneva_tables", ignore_result=True)
    def bare_step_geneva_tables(workflow_id: int, number: int) -> None:
        workflows = basic.geneva.Workflow.__table__
        executions = basic.geneva.StepExecution.__table__
        step_name = f"step_{number}"
        with app.app_context():
            engine = basic.db.engine
            now = clock.now()
            with engine.begin() as connection:
                connection.execute(
                    sa.update(workflows)
                    .where(workflows.c.id == workflow_id)
                    .values(
                        state="performing", current_step_name=step_name, updated_at=now
                    )
                )
                connection.execute(
                    sa.update(executions)
                    .where(executions.c.workflow_id == workflow_id)
                    .where(executions.c.state == "scheduled")
                    .values(state="in_progress", started_at=now, updated_at=now)
                )
            now = clock.now()
            last = number + 1 == STEPS
            with engine.begin() as connection:
                connection.execute(
                    sa.update(executions)
                    .where(executions.c.workflow_id == workflow_id)
                    .where(executions.c.state == "in_progress")
                    .values(
                        state="completed",
                        outcome="success",
                        completed_at=now,
                        finished_at=now,
                        updated_at=now,
                    )
                )
                if not last:
                    connection.execute(
                        sa.insert(executions).values(
                            workflow_id=workflow_id,
                            step_name=f"step_{number + 1}",
                            state="scheduled",
                            scheduled_for=now,
                            job_id=str(uuid.uuid4()),
                            created_at=now,
                            updated_at=now,
                        )
                    )
                connection.execute(
                    sa.update(workflows)
                    .where(workflows.c.id == workflow_id)
                    .values(
                        state="finished" if last else "ready",
                        current_step_name=None,
                        next_step_name=None if last else f"step_{number + 1}",
                        transitioned_at=now if last else None,
                        updated_at=now,
                    )
                )

    return app, celery


if os.environ.get("GENEVA_BENCH_WORKER"):
    # What `celery -A bench.end_to_end:celery worker` loads.
    app, celery = build(
        DATABASE_URL,
        BROKER_URL,
        track_modifications=bool(os.environ.get("GENEVA_BENCH_TRACK_MODIFICATIONS")),
        inline_budget=(
            float(os.environ["GENEVA_BENCH_INLINE_BUDGET"])
            if os.environ.get("GENEVA_BENCH_INLINE_BUDGET")
            else None
        ),
    )


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


def server_deadlocks(engine: sa.Engine) -> int | None:
    """The deadlocks the server has detected so far; None where it counts none.

    PostgreSQL: ``pg_stat_database.deadlocks`` of the engine's database (a
    backend reports its count when its transaction ends or it exits, so read
    after the worker stopped); MariaDB/MySQL: the server-wide
    ``Innodb_deadlocks`` status; SQLite: None (one writer, no deadlock).
    """
    backend = engine.dialect.name
    with engine.connect() as connection:
        if backend == "postgresql":
            connection.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
            value = connection.exec_driver_sql(
                "SELECT deadlocks FROM pg_stat_database "
                "WHERE datname = current_database()"
            ).scalar()
            return int(value or 0)
        if backend in ("mysql", "mariadb"):
            row = connection.exec_driver_sql(
                "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'"
            ).first()
            return None if row is None else int(row[1])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument(
        "--sides",
        choices=("both", "flask_geneva"),
        default="both",
        help="flask_geneva: run flask_geneva alone (no bare chain, no ratio)",
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--broker", default=BROKER_URL)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--baseline",
        choices=("geneva-tables", "own-tables"),
        default="geneva-tables",
        help="tables the bare chain writes (see the module docstring)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="alternating measured rounds per side (the medians are printed)",
    )
    parser.add_argument(
        "--track-modifications",
        action="store_true",
        help="run with SQLALCHEMY_TRACK_MODIFICATIONS=True (host session listeners)",
    )
    parser.add_argument(
        "--inline-budget",
        type=float,
        default=None,
        help="GENEVA_INLINE_CONTINUATION_BUDGET in seconds for the worker (0 = one "
        "step per delivery, as before inline continuation); default: the library's",
    )
    parser.add_argument("--json", default=None, help="also write the medians here")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory()
    url = scratch.database_url(args.database_url, tmp)
    sqlite = url.startswith("sqlite")
    app, celery = build(
        url,
        args.broker,
        track_modifications=args.track_modifications,
        inline_budget=args.inline_budget,
    )
    scratch.reset_tables(app)
    with app.app_context():
        bare_metadata.drop_all(basic.db.engine)
        bare_metadata.create_all(basic.db.engine)
    purge_celery_queue(celery)

    pool = ["--pool=solo"] if sqlite else ["--pool=prefork", f"-c{args.concurrency}"]
    log_path = Path(tmp.name) / "worker.log"
    worker = start_celery(
        "bench.end_to_end:celery",
        ["worker", *pool, *QUIET_WORKER_OPTIONS, "-l", "warning"],
        log_path,
        {
            "GENEVA_BENCH_WORKER": "1",
            "GENEVA_BENCH_DATABASE_URL": url,
            "GENEVA_BENCH_BROKER_URL": args.broker,
            "GENEVA_BENCH_TRACK_MODIFICATIONS": "1" if args.track_modifications else "",
            "GENEVA_BENCH_INLINE_BUDGET": (
                "" if args.inline_budget is None else str(args.inline_budget)
            ),
        },
    )
    steps = args.workflows * STEPS
    bare_side = args.sides == "both"
    with app.app_context():
        deadlocks_before = server_deadlocks(basic.db.engine)
    geneva_runs: list[tuple[float, float, float]] = []
    bare_runs_measured: list[tuple[float, float, float]] = []
    try:
        with app.app_context():
            session = basic.db.session
            engine = basic.db.engine
            workflow_cls = basic.geneva.Workflow
            finished_so_far = 0
            bare_finished_so_far = 0

            workflows = workflow_cls.__table__
            executions = basic.geneva.StepExecution.__table__
            geneva_tables = args.baseline == "geneva-tables"

            def finished_workflows() -> int:
                count = session.scalar(
                    sa.select(sa.func.count(workflow_cls.id))
                    .where(workflow_cls.type == BenchEndToEndTenSteps.__geneva_type__)
                    .where(workflow_cls.state == "finished")
                )
                session.rollback()
                return int(count or 0)

            def finished_runs() -> int:
                if geneva_tables:
                    condition = sa.and_(
                        workflows.c.type == BARE_TYPE, workflows.c.state == "finished"
                    )
                else:
                    condition = bare_runs.c.state == "finished"
                with engine.connect() as connection:
                    return int(
                        connection.scalar(sa.select(sa.func.count()).where(condition))
                        or 0
                    )

            def run_geneva(count: int) -> None:
                nonlocal finished_so_far
                for _ in range(count):
                    BenchEndToEndTenSteps.create(allow_multiple=True, commit=False)
                session.commit()
                finished_so_far += count
                target = finished_so_far
                wait_until(
                    lambda: finished_workflows() == target, args.timeout, log_path
                )

            def insert_bare_runs(count: int) -> list[int]:
                """Rows the bare chain starts from, as ``create`` leaves them."""
                now = clock.now()
                with engine.begin() as connection:
                    if not geneva_tables:
                        run_ids = [
                            connection.execute(
                                sa.insert(bare_runs).values(state="ready", step=0)
                            ).inserted_primary_key[0]
                            for _ in range(count)
                        ]
                        connection.execute(
                            sa.insert(bare_jobs),
                            [
                                {"run_id": run_id, "step": 0, "state": "scheduled"}
                                for run_id in run_ids
                            ],
                        )
                        return run_ids
                    run_ids = [
                        connection.execute(
                            sa.insert(workflows).values(
                                type=BARE_TYPE,
                                state="ready",
                                allow_multiple=True,
                                next_step_name="step_0",
                                created_at=now,
                                updated_at=now,
                            )
                        ).inserted_primary_key[0]
                        for _ in range(count)
                    ]
                    connection.execute(
                        sa.insert(executions),
                        [
                            {
                                "workflow_id": run_id,
                                "step_name": "step_0",
                                "state": "scheduled",
                                "scheduled_for": now,
                                "job_id": str(uuid.uuid4()),
                                "created_at": now,
                                "updated_at": now,
                            }
                            for run_id in run_ids
                        ],
                    )
                    return run_ids

            bare_task = (
                "bench.bare_step_geneva_tables" if geneva_tables else "bench.bare_step"
            )

            def run_bare(count: int) -> None:
                nonlocal bare_finished_so_far
                for run_id in insert_bare_runs(count):
                    chain(
                        celery.signature(
                            bare_task, args=(run_id, number), immutable=True
                        )
                        for number in range(STEPS)
                    ).apply_async()
                bare_finished_so_far += count
                target = bare_finished_so_far
                wait_until(lambda: finished_runs() == target, args.timeout, log_path)

            def measure(run: Callable[[int], None]) -> tuple[float, float, float]:
                started = time.perf_counter()
                cpu_before = process_tree_cpu_seconds(worker.pid)
                server_before = server_cpu_seconds()
                run(args.workflows)
                seconds = time.perf_counter() - started
                return (
                    seconds,
                    process_tree_cpu_seconds(worker.pid) - cpu_before,
                    server_cpu_seconds() - server_before,
                )

            # Warm up both sides in every worker process (statement caches,
            # prepared statements, imports) before anything is measured.
            run_geneva(2 * args.concurrency)
            if bare_side:
                run_bare(2 * args.concurrency)
            # Alternate the two so that a slower minute of a shared machine
            # does not fall on one side only; report medians.
            for _ in range(args.rounds):
                geneva_runs.append(measure(run_geneva))
                if bare_side:
                    bare_runs_measured.append(measure(run_bare))
            basic.db.session.remove()
    finally:
        stop(worker)
    with app.app_context():
        # The worker's connections are closed: their counts are reported.
        time.sleep(1.0)
        deadlocks_after = server_deadlocks(basic.db.engine)
        basic.db.engine.dispose()
    deadlocks = (
        None
        if deadlocks_before is None or deadlocks_after is None
        else deadlocks_after - deadlocks_before
    )

    def rate(run: tuple[float, float, float]) -> float:
        return steps / run[0]

    ratios = (
        [
            rate(geneva) / rate(bare)
            for geneva, bare in zip(geneva_runs, bare_runs_measured, strict=True)
        ]
        if bare_side
        else []
    )
    print(f"database: {sa.make_url(url).get_backend_name()}  broker: {args.broker}")
    print(
        f"workers: {' '.join(pool)}  workflows: {args.workflows} x {STEPS} steps, "
        f"{args.rounds} {'alternating ' if bare_side else ''}rounds (medians); "
        f"baseline: {args.baseline if bare_side else 'none'}; "
        f"SQLALCHEMY_TRACK_MODIFICATIONS={args.track_modifications}"
    )
    print(
        "deadlocks detected by the server during the run: "
        + ("not counted" if deadlocks is None else str(deadlocks))
    )
    figures: dict[str, Any] = {
        "database": sa.make_url(url).get_backend_name(),
        "workers": 1 if sqlite else args.concurrency,
        "workflows": args.workflows,
        "rounds": args.rounds,
        "sides": args.sides,
        "baseline": args.baseline if bare_side else None,
        "ratio": statistics.median(ratios) if ratios else None,
        "deadlocks": deadlocks,
    }
    for label, runs in (
        ("flask_geneva", geneva_runs),
        ("bare chain  ", bare_runs_measured),
    ):
        if not runs:
            continue
        seconds = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        server = statistics.median(run[2] for run in runs)
        figures[label.strip().replace(" ", "_")] = {
            "steps_per_second": steps / seconds,
            "rounds_steps_per_second": [steps / run[0] for run in runs],
            "worker_cpu_ms_per_step": cpu / steps * 1000,
            "server_cpu_ms_per_step": server / steps * 1000,
        }
        print(
            f"{label}: {steps / seconds:8.1f} steps/s ({seconds:.2f} s; "
            f"CPU per step: worker {cpu / steps * 1000:.2f} ms, "
            f"database + broker {server / steps * 1000:.2f} ms)"
        )
    if ratios:
        print(
            f"ratio:        {statistics.median(ratios):8.2f} (target >= 0.8; rounds: "
            + " ".join(f"{ratio:.2f}" for ratio in ratios)
            + ")"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
