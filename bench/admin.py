"""Admin pages at scale on PostgreSQL (issue: admin UI, R-ADM-30).

1. Builds the schema with the install migrations (the real indexes) and fills it
   with ``--workflows`` workflows (default 1,000,000) of two classes in a realistic
   mix of states, ``--executions-per-workflow`` executions each (default 5, so
   5,000,000), plus one workflow with ``--detail-executions`` executions (default
   1,000) for the detail page. Rows are generated in SQL (``generate_series``), in
   chunks, and the tables are analyzed.
2. Renders every admin page through the Flask test client: the overview, the first
   page of each list, filtered lists on indexed columns, the big workflow's detail
   page and an execution's detail page. Prints the median of ``--repeat`` renders
   (after one warm-up) and the SQL statement count per page.
3. Checks that no list page runs an unbounded ``COUNT(*)`` (R-ADM-30): every
   statement with ``count(`` on a list page must count a ``LIMIT``-ed subquery.

Target: each page < 500 ms. Use a scratch database: the tables are dropped first
(``--reuse`` keeps rows from an earlier run with the same sizes). Usage::

    python bench/admin.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/geneva_bench
    python bench/admin.py --workflows 100000      # smaller, quicker
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask_geneva import step
from tests.apps import basic
from tests.schema_setup import drop_schema
from tests.schema_setup import install_schema

WORKFLOWS = "geneva_drive_workflows"
EXECUTIONS = "geneva_drive_step_executions"
TARGET_MS = 500.0


class BenchAdminOnboarding(basic.geneva.Workflow):
    """Five steps, the shape most generated workflows have."""

    __geneva_type__ = "BenchAdminOnboarding"
    may_proceed_without_hero = True
    _steps = step.repeat(5, lambda wf: None)


class BenchAdminExport(basic.geneva.Workflow):
    """A second class, so class filters and the overview have two rows."""

    __geneva_type__ = "BenchAdminExport"
    may_proceed_without_hero = True
    _steps = step.repeat(5, lambda wf: None)


# State mix by id modulo 100: 80 % finished, 4 % canceled, 3 % paused (with a
# failed execution), 1 % performing (some stuck), 12 % ready (some overdue).
_WORKFLOW_STATE = """
CASE
  WHEN g % 100 < 80 THEN 'finished'
  WHEN g % 100 < 84 THEN 'canceled'
  WHEN g % 100 < 87 THEN 'paused'
  WHEN g % 100 < 88 THEN 'performing'
  ELSE 'ready'
END
"""

_INSERT_WORKFLOWS = f"""
INSERT INTO {WORKFLOWS}
  (id, type, hero_type, hero_id, state, current_step_name, next_step_name,
   allow_multiple, started_at, transitioned_at, created_at, updated_at)
SELECT g,
       CASE WHEN g % 10 = 0 THEN 'BenchAdminExport' ELSE 'BenchAdminOnboarding' END,
       'User', g, {_WORKFLOW_STATE}, NULL, 'step_5', false,
       now() - make_interval(secs => g), now() - make_interval(secs => g / 2),
       now() - make_interval(secs => g), now() - make_interval(secs => g / 2)
FROM generate_series(:first, :last) AS g
"""

# Execution k of workflow g; the last one (k = n) carries the workflow's state.
_INSERT_EXECUTIONS = f"""
INSERT INTO {EXECUTIONS}
  (workflow_id, step_name, state, outcome, scheduled_for, started_at,
   completed_at, failed_at, canceled_at, finished_at, error_class_name,
   error_message, job_id, created_at, updated_at)
