"""What a delivered step's claim costs, statement by statement, in one process.

Issue 40: before an engine change reshapes the claim (R-EXE-10, R-EXE-17),
measure the shape here. One workflow's first execution is claimed again and
again on the same rows, each time rolled back (nothing changes between
iterations), in alternating rounds of:

- ``lock``: the claim's locking read alone (with R-EXE-83's hero probe list);
- ``lock+update``: the locking read, the ``claim`` transition and the
  write path's guarded UPDATE of both rows (what Phase 1 sends, without its
  commit);
- ``lock+update+commit``: the same, committed, then the claim undone by a
  second committed UPDATE (so the rows are ``scheduled`` again): the commit's
  cost is this minus ``lock+update`` minus one undo.

It prints wall and process-CPU microseconds per iteration, medians of the
rounds. Usage::

    python bench/claim_cost.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/bench
    python bench/claim_cost.py --iterations 500 --rounds 5

The database's tables are dropped and re-created: give a scratch database.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.db import locks
from flask_geneva.db import session_transactions
from flask_geneva.db import write_path
from flask_geneva.engine.executor import hero_probes
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.ext.app_state import current_context
from tests.apps import basic


class BenchClaimTwoSteps(basic.geneva.Workflow):
    """Two no-op steps: the first is claimed over and over."""

    _steps = step.repeat(2, lambda workflow: None)


def _measure(action: Callable[[], None], iterations: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of ``action``."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(iterations):
        action()
    return (
        (time.perf_counter() - started) / iterations * 1e6,
        (time.process_time() - cpu) / iterations * 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.database_url or f"sqlite:///{Path(tmp.name) / 'bench.sqlite3'}"
    app = basic.create_app(url, TESTING=False)
    with app.app_context():
        basic.db.drop_all()
        basic.db.create_all()
        user = basic.User(email="claim@example.com")
        basic.db.session.add(user)
        basic.db.session.commit()
        workflow = BenchClaimTwoSteps.create(hero=user)
        execution_id = workflow.current_execution.id
        basic.db.session.remove()
        session: Any = current_context().bind(basic.db.session())
        geneva = session_transactions.geneva_from_session(session)
        executions = geneva.StepExecution.__table__
        workflows = geneva.Workflow.__table__

        def lock() -> tuple[Any, Any]:
            locked_workflow, execution, _ = (
                locks.lock_workflow_and_execution_probing_heroes(
                    session, execution_id, hero_probes.claim_probes(session)
                )
            )
            return locked_workflow, execution

        def claim() -> None:
            locked_workflow, execution = lock()
            transitions.apply(
                transitions.CLAIM,
                clock.now(),
                workflow=locked_workflow,
                execution=execution,
                current_step_name=execution.step_name,
            )
            write_path.flush(session, geneva)

        def lock_only() -> None:
            lock()
            session.rollback()

        def claim_rolled_back() -> None:
            claim()
            session.rollback()

        def claim_committed() -> None:
            claim()
            session.commit()
            session.execute(
                sa.update(executions)
                .where(executions.c.id == execution_id)
                .values(state="scheduled", started_at=None)
            )
            session.execute(
                sa.update(workflows)
                .where(workflows.c.id == workflow.id)
                .values(state="ready", current_step_name=None)
            )
            session.commit()

        shapes = {
            "lock": lock_only,
            "lock+update": claim_rolled_back,
            "lock+update+commit (+ undo)": claim_committed,
        }
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in shapes}
        claim_rolled_back()  # learns the hero's type (R-EXE-83), warms the caches
        for _ in range(args.rounds):
            for name, action in shapes.items():
                figures[name].append(_measure(action, args.iterations))
        dialect = session.get_bind().dialect.name
        basic.db.session.remove()
        basic.db.drop_all()
    print(
        f"{dialect}, {args.iterations} iterations x {args.rounds} alternating rounds, "
        "medians per iteration"
    )
    for name, runs in figures.items():
        wall = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        print(f"{name:30s} {wall:8.0f} µs wall {cpu:8.0f} µs CPU")


if __name__ == "__main__":
    main()
