"""What one dispatcher run costs with a large parked backlog (issue 40, R-WRK-13).

A dispatcher run (:func:`flask_geneva.engine.operators.dispatcher.run_dispatcher`,
what ``geneva.dispatch_due`` runs every ``GENEVA_DISPATCH_INTERVAL``) must cost
what is due, not what is parked: its passes read through indexes bounded by
time (R-DSP-02, R-FLT-20, R-WSIG-31/40, R-LIM-16, R-CHD-24, R-WRK-06).

On PostgreSQL, in a scratch database, the bench installs the schema with the
install migrations (the real indexes) and fills it, on the server, with
``--parked`` workflows, each with one parked execution, in equal parts:

- deferred far ahead (``job_id = "geneva:deferred"``, due in 1 to 30 days);
- published with an eta within the hour (a task id as ``job_id``);
- waiting for a signal (``waiting``, a ``wait_deadline`` days ahead);
- of a paused workflow (``scheduled``, due an hour ago: left for ``resume()``).

Then it times ``--rounds`` dispatcher runs with ``--due`` deferred executions
due now (reset to deferred before each run), and as many runs with nothing due,
through a recording backend (no broker), and prints the medians and maxima,
the statements per run and the slowest statement (``--explain`` prints its
plan). It does the same at ``--small`` parked first, so that the two sizes can
be compared in one run: a run that is O(due) costs the same at both.
``--json FILE`` also writes the figures of both sizes (milliseconds) there.

Usage::

    python bench/dispatcher_tick.py \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench_dispatch \\
        --parked 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask_geneva import step
from flask_geneva.engine.operators import dispatcher
from flask_geneva.ext.app_state import current_context
from tests.apps import basic
from tests.support.schema_setup import drop_schema
from tests.support.schema_setup import install_schema

WORKFLOWS = "geneva_drive_workflows"
EXECUTIONS = "geneva_drive_step_executions"
TYPE = "BenchTickParked"
TARGET_MS = 50.0


class BenchTickParked(basic.geneva.Workflow):
    """The parked workflows' class: one step, never run by the bench."""

    __geneva_type__ = TYPE
    may_proceed_without_hero = True

    @step
    def wait(self) -> None:
        """Never runs: the bench publishes through a recording backend."""


_INSERT_WORKFLOWS = f"""
INSERT INTO {WORKFLOWS}
  (id, type, hero_type, hero_id, state, next_step_name, allow_multiple,
   started_at, transitioned_at, created_at, updated_at)
SELECT g, :type, 'User', g,
  CASE WHEN g % 4 = 3 THEN 'paused' ELSE 'ready' END,
  'wait', false, now() - interval '1 day', now() - interval '1 day',
  now() - interval '1 day', now() - interval '1 day'
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g
"""

_INSERT_EXECUTIONS = f"""
INSERT INTO {EXECUTIONS}
  (id, workflow_id, step_name, state, scheduled_for, job_id, waiting_since,
   wait_deadline, created_at, updated_at)
SELECT g, g, 'wait',
  CASE WHEN g % 4 = 2 THEN 'waiting' ELSE 'scheduled' END,
  CASE g % 4
    WHEN 0 THEN now() + make_interval(days => (1 + g % 30)::int)
    WHEN 1 THEN now() + make_interval(secs => (60 + g % 3500)::int)
    WHEN 2 THEN now() - interval '1 hour'
    ELSE now() - interval '1 hour'
  END AT TIME ZONE 'UTC',
  CASE g % 4
    WHEN 0 THEN 'geneva:deferred'
    WHEN 1 THEN 'task-' || g
    WHEN 3 THEN 'task-' || g
  END,
  CASE WHEN g % 4 = 2 THEN (now() - interval '1 hour') AT TIME ZONE 'UTC' END,
  CASE WHEN g % 4 = 2 THEN (now() + make_interval(days => (1 + g % 30)::int))
    AT TIME ZONE 'UTC' END,
  (now() - interval '1 day') AT TIME ZONE 'UTC',
  (now() - interval '1 hour') AT TIME ZONE 'UTC'
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g
"""