SELECT w.id, 'step_' || k,
  CASE
    WHEN k < :n THEN 'completed'
    WHEN w.state = 'finished' THEN 'completed'
    WHEN w.state = 'canceled' THEN 'canceled'
    WHEN w.state = 'paused' THEN 'failed'
    WHEN w.state = 'performing' THEN 'in_progress'
    ELSE 'scheduled'
  END,
  CASE
    WHEN k < :n OR w.state = 'finished' THEN 'success'
    WHEN w.state = 'canceled' THEN 'canceled'
    WHEN w.state = 'paused' THEN 'failed'
  END,
  CASE
    WHEN k = :n AND w.state = 'ready' AND w.id % 7 = 0
      THEN now() - interval '2 hours'
    WHEN k = :n AND w.state = 'ready' THEN now() + make_interval(mins => (w.id % 600)::int)
    ELSE w.created_at + make_interval(mins => k::int)
  END,
  CASE
    WHEN k = :n AND w.state = 'ready' THEN NULL
    WHEN k = :n AND w.state = 'performing' AND w.id % 5 = 0
      THEN now() - interval '3 hours'
    ELSE w.created_at + make_interval(mins => k::int)
  END,
  CASE WHEN k < :n OR w.state = 'finished'
    THEN w.created_at + make_interval(mins => k::int, secs => 1) END,
  CASE WHEN k = :n AND w.state = 'paused'
    THEN w.created_at + make_interval(mins => k::int, secs => 1) END,
  CASE WHEN k = :n AND w.state = 'canceled'
    THEN w.created_at + make_interval(mins => k::int, secs => 1) END,
  CASE WHEN k < :n OR w.state IN ('finished', 'canceled', 'paused')
    THEN w.created_at + make_interval(mins => k::int, secs => 1) END,
  CASE WHEN k = :n AND w.state = 'paused'
    THEN CASE WHEN w.id % 2 = 0 THEN 'TimeoutError' ELSE 'ConnectionError' END END,
  CASE WHEN k = :n AND w.state = 'paused' THEN 'upstream did not answer' END,
  md5(w.id::text || '-' || k),
  w.created_at + make_interval(mins => k::int),
  w.created_at + make_interval(mins => k::int, secs => 1)
