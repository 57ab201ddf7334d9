"""The cost of a limited step, and how soon a freed slot starts the next waiter.

Two measurements, no broker (the recording backend; each published task is
run at once, FIFO), SQL statements and commits counted with SQLAlchemy engine
events as in ``bench/step_overhead.py``:

* ``--mode overhead`` (default): N workflows x 10 no-op steps, in three
  variants run one after the other in one process: ``unlimited``,
  ``concurrency`` (every step under ``Limit(concurrency=10**6)``, one global
  key: never full, the one-statement take and give-back of R-LIM-10/20) and
  ``rate`` (``Limit(rate=10_000, per=1 s)``: the ring of R-LIM-23). Prints
  steps/s, statements and commits per step of each, and the difference to
  ``unlimited``.
* ``--mode release``: N workflows of one limited step, all on one key with
  ``concurrency=1``: each completion grants the slot to the next waiter
  (R-LIM-13). Prints the release latency, from the holder's ``completed_at``
  to the woken waiter's ``started_at``, p50 and p95, in milliseconds.

Usage::

    python bench/limits.py --workflows 200
    python bench/limits.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test
    python bench/limits.py --mode release --workflows 300
    python bench/limits.py --inline-continuation   # as the Celery task runs steps
    python bench/limits.py --json out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scratch
from flask_geneva import Executor
from flask_geneva import Limit
from flask_geneva import step
from tests.apps import basic

STEPS = 10

never_full = Limit("bench-never-full", concurrency=10**6)
fast_rate = Limit("bench-fast-rate", rate=10_000, per=timedelta(seconds=1))
one_at_a_time = Limit("bench-one-at-a-time", concurrency=1)


class BenchUnlimited(basic.geneva.Workflow):
    """Ten no-op steps without a limit."""

    _steps = step.repeat(STEPS, lambda wf: None)


class BenchConcurrencyLimited(basic.geneva.Workflow):
    """Ten no-op steps, each taking a slot of a limit that is never full."""

    _steps = step.repeat(STEPS, lambda wf: None, limit=never_full)


class BenchRateLimited(basic.geneva.Workflow):
    """Ten no-op steps, each a start of a rate limit that is never reached."""

    _steps = step.repeat(STEPS, lambda wf: None, limit=fast_rate)


class BenchOneAtATime(basic.geneva.Workflow):
    """One no-op step; one workflow runs it at a time."""

    @step(limit=one_at_a_time)
    def only(self):
        pass


VARIANTS = {
    "unlimited": BenchUnlimited,
    "concurrency": BenchConcurrencyLimited,
    "rate": BenchRateLimited,
}


def _run(app: Any, workflow_cls: Any, workflows: int, inline: bool) -> dict[str, Any]:
    """Create and run ``workflows`` workflows; return the figures."""
    db = basic.db
    with app.app_context():
        users = [basic.User(email=f"u{i}@example.com") for i in range(workflows)]
        db.session.add_all(users)
        db.session.commit()
        created = [workflow_cls.create(hero=user) for user in users]
        execution_ids = [w.current_execution.id for w in created]
        workflow_ids = [w.id for w in created]
        db.session.remove()
        engine = db.engine
        backend = app.extensions["geneva"].recording_backend
        backend.clear()
        counts = {"statements": 0, "commits": 0}

        def count_statement(_c: object, _k: object, statement: str, *_: object) -> None:
            if not statement.startswith("BEGIN"):
                counts["statements"] += 1

        def count_commit(*_args: object) -> None:
            counts["commits"] += 1

        event.listen(engine, "before_cursor_execute", count_statement)
        event.listen(engine, "commit", count_commit)
        started = time.perf_counter()
        pending = list(execution_ids)
        while pending:
            for execution_id in pending:
                Executor.execute(execution_id, continue_inline=inline)
            pending = [p.step_execution_id for p in backend.enqueued]
            backend.clear()
            db.session.remove()
        elapsed = time.perf_counter() - started
        event.remove(engine, "before_cursor_execute", count_statement)
        event.remove(engine, "commit", count_commit)
        executions = basic.geneva.StepExecution
        rows = db.session.execute(
            sa.select(executions.started_at, executions.completed_at)
            .where(executions.workflow_id.in_(workflow_ids))
            .order_by(executions.started_at)
        ).all()
        finished = db.session.scalar(
            sa.select(sa.func.count())
            .select_from(basic.geneva.Workflow)
            .where(
                basic.geneva.Workflow.id.in_(workflow_ids),
                basic.geneva.Workflow.state == "finished",
            )
        )
        db.session.remove()
    steps = len(rows)
    return {
        "workflows": workflows,
        "finished": finished,
        "steps": steps,
        "seconds": elapsed,
        "steps_per_second": steps / elapsed,
        "statements_per_step": counts["statements"] / steps,
        "commits_per_step": counts["commits"] / steps,
        "rows": rows,
    }


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("overhead", "release"), default="overhead")
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--inline-continuation", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = scratch.database_url(args.database_url, tmp)
    app = basic.create_app(url, TESTING=False)
    dialect = scratch.reset_tables(app)
    figures: dict[str, Any] = {
        "database": dialect,
        "mode": args.mode,
        "inline_continuation": args.inline_continuation,
    }
    print(f"database:            {dialect}")
    print(f"inline continuation: {args.inline_continuation}")
    if args.mode == "overhead":
        base: dict[str, Any] | None = None
        for name, workflow_cls in VARIANTS.items():
            result = _run(app, workflow_cls, args.workflows, args.inline_continuation)
            result.pop("rows")
            figures[name] = result
            line = (
                f"{name:12} {result['finished']}/{args.workflows} finished, "
                f"{result['steps_per_second']:,.0f} steps/s, "
                f"{result['statements_per_step']:.2f} statements/step, "
                f"{result['commits_per_step']:.2f} commits/step"
            )
            if base is not None:
                line += (
                    f"  (vs unlimited: "
                    f"{result['statements_per_step'] - base['statements_per_step']:+.2f}"
                    f" statements, "
                    f"{result['commits_per_step'] - base['commits_per_step']:+.2f}"
                    f" commits, "
                    f"{result['steps_per_second'] / base['steps_per_second']:.2f}x "
                    f"steps/s)"
                )
            else:
                base = result
            print(line)
    else:
        result = _run(app, BenchOneAtATime, args.workflows, args.inline_continuation)
        rows = result.pop("rows")
        latencies = [
            (later[0] - earlier[1]) / timedelta(milliseconds=1)
            for earlier, later in itertools.pairwise(rows)
        ]
        result["release_latency_ms_p50"] = statistics.median(latencies)
        result["release_latency_ms_p95"] = _percentile(latencies, 0.95)
        figures["release"] = result
        print(
            f"release: {result['finished']}/{args.workflows} finished one at a time; "
            f"latency from completed_at to the next started_at: "
            f"p50 {result['release_latency_ms_p50']:.2f} ms, "
            f"p95 {result['release_latency_ms_p95']:.2f} ms; "
            f"{result['statements_per_step']:.2f} statements/step, "
            f"{result['commits_per_step']:.2f} commits/step"
        )
    with app.app_context():
        basic.db.session.remove()
        basic.db.drop_all()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