#: Makes ``ids`` due now and deferred again (before each measured run).
_MAKE_DUE = f"""
UPDATE {EXECUTIONS}
SET job_id = 'geneva:deferred', scheduled_for = (now() - interval '1 second')
  AT TIME ZONE 'UTC', updated_at = now() AT TIME ZONE 'UTC'
WHERE id = ANY(:ids)
"""


def _fill(engine: sa.Engine, first: int, last: int) -> None:
    """Insert workflows and executions ``first..last`` (ids), then analyze."""
    with engine.begin() as connection:
        connection.exec_driver_sql("SET LOCAL synchronous_commit = off")
        params = {"first": first, "last": last, "type": TYPE}
        connection.execute(sa.text(_INSERT_WORKFLOWS), params)
        connection.execute(sa.text(_INSERT_EXECUTIONS), params)
        for table in (WORKFLOWS, EXECUTIONS):
            connection.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                f" (SELECT max(id) FROM {table}))"
            )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        for table in (WORKFLOWS, EXECUTIONS):
            c.exec_driver_sql(f"VACUUM ANALYZE {table}")


def _due_ids(count: int) -> list[int]:
    """``count`` deferred executions of ready workflows (``id % 4 = 0``)."""
    return [4 * (number + 1) for number in range(count)]


class _Statements:
    """Times every statement the engine sends while listening."""

    def __init__(self, engine: sa.Engine) -> None:
        self.timings: list[tuple[float, str, Any]] = []
        event.listen(engine, "before_cursor_execute", self._start)
        event.listen(engine, "after_cursor_execute", self._end)

    def _start(self, conn: Any, *_: Any) -> None:
        conn.info["bench_started"] = time.perf_counter()

    def _end(
        self, conn: Any, _cursor: Any, statement: str, params: Any, *_: Any
    ) -> None:
        elapsed = (time.perf_counter() - conn.info.pop("bench_started")) * 1000
        self.timings.append((elapsed, statement, params))


def _runs(
    app: Any, due: list[int], rounds: int, statements: _Statements
) -> dict[str, Any]:
    """``rounds`` dispatcher runs with ``due`` made due before each."""
    engine = basic.db.engine
    backend = app.extensions["geneva"].recording_backend
    times: list[float] = []
    counts: list[int] = []
    published: list[int] = []
    slowest: tuple[float, str, Any] = (0.0, "", None)
    for _ in range(rounds):
        if due:
            with engine.begin() as connection:
                connection.execute(sa.text(_MAKE_DUE), {"ids": due})
        backend.clear()
        statements.timings.clear()
        started = time.perf_counter()
        run = dispatcher.run_dispatcher(current_context())
        times.append((time.perf_counter() - started) * 1000)
        basic.db.session.remove()
        counts.append(len(statements.timings))
        published.append(run.published)
        slowest = max([slowest, *statements.timings], key=lambda entry: entry[0])
    return {
        "median_ms": statistics.median(times),
        "max_ms": max(times),
        "statements": statistics.median(counts),
        "published": statistics.median(published),
        "slowest": slowest,
        "last_run": list(statements.timings),
    }


def _report(label: str, figures: dict[str, Any]) -> None:
    slowest_ms, statement, _params = figures["slowest"]
    print(
        f"  {label:34} median {figures['median_ms']:7.1f} ms  max "
        f"{figures['max_ms']:7.1f} ms  {figures['statements']:4.0f} statements  "
        f"published {figures['published']:.0f}  slowest statement {slowest_ms:.1f} ms"
    )
    print(f"    {' '.join(statement.split())[:160]}")


