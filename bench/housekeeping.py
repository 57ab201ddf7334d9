"""Housekeeping at scale on PostgreSQL (issue: housekeeping, R-HK-12/20, R-DM-12).

1. Inserts N workflows with one ``in_progress`` execution each, 99 % of them fresh
   (started within the last 30 minutes) and 1 % stuck (started over an hour ago).
2. Prints the ``EXPLAIN ANALYZE`` plan of the stuck in-progress batch query (it must
   use the partial index ``index_geneva_drive_step_executions_in_progress_started_at``),
   the time of that query, and the time to recover one full batch.
3. Marks every workflow finished 60 days ago and times the cleanup of all N
   workflows and their executions in batches.

The tables are dropped and re-created with ``db.create_all()``: use a scratch
database. Usage::

    python bench/housekeeping.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test_a
    python bench/housekeeping.py --rows 100000      # smaller, quicker

Target: one recovery batch query <= 50 ms with 1,000,000 executions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.db.queries import maintenance as maintenance_queries
from flask_geneva.engine.operators import housekeeping
from flask_geneva.engine.operators import stuck_recovery
from flask_geneva.ext.app_state import current_state
from flask_geneva.models import StepExecutionState
from tests.apps import basic

TYPE = "BenchHousekeeping"


class BenchHousekeeping(basic.geneva.Workflow):
    """One step; the bench only needs its name for rescheduling."""

    __geneva_type__ = TYPE

    @step
    def work(self) -> None:
        pass


def _populate(rows: int) -> None:
    now = clock.now().replace(tzinfo=None)
    with basic.db.engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO geneva_drive_workflows (type, state, current_step_name, "
                "next_step_name, allow_multiple, created_at, updated_at) "
                "SELECT :type, 'performing', 'work', 'work', true, :now, :now "
                "FROM generate_series(1, :rows)"
            ),
            {"type": TYPE, "now": now, "rows": rows},
        )
        # Every 100th execution started 2 h+ ago (stuck); the rest within 30 min.
        connection.execute(
            sa.text(
                "INSERT INTO geneva_drive_step_executions (workflow_id, step_name, "
                "state, scheduled_for, started_at, created_at, updated_at) "
                "SELECT id, 'work', 'in_progress', t, t, t, t FROM ("
                "  SELECT id, CASE WHEN id % 100 = 0 "
                "    THEN CAST(:now AS timestamp) - interval '2 hours' "
                "         - id * interval '1 millisecond' "
                "    ELSE CAST(:now AS timestamp) - (id % 1800) * interval '1 second' "
                "  END AS t FROM geneva_drive_workflows) AS s"
            ),
            {"now": now},
        )
    with basic.db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        connection.execute(sa.text("VACUUM ANALYZE geneva_drive_workflows"))
        connection.execute(sa.text("VACUUM ANALYZE geneva_drive_step_executions"))


def _batch_query(batch_size: int) -> sa.Select[tuple[object, ...]]:
    execution_cls = basic.geneva.StepExecution
    cutoff = clock.now() - current_state().config.stuck_in_progress_threshold
    return (
        sa.select(execution_cls.id, execution_cls.workflow_id, execution_cls.started_at)
        .where(execution_cls.state == "in_progress")
        .where(execution_cls.started_at < cutoff)
        .order_by(execution_cls.started_at, execution_cls.id)
        .limit(batch_size)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument(
        "--database-url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/test_a",
    )
    args = parser.parse_args()

    app = basic.create_app(
        args.database_url,
        TESTING=False,
        GENEVA_HOUSEKEEPING_BATCH_SIZE=args.batch_size,
        GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER=timedelta(days=30),
    )
    with app.app_context():
        if basic.db.engine.dialect.name != "postgresql":
            raise SystemExit("this bench needs PostgreSQL (--database-url)")
        basic.db.drop_all()
        basic.db.create_all()
        started = time.perf_counter()
        _populate(args.rows)
        print(
            f"inserted {args.rows:,} workflows + in_progress executions "
            f"({args.rows // 100:,} stuck) in {time.perf_counter() - started:.1f} s"
        )
        session = basic.db.session()
        query = _batch_query(args.batch_size)
        compiled = query.compile(
            dialect=basic.db.engine.dialect, compile_kwargs={"literal_binds": True}
        )
        plan = session.execute(
            sa.text(f"EXPLAIN (ANALYZE, BUFFERS) {compiled}")
        ).scalars()
        print("\nEXPLAIN ANALYZE of one stuck in-progress batch query:")
        for line in plan:
            print(f"  {line}")
        session.rollback()

        timings = []
        for _ in range(5):
            begin = time.perf_counter()
            session.execute(_batch_query(args.batch_size)).all()
            timings.append((time.perf_counter() - begin) * 1000)
            session.rollback()
        print(
            f"\nbatch query ({args.batch_size} rows): median "
            f"{statistics.median(timings):.1f} ms, min {min(timings):.1f} ms"
        )

        config = current_state().config
        app.extensions["geneva"].recording_backend.clear()
        # One full batch: select + per-row locked transaction + new execution.
        candidates = maintenance_queries._candidates(
            session,
            basic.geneva.StepExecution,
            column=basic.geneva.StepExecution.started_at,
            criteria=(
                basic.geneva.StepExecution.state == "in_progress",
                basic.geneva.StepExecution.started_at
                < clock.now() - config.stuck_in_progress_threshold,
            ),
            batch_size=args.batch_size,
        )
        first_batch = [next(candidates) for _ in range(args.batch_size)]
        candidates.close()
        begin = time.perf_counter()
        for execution_id, workflow_id in first_batch:
            stuck_recovery._recover_row(
                session,
                execution_id,
                workflow_id,
                expected=StepExecutionState.IN_PROGRESS,
                action="reattempt",
            )
            session.commit()
        elapsed = time.perf_counter() - begin
        print(
            f"recovered one batch of {len(first_batch)} rows in {elapsed:.2f} s "
            f"({elapsed / len(first_batch) * 1000:.2f} ms per row)"
        )
        app.extensions["geneva"].recording_backend.clear()

        long_ago = (clock.now() - timedelta(days=60)).replace(tzinfo=None)
        with basic.db.engine.begin() as connection:
            connection.execute(
                sa.text(
                    "UPDATE geneva_drive_workflows SET state = 'finished', "
                    "transitioned_at = :at"
                ),
                {"at": long_ago},
            )
            connection.execute(
                sa.text(
                    "UPDATE geneva_drive_step_executions SET state = 'completed', "
                    "outcome = 'success', finished_at = :at WHERE state <> 'completed'"
                ),
                {"at": long_ago},
            )
            total = connection.scalar(
                sa.text("SELECT count(*) FROM geneva_drive_step_executions")
            )
        with basic.db.engine.connect().execution_options(
            isolation_level="AUTOCOMMIT"
        ) as connection:
            connection.execute(sa.text("VACUUM ANALYZE geneva_drive_workflows"))
            connection.execute(sa.text("VACUUM ANALYZE geneva_drive_step_executions"))
        begin = time.perf_counter()
        workflows, executions = housekeeping.cleanup(session, config=config)
        elapsed = time.perf_counter() - begin
        print(
            f"\ncleanup: deleted {executions:,} of {total:,} executions and "
            f"{workflows:,} workflows in {elapsed:.1f} s, batches of "
            f"{args.batch_size} ({elapsed / max(executions, 1) * 1e6:.1f} us per "
            "execution)"
        )
        basic.db.session.remove()
        basic.db.drop_all()


if __name__ == "__main__":
    main()