FROM {WORKFLOWS} AS w CROSS JOIN generate_series(1, :n) AS k
WHERE w.id BETWEEN :first AND :last
"""


def populate(engine: sa.Engine, workflows: int, per_workflow: int, detail: int) -> int:
    """Insert the rows; return the id of the workflow with ``detail`` executions."""
    chunk = 100_000
    started = time.perf_counter()
    with engine.begin() as connection:
        for first in range(1, workflows + 1, chunk):
            last = min(first + chunk - 1, workflows)
            connection.execute(
                sa.text(_INSERT_WORKFLOWS), {"first": first, "last": last}
            )
            connection.execute(
                sa.text(_INSERT_EXECUTIONS),
                {"first": first, "last": last, "n": per_workflow},
            )
            done = last * (1 + per_workflow)
            print(
                f"  {last:>9,} workflows, {done:>11,} rows "
                f"({time.perf_counter() - started:6.1f} s)",
                flush=True,
            )
        big = workflows + 1
        connection.execute(
            sa.text(
                f"INSERT INTO {WORKFLOWS} (id, type, hero_type, hero_id, state,"
                " next_step_name, allow_multiple, created_at, updated_at)"
                " VALUES (:id, 'BenchAdminOnboarding', 'User', :id, 'paused',"
                " 'step_5', false, now() - interval '40 days', now())"
            ),
            {"id": big},
        )
        connection.execute(
            sa.text(
                f"INSERT INTO {EXECUTIONS} (workflow_id, step_name, state, outcome,"
                " scheduled_for, started_at, completed_at, finished_at, job_id,"
                " created_at, updated_at)"
                " SELECT :id, 'step_' || (1 + k % 5), 'completed', 'success',"
                " now() - make_interval(hours => (:n - k)::int),"
                " now() - make_interval(hours => (:n - k)::int),"
                " now() - make_interval(hours => (:n - k)::int, secs => -2),"
                " now() - make_interval(hours => (:n - k)::int, secs => -2),"
                " md5(k::text), now() - make_interval(hours => (:n - k)::int),"
                " now() - make_interval(hours => (:n - k)::int)"
                " FROM generate_series(1, :n) AS k"
            ),
            {"id": big, "n": detail},
        )
        for table in (WORKFLOWS, EXECUTIONS):
            connection.execute(
                sa.text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                    f" (SELECT max(id) FROM {table}))"
                )
            )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.exec_driver_sql(f"VACUUM ANALYZE {WORKFLOWS}")
        c.exec_driver_sql(f"VACUUM ANALYZE {EXECUTIONS}")
    print(f"  populated in {time.perf_counter() - started:.1f} s")
    return big


_COUNT = re.compile(r"\bcount\s*\(", re.IGNORECASE)


def unbounded_counts(statements: list[str]) -> list[str]:
    """Statements that count rows without a LIMIT-ed subquery (R-ADM-30)."""
    return [
        statement
        for statement in statements
        if _COUNT.search(statement) and "LIMIT" not in statement.upper()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/geneva_bench",
    )
    parser.add_argument("--workflows", type=int, default=1_000_000)
    parser.add_argument("--executions-per-workflow", type=int, default=5)
    parser.add_argument("--detail-executions", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    if sa.make_url(args.database_url).get_backend_name() != "postgresql":
        raise SystemExit("bench/admin.py measures PostgreSQL (R-ADM-30)")

    app = basic.create_app(
        args.database_url,
        TESTING=True,  # access is open without GENEVA_ADMIN_ACCESS (R-ADM-02)
        SECRET_KEY="bench",  # noqa: S106 - a local benchmark
        GENEVA_ADMIN_ENABLED=True,
    )
    with app.app_context():
        engine = basic.db.engine
        expected = args.workflows + 1
        with engine.connect() as connection:
            inspector = sa.inspect(connection)
            present = WORKFLOWS in inspector.get_table_names() and connection.scalar(
                sa.text(f"SELECT count(*) FROM {WORKFLOWS}")
            )
        if args.reuse and present == expected:
            big = expected
            print(f"reusing {expected:,} workflows")
        else:
            drop_schema(app)
            basic.db.drop_all()
            install_schema(app)
            print(
                f"populating {args.workflows:,} workflows x "
                f"{args.executions_per_workflow} executions"
            )
            big = populate(
                engine,
                args.workflows,
                args.executions_per_workflow,
                args.detail_executions,
            )
        # The hero table; heroes themselves are not generated, so the pages show
        # their "hero not found" markers (R-ADM-31).
        basic.User.__table__.create(engine, checkfirst=True)
        with engine.connect() as connection:
            execution_id = connection.scalar(
                sa.text(f"SELECT max(id) FROM {EXECUTIONS} WHERE workflow_id = :id"),
                {"id": big},
            )
            totals = connection.execute(
                sa.text(
                    f"SELECT (SELECT count(*) FROM {WORKFLOWS}),"
                    f" (SELECT count(*) FROM {EXECUTIONS})"
                )
            ).one()
        print(f"rows: {totals[0]:,} workflows, {totals[1]:,} executions")

    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    pages = [
        ("overview", "/geneva/", False),
        ("workflows, first page", "/geneva/workflows/", True),
        ("workflows, state=paused", "/geneva/workflows/?state=paused", True),
        (
            "workflows, class filter",
            "/geneva/workflows/?type=BenchAdminExport&state=ready",
            True,
        ),
        ("workflows, hero search", f"/geneva/workflows/?q={big}", True),
        ("workflows, sort created_at", "/geneva/workflows/?sort=created_at", True),
        ("workflows, overdue", "/geneva/workflows/?overdue=1", True),
        (
            "workflows, latest error class",
            "/geneva/workflows/?error_class=TimeoutError",
            True,
        ),
        (
            "workflows, created range",
            "/geneva/workflows/?created_from=2000-01-01&created_to=2100-01-01",
            True,
        ),
        ("executions, first page", "/geneva/step-executions/", True),
        ("executions, state=failed", "/geneva/step-executions/?state=failed", True),
        ("executions, overdue", "/geneva/step-executions/?only=overdue", True),
        ("executions, stuck", "/geneva/step-executions/?only=stuck", True),
        (
            f"workflow detail ({args.detail_executions} executions)",
            f"/geneva/workflows/{big}",
            False,
        ),
        ("execution detail", f"/geneva/step-executions/{execution_id}", False),
    ]
    client = app.test_client()
    failures = []
    print(f"{'page':48} {'median ms':>9} {'max ms':>8} {'SQL':>4}")
    for label, url, is_list in pages:
        timings = []
        for attempt in range(args.repeat + 1):
            statements.clear()
            started = time.perf_counter()
            response = client.get(url)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                failures.append(f"{label}: HTTP {response.status_code} for {url}")
                break
            if attempt:
                timings.append(elapsed)
        if not timings:
            continue
        median = statistics.median(timings)
        flag = "" if median < TARGET_MS else "  <-- over target"
        print(
            f"{label:48} {median:9.1f} {max(timings):8.1f} {len(statements):4d}{flag}"
        )
        if median >= TARGET_MS:
            failures.append(f"{label}: {median:.0f} ms >= {TARGET_MS:.0f} ms")
        if is_list:
            for statement in unbounded_counts(statements):
                failures.append(
                    f"{label}: unbounded count: {' '.join(statement.split())[:200]}"
                )
    if failures:
        print("\nNOT MET:")
        for failure in failures:
            print(f"  {failure}")
        raise SystemExit(1)
    print(f"\nevery page under {TARGET_MS:.0f} ms; no list ran an unbounded COUNT(*)")


if __name__ == "__main__":
    main()
