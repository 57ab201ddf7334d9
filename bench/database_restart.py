"""The database restarting under load (issue 41, SPEC §29.1): what it costs.

Starts a PostgreSQL or MariaDB server of its own (``tests/support/
private_database_servers.py``: a free port, a temporary directory), a prefork
Celery worker (``--concurrency``, 4 by default) and ``celery beat`` with
``flask_geneva.beat_schedule()``, all on the library's default settings and
``flask_geneva.celery_defaults()``. It creates ``--workflows`` workflows of
``--steps`` steps (each body sleeps ``--body-ms`` and appends one line to a
file, outside the database, so re-runs are counted even across the outage),
kills the database server with SIGKILL once ``--kill-at`` of the steps ran,
starts it again ``--outage`` seconds later and waits until every workflow
finished (or ``--give-up`` seconds after the restart). Then it prints:

- the outage: from the kill to the server accepting connections again;
- what the outage did: claims refused (R-FLT-01), deliveries left to the
  dispatcher after their retries (R-FLT-02/20), executions published again by
  the dispatcher (R-FLT-20), finalizes that waited the outage out (R-FLT-10),
  executions released and recovered (R-FLT-11), from the worker's and beat's
  logs;
- stranded executions: those still ``scheduled`` more than 5 s past their time
  5 s after the restart (and how many are ``in_progress`` then);
- the time from the restart until every workflow unfinished at the restart has
  moved (a new step ended, or the workflow finished), and the median;
- finished bodies run again (a step's body that ran to its end twice), and
  lost workflows (not finished at the end).

Usage::

    python bench/database_restart.py --database postgresql \\
        --broker redis://127.0.0.1:6379/14 --workflows 1000

The broker's default queue is purged. Nothing is left running: the worker,
beat and the server are stopped at the end, also after an error.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from datetime import datetime
from datetime import timedelta
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
from tests.apps import basic  # noqa: E402
from tests.support.private_database_servers import PrivateMariaDB  # noqa: E402
from tests.support.private_database_servers import PrivatePostgres  # noqa: E402

DATABASE_URL = os.environ.get(
    "GENEVA_BENCH_DATABASE_URL", "sqlite:////tmp/geneva-restart-bench.sqlite3"
)
BROKER_URL = os.environ.get("GENEVA_BENCH_BROKER_URL", "redis://127.0.0.1:6379/14")
RUNS_DIR = "GENEVA_BENCH_RUNS_DIR"
BODY_SECONDS = "GENEVA_BENCH_BODY_SECONDS"
STEPS = int(os.environ.get("GENEVA_BENCH_STEPS", "5"))


def build(database_url: str, broker_url: str) -> tuple[Any, Celery]:
    """The Flask and Celery apps of the bench, the worker and beat: defaults only."""
    celery = Celery("geneva_restart_bench")
    celery.conf.update(flask_geneva.celery_defaults(), broker_url=broker_url)
    celery.conf.beat_schedule = flask_geneva.beat_schedule()
    app = basic.create_app(
        database_url,
        celery=celery,
        TESTING=False,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
        GENEVA_INLINE_CONTINUATION_BUDGET=1,  # the default (the test app's is 1 h)
    )
    basic.geneva.init_celery(celery, app=app)
    return app, celery


app, celery = build(DATABASE_URL, BROKER_URL)


def _body(name: str) -> Any:
    """A step body named ``name``: sleeps, then notes its run in this process's
    file (outside the database, so that a run during the outage counts)."""

    def body(workflow: Any) -> None:
        time.sleep(float(os.environ.get(BODY_SECONDS, "0.01")))
        runs = Path(os.environ[RUNS_DIR]) / f"runs-{os.getpid()}.txt"
        with open(runs, "a") as file:
            file.write(f"{workflow.id} {name}\n")

    return body


class BenchRestartSteps(basic.geneva.Workflow):
    """``GENEVA_BENCH_STEPS`` steps that note their runs outside the database."""

    __geneva_type__ = "BenchRestartSteps"
    may_proceed_without_hero = True

    _steps = [step.anonymous(_body(f"s{n}"), name=f"s{n}") for n in range(STEPS)]


def _progress(session: Any) -> dict[Any, tuple[int, str]]:
    """``{workflow id: (executions completed, workflow state)}``."""
    workflows = basic.geneva.Workflow
    executions = basic.geneva.StepExecution
    done = (
        sa.select(sa.func.count())
        .where(
            executions.workflow_id == workflows.id,
            executions.state == "completed",
        )
        .scalar_subquery()
    )
    rows = session.execute(sa.select(workflows.id, done, workflows.state)).all()
    session.rollback()
    return {row[0]: (row[1], row[2]) for row in rows}


def _stranded(session: Any, at: datetime) -> tuple[int, int]:
    """``(scheduled more than 5 s overdue, in_progress)`` executions now."""
    executions = basic.geneva.StepExecution
    overdue = session.scalar(
        sa.select(sa.func.count()).where(
            executions.state == "scheduled",
            executions.scheduled_for < at - timedelta(seconds=5),
        )
    )
    running = session.scalar(
        sa.select(sa.func.count()).where(executions.state == "in_progress")
    )
    session.rollback()
    return int(overdue or 0), int(running or 0)


def _count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))


def _sum(pattern: str, text: str) -> int:
    return sum(int(number) for number in re.findall(pattern, text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database", choices=("postgresql", "mariadb"), default="postgresql"
    )
    parser.add_argument("--broker", default=BROKER_URL)
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--body-ms", type=float, default=10.0)
    parser.add_argument("--kill-at", type=float, default=0.3)
    parser.add_argument("--outage", type=float, default=10.0)
    parser.add_argument("--give-up", type=float, default=600.0)
    args = parser.parse_args()
    kind = PrivatePostgres if args.database == "postgresql" else PrivateMariaDB
    server = kind()
    directory = Path(tempfile.mkdtemp(prefix="geneva-restart-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        server.setup()
        environment = {
            "GENEVA_BENCH_DATABASE_URL": server.url,
            "GENEVA_BENCH_BROKER_URL": args.broker,
            "GENEVA_BENCH_STEPS": str(STEPS),
            RUNS_DIR: str(directory),
            BODY_SECONDS: str(args.body_ms / 1000),
        }
        bench_app, bench_celery = build(server.url, args.broker)
        with bench_app.app_context():
            basic.db.create_all()
        purge_celery_queue(bench_celery)

        def start(arguments: list[str], name: str) -> subprocess.Popen[bytes]:
            process = start_celery(
                "bench.database_restart:celery",
                arguments,
                directory / f"{name}.log",
                environment,
                own_process_group=True,
            )
            processes.append(process)
            return process

        start(
            [
                "worker",
                "--pool=prefork",
                f"--concurrency={args.concurrency}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
            ],
            "worker",
        )
        start(
            ["beat", f"--schedule={directory / 'beat-schedule'}", "-l", "info"], "beat"
        )
        total = args.workflows * STEPS
        print(
            f"{args.database}: {args.workflows} workflows x {STEPS} steps on "
            f"{args.concurrency} prefork workers; kill at {args.kill_at:.0%} of "
            f"the steps, restart {args.outage:g} s later",
            flush=True,
        )
        with bench_app.app_context():
            session = basic.db.session
            started = time.monotonic()
            for _ in range(args.workflows):
                BenchRestartSteps.create(hero=None, allow_multiple=True)
            session.remove()
            print(f"created in {time.monotonic() - started:.1f} s", flush=True)
            while True:
                done = sum(count for count, _ in _progress(session).values())
                if done >= total * args.kill_at:
                    break
                time.sleep(0.1)
            before = _progress(session)
            session.remove()
            basic.db.engine.dispose()
            killed = time.monotonic()
            server.kill()
            time.sleep(max(0.0, args.outage - (time.monotonic() - killed)))
            server.start()
            restarted = time.monotonic()
            restarted_at = datetime.now(UTC)
            print(
                f"outage: {restarted - killed:.1f} s (at {sum(c for c, _ in before.values())}"
                f" of {total} steps)",
                flush=True,
            )
            unfinished = {
                workflow_id
                for workflow_id, (_, state) in before.items()
                if state not in ("finished", "canceled")
            }
            time.sleep(5)
            overdue, running = _stranded(session, restarted_at)
            moved: dict[Any, float] = {}
            while True:
                now = time.monotonic()
                progress = _progress(session)
                for workflow_id in unfinished - moved.keys():
                    count, state = progress[workflow_id]
                    if count > before[workflow_id][0] or state == "finished":
                        moved[workflow_id] = now - restarted
                finished = sum(
                    1 for _, state in progress.values() if state == "finished"
                )
                if finished == args.workflows or now - restarted > args.give_up:
                    break
                time.sleep(0.5)
            ended = time.monotonic() - restarted
            states = collections.Counter(state for _, state in progress.values())
        runs: collections.Counter[str] = collections.Counter()
        for path in directory.glob("runs-*.txt"):
            runs.update(path.read_text().splitlines())
        logs = "".join(
            path.read_text(errors="replace") for path in directory.glob("*.log")
        )
        reran = sum(count - 1 for count in runs.values() if count > 1)
        waits = sorted(moved.values())
        figures = {
            "refused": _count(
                r"the claim of step execution \S+ lost its database connection", logs
            ),
            "left": _count("leaving it scheduled for the dispatcher", logs),
            "republished": _sum(r"published again (\d+) scheduled", logs),
            "waited": _count("reached the database again", logs),
            "given_up": _count("stays in_progress without its outcome", logs),
            "released": _sum(r"released (\d+) in_progress", logs),
        }
        print(
            f"5 s after the restart: {overdue} scheduled > 5 s overdue, "
            f"{running} in_progress"
        )
        print(
            "claims refused (R-FLT-01): {refused}; deliveries left to the "
            "dispatcher (R-FLT-20): {left}; published again by the dispatcher: "
            "{republished}".format(**figures)
        )
        print(
            "finalizes that waited the outage out (R-FLT-10): {waited}; finalizes "
            "given up (R-FLT-11): {given_up}; executions released: "
            "{released}".format(**figures)
        )
        if waits:
            print(
                f"every workflow moving again: {len(waits)} of {len(unfinished)} "
                f"unfinished at the restart moved, the last {waits[-1]:.1f} s after "
                f"the restart (median {statistics.median(waits):.1f} s)"
            )
        print(
            f"finished bodies run again: {reran}; body runs {sum(runs.values())} for "
            f"{total} steps"
        )
        print(
            f"lost: {args.workflows - states.get('finished', 0)} not finished "
            f"{ended:.0f} s after the restart ({dict(states)})"
        )
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        server.stop()
        print(f"logs: {directory}")


if __name__ == "__main__":
    main()