def _shapes(figures: dict[str, Any]) -> None:
    """The last run's statements grouped by their text: count, total ms."""
    grouped: dict[str, list[float]] = {}
    for elapsed, statement, _params in figures["last_run"]:
        grouped.setdefault(" ".join(statement.split())[:150], []).append(elapsed)
    for text, times in sorted(grouped.items(), key=lambda item: -sum(item[1])):
        print(f"      {len(times):4d} x {sum(times):7.1f} ms  {text}")


def _explain(engine: sa.Engine, figures: dict[str, Any], over_ms: float) -> None:
    """``EXPLAIN ANALYZE`` of the last run's SELECTs slower than ``over_ms``."""
    for elapsed, statement, params in figures["last_run"]:
        if elapsed < over_ms or not statement.lstrip().upper().startswith("SELECT"):
            continue
        print(f"    {elapsed:.1f} ms: {' '.join(statement.split())}")
        with engine.connect() as connection:
            raw = connection.connection.driver_connection
            assert raw is not None
            with raw.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
                for (line,) in cursor.fetchall():
                    print(f"      {line}")
            connection.rollback()


def _figures(
    args: argparse.Namespace, results: dict[int, tuple[dict[str, Any], ...]]
) -> dict[str, Any]:
    """What ``--json`` writes: per size, the runs with ``--due`` due and with none.

    Times are milliseconds (median and maximum of ``--rounds`` runs);
    ``statements`` and ``published`` are the runs' medians.
    """
    keys = ("median_ms", "max_ms", "statements", "published")
    return {
        "database": "postgresql",
        "due": args.due,
        "rounds": args.rounds,
        "target_ms": TARGET_MS,
        "sizes": [
            {
                "parked": size,
                "due_run": {key: due_run[key] for key in keys},
                "none_due_run": {key: none_run[key] for key in keys},
            }
            for size, (due_run, none_run) in sorted(results.items())
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/bench_dispatch",
    )
    parser.add_argument("--parked", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--explain-ms", type=float, default=10.0)
    parser.add_argument(
        "--statements", action="store_true", help="the last run's statements by text"
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    if sa.make_url(args.database_url).get_backend_name() != "postgresql":
        raise SystemExit("bench/dispatcher_tick.py measures PostgreSQL")
    if not 0 < args.small <= args.parked or args.due * 4 > args.small:
        raise SystemExit("need 0 < --small <= --parked and 4 x --due <= --small")
    app = basic.create_app(
        args.database_url,
        GENEVA_TASK_BACKEND="recording",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
    )
    print(
        f"dispatcher runs, PostgreSQL, {args.due} due per run, {args.rounds} rounds; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    with app.app_context():
        engine = basic.db.engine
        drop_schema(app)
        basic.db.drop_all()
        install_schema(app)
        statements = _Statements(engine)
        filled = 0
        results = {}
        for size in (args.small, args.parked):
            started = time.perf_counter()
            _fill(engine, filled + 1, size)
            filled = size
            print(f"{size:,} parked ({time.perf_counter() - started:.0f} s to fill)")
            due = _due_ids(args.due)
            results[size] = (
                _runs(app, due, args.rounds, statements),
                _runs(app, [], args.rounds, statements),
            )
            _report(f"{args.due} due", results[size][0])
            _report("nothing due", results[size][1])
            if args.statements:
                _shapes(results[size][0])
                _shapes(results[size][1])
            if args.explain:
                _explain(engine, results[size][0], args.explain_ms)
                _explain(engine, results[size][1], args.explain_ms)
        small, large = results[args.small][0], results[args.parked][0]
        ratio = large["median_ms"] / small["median_ms"]
        print(
            f"{args.parked:,} / {args.small:,} parked: {ratio:.2f}x the run's time "
            f"with {args.due} due (O(due) is about 1x); target under {TARGET_MS:g} ms "
            f"at {args.parked:,}: {'met' if large['median_ms'] < TARGET_MS else 'NOT met'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(_figures(args, results), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
