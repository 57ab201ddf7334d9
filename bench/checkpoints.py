"""Checkpoint cost: ``iterate_over_records`` with a checkpoint per item vs raw commits.

Both sides walk the same N rows of the ``users`` table and add 1 to each row's
``counter``, committing after every item:

- **geneva**: one resumable step, ``for user in it.iterate_over_records(...)``,
  run by the executor (interruptible, so every checkpoint also reads the
  workflow state, R-INT-01). Each checkpoint writes the row, the cursor and
  commits (R-IT-10).
- **raw**: a Core connection doing ``UPDATE users SET counter = counter + 1
  WHERE id = :id`` followed by ``COMMIT`` per item (the ids are read up front).

Prints items/s for both and the ratio geneva/raw (target >= 0.5). Usage::

    python bench/checkpoints.py --rows 5000 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test_b

The database's geneva tables and ``users`` table are dropped and re-created.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from flask_geneva import Executor  # noqa: E402
from flask_geneva import resumable_step  # noqa: E402
from tests.apps import basic  # noqa: E402
from tests.support.schema_setup import drop_schema  # noqa: E402
from tests.support.schema_setup import install_schema  # noqa: E402

DEFAULT_URL = os.environ.get(
    "GENEVA_BENCH_DATABASE_URL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/test_b",
)


class CheckpointBench(basic.geneva.Workflow):
    """Adds 1 to every bench row, one checkpoint per row."""

    @resumable_step
    def walk(self, it: Any) -> None:
        rows = sa.select(basic.User).where(basic.User.email.like("bench-%"))
        for user in it.iterate_over_records(rows, batch_size=1000):
            user.counter += 1


def _reset(app: Any, rows: int) -> Any:
    with app.app_context():
        drop_schema(app)
        basic.User.__table__.drop(basic.db.engine, checkfirst=True)
        install_schema(app)
        basic.User.__table__.create(basic.db.engine)
        basic.db.session.execute(
            sa.insert(basic.User),
            [{"email": f"bench-{i:07d}", "counter": 0} for i in range(rows)],
        )
        hero = basic.User(email="hero@example.com")
        basic.db.session.add(hero)
        basic.db.session.commit()
        return hero.id


def run_geneva(app: Any, rows: int) -> float:
    """Return items/s of the resumable step."""
    hero_id = _reset(app, rows)
    with app.app_context():
        hero = basic.db.session.get(basic.User, hero_id)
        workflow = CheckpointBench.create(hero=hero)
        execution_id = workflow.current_execution.id
        started = time.perf_counter()
        Executor.execute(execution_id)
        elapsed = time.perf_counter() - started
        execution = basic.db.session.get(basic.geneva.StepExecution, execution_id)
        if execution is None or execution.outcome != "success":
            raise SystemExit(f"the bench step did not succeed: {execution!r}")
        total = basic.db.session.scalar(sa.select(sa.func.sum(basic.User.counter)))
        if total != rows:
            raise SystemExit(f"expected {rows} increments, found {total}")
        basic.db.session.remove()
    return rows / elapsed


def run_raw(app: Any, rows: int) -> float:
    """Return items/s of one UPDATE + COMMIT per item."""
    _reset(app, rows)
    users = basic.User.__table__
    with app.app_context():
        engine = basic.db.engine
        with engine.connect() as connection:
            ids = list(
                connection.scalars(
                    sa.select(users.c.id)
                    .where(users.c.email.like("bench-%"))
                    .order_by(users.c.id)
                )
            )
            connection.commit()
            statement = (
                sa.update(users)
                .where(users.c.id == sa.bindparam("row_id"))
                .values(counter=users.c.counter + 1)
            )
            started = time.perf_counter()
            for row_id in ids:
                connection.execute(statement, {"row_id": row_id})
                connection.commit()
            elapsed = time.perf_counter() - started
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--rounds", type=int, default=3, help="best of N rounds")
    args = parser.parse_args()
    app = basic.create_app(args.database_url)
    geneva_rates, raw_rates = [], []
    for _ in range(args.rounds):
        raw_rates.append(run_raw(app, args.rows))
        geneva_rates.append(run_geneva(app, args.rows))
    geneva_rate, raw_rate = max(geneva_rates), max(raw_rates)
    print(f"database: {sa.make_url(args.database_url).get_backend_name()}")
    print(f"rows: {args.rows}, best of {args.rounds} rounds")
    print(f"iterate_over_records, checkpoint per item: {geneva_rate:,.0f} items/s")
    print(f"raw UPDATE + COMMIT per item:              {raw_rate:,.0f} items/s")
    print(f"ratio geneva/raw: {geneva_rate / raw_rate:.2f} (target >= 0.5)")


if __name__ == "__main__":
    main()
