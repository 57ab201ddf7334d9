"""What a delivered step's claim costs, statement by statement, in one process.

Issue 40: before an engine change reshapes the claim (R-EXE-10, R-EXE-17),
measure the shape here. One workflow's first execution is claimed again and
again on the same rows, each claim rolled back or undone (the rows are the
same at every iteration), in alternating rounds of:

- ``lock``: the claim's locking read alone (with R-EXE-83's hero probe list);
- ``lock+update``: the locking read, the ``claim`` transition and the
  write path's guarded UPDATE of both rows (what Phase 1 sends, without its
  commit);
- ``lock+update+commit``: the same, committed; the claim is then undone by a
  second committed UPDATE, outside the timing (so the rows are ``scheduled``
  again);
- on PostgreSQL, ``raw DBAPI lock+update+commit``: the very statements the
  previous shape sent (captured with an engine event, parameters as the
  dialect bound them, the times replaced), sent on the psycopg connection
  itself with server-side prepared statements, as the raw-SQL floor of
  ``bench/peers/floor.py`` sends its own: the ceiling of what the claim's
  statements cost without SQLAlchemy's execution and the session around them.

It prints wall and process-CPU microseconds per iteration (the undo not
counted), medians of the rounds. Usage::

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
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scratch
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


def _measure(
    action: Callable[[], None], after: Callable[[], None] | None, iterations: int
) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of ``action``; ``after`` runs untimed after each."""
    wall = cpu = 0.0
    for _ in range(iterations):
        started, cpu_started = time.perf_counter(), time.process_time()
        action()
        wall += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
        if after is not None:
            after()
    return wall / iterations * 1e6, cpu / iterations * 1e6


def _raw_claim(
    engine: Any,
    claim_committed: Callable[[], None],
    undo: Callable[[], None],
    execution_id: Any,
    workflow_id: Any,
    tables: tuple[str, str],
) -> tuple[Any, Callable[[], None], Callable[[], None]]:
    """The committed claim's statements, replayed on the DBAPI connection.

    ``tables``: the step executions' and the workflows' table names.

    Returns:
        ``(pool connection to close, the claim, its undo)``.
    """
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sent.append((statement, params))

    claim_committed()  # learns the hero's type (R-EXE-83), warms the caches
    undo()
    event.listen(engine, "before_cursor_execute", record)
    try:
        claim_committed()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    undo()
    if len(sent) != 2:
        raise SystemExit(f"expected the lock and the claim's UPDATE, got {len(sent)}")
    (lock_sql, lock_params), (update_sql, update_params) = sent
    times = [key for key, value in update_params.items() if isinstance(value, datetime)]
    raw = engine.raw_connection()
    connection = raw.dbapi_connection
    cursor = connection.cursor()

    def claim() -> None:
        cursor.execute(lock_sql, lock_params, prepare=True)
        cursor.fetchone()
        now = datetime.now(UTC).replace(tzinfo=None)
        cursor.execute(
            update_sql, {**update_params, **dict.fromkeys(times, now)}, prepare=True
        )
        cursor.fetchone()
        connection.commit()

    def raw_undo() -> None:
        cursor.execute(
            f"UPDATE {tables[0]} SET state = 'scheduled',"
            " started_at = NULL WHERE id = %s",
            (execution_id,),
        )
        cursor.execute(
            f"UPDATE {tables[1]} SET state = 'ready',"
            " current_step_name = NULL WHERE id = %s",
            (workflow_id,),
        )
        connection.commit()

    return raw, claim, raw_undo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = scratch.database_url(args.database_url, tmp)
    app = basic.create_app(url, TESTING=False)
    scratch.reset_tables(app)
    with app.app_context():
        user = basic.User(email="claim@example.com")
        basic.db.session.add(user)
        basic.db.session.commit()
        workflow = BenchClaimTwoSteps.create(hero=user)
        execution_id, workflow_id = workflow.current_execution.id, workflow.id
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

        def undo() -> None:
            session.execute(
                sa.update(executions)
                .where(executions.c.id == execution_id)
                .values(state="scheduled", started_at=None)
            )
            session.execute(
                sa.update(workflows)
                .where(workflows.c.id == workflow_id)
                .values(state="ready", current_step_name=None)
            )
            session.commit()

        def claim_committed() -> None:
            claim()
            session.commit()

        shapes: dict[str, tuple[Callable[[], None], Callable[[], None] | None]] = {
            "lock": (lock_only, None),
            "lock+update": (claim_rolled_back, None),
            "lock+update+commit": (claim_committed, undo),
        }
        raw = None
        if session.get_bind().dialect.name == "postgresql":
            raw, raw_claim, raw_undo = _raw_claim(
                basic.db.engine,
                claim_committed,
                undo,
                execution_id,
                workflow_id,
                (executions.name, workflows.name),
            )
            shapes["raw DBAPI lock+update+commit"] = (raw_claim, raw_undo)

        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in shapes}
        for _ in range(args.rounds):
            for name, (action, after) in shapes.items():
                figures[name].append(_measure(action, after, args.iterations))
        dialect = session.get_bind().dialect.name
        if raw is not None:
            raw.close()
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
