"""Helpers for MariaDB lock-cycle tests: a heavy second transaction, lock-wait polling.

InnoDB resolves a deadlock by rolling back the transaction that has written less,
so the second connection writes many rows first: the code under test is then the
victim, deterministically.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva.core import clock
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

#: Rows the other transaction writes first, so that it weighs more.
HEAVY_ROWS = 200
WAIT_SECONDS = 60
MYSQL_DEADLOCK = 1213

#: Runs a test with the app's default isolation (READ COMMITTED on MySQL/MariaDB,
#: R-CFG-04) and, on MySQL/MariaDB only, with ``GENEVA_MYSQL_READ_COMMITTED =
#: False``: the REPEATABLE READ an app that opts out keeps, whose gap and
#: next-key locks and snapshot reads the test guards against. Overrides the
#: ``app_config`` fixture (tests/conftest.py).
BOTH_ISOLATION_LEVELS = pytest.mark.parametrize(
    "app_config",
    [
        pytest.param({}, id="default_isolation"),
        pytest.param(
            {"GENEVA_MYSQL_READ_COMMITTED": False},
            id="repeatable_read",
            marks=pytest.mark.backends("mysql"),
        ),
    ],
)


@contextlib.contextmanager
def heavy_transaction(app: Any) -> Iterator[sa.Connection]:
    """A second connection in a transaction that has written many rows.

    It runs REPEATABLE READ, as a transaction outside geneva's control may (the
    app's engines run READ COMMITTED, R-CFG-04), so that its range reads take
    the gap locks these tests build their lock cycles from (R-EXE-80). Rolled
    back and closed at the end.
    """
    with app.app_context():
        connection = db.engine.connect().execution_options(
            isolation_level="REPEATABLE READ"
        )
        transaction = connection.begin()
        try:
            connection.execute(
                sa.insert(User.__table__),
                [
                    {"email": f"weight{index}@example.com"}
                    for index in range(HEAVY_ROWS)
                ],
            )
            yield connection
        finally:
            if transaction.is_active:
                transaction.rollback()
            connection.close()


def wait_until_blocked(app: Any) -> None:
    """Poll InnoDB until a transaction on this test's database waits for a lock."""
    query = sa.text(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    )
    deadline = threading.Event()
    timer = threading.Timer(WAIT_SECONDS, deadline.set)
    timer.start()
    try:
        with app.app_context(), db.engine.connect() as probe:
            while not deadline.is_set():
                if probe.execute(query).scalar_one() >= 1:
                    return
                probe.rollback()
                # InnoDB refreshes INNODB_TRX only after 0.1 s without a read of
                # it: polling faster would keep showing the first snapshot.
                deadline.wait(0.25)
            sessions = probe.execute(
                sa.text(
                    "SELECT ID, COMMAND, STATE, LEFT(INFO, 120) "
                    "FROM information_schema.PROCESSLIST WHERE DB = DATABASE()"
                )
            ).all()
    finally:
        timer.cancel()
    raise AssertionError(
        f"the code under test never waited for the other lock; sessions: {sessions}"
    )


def run_in_thread(
    target: Callable[[], None],
) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``target`` in a thread; its exception, if any, lands in the list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def execute_in_thread(
    app: Any, execution_id: Any
) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``Executor.execute(execution_id)`` in the app's context in a thread,
    as a worker would; its exception, if any, lands in the list."""

    def run_step() -> None:
        with app.app_context():
            try:
                Executor.execute(execution_id)
            finally:
                db.session.remove()

    return run_in_thread(run_step)


def execute_into_a_workflow_row_cycle(
    app: Any, other: Any, execution_id: Any, workflow_id: Any
) -> list[BaseException]:
    """Run the execution in a thread (:func:`execute_in_thread`) until it waits
    for a lock ``other`` holds, then close a cycle: ``other`` locks the workflow
    row, which the executor's transaction holds, and rolls back. Returns the
    thread's exceptions once it ended (at most :data:`WAIT_SECONDS`)."""
    thread, errors = execute_in_thread(app, execution_id)
    wait_until_blocked(app)
    other.execute(
        sa.text("SELECT id FROM geneva_drive_workflows WHERE id = :id FOR UPDATE"),
        {"id": workflow_id},
    )
    other.rollback()
    thread.join(timeout=WAIT_SECONDS)
    return errors


def add_reattempted_executions(workflow_id: Any, count: int) -> None:
    """INSERT ``count`` completed (reattempted) executions of step ``first`` for
    the workflow: rows the index scans of its locking statements walk past."""
    now = clock.now()
    with db.engine.begin() as connection:
        connection.execute(
            sa.insert(geneva.StepExecution.__table__),
            [
                {
                    "workflow_id": workflow_id,
                    "step_name": "first",
                    "state": "completed",
                    "outcome": "reattempted",
                    "scheduled_for": now,
                    "job_id": f"done-{n}",
                    "created_at": now,
                    "updated_at": now,
                }
                for n in range(count)
            ],
        )


def move_state_with_short_lock_wait(
    execution_id: Any, from_state: str, to_state: str
) -> int:
    """On another connection, move an execution ``from_state`` -> ``to_state``.

    The guarded UPDATE waits at most 2 s for a row lock (a lock wait timeout,
    1205, is raised instead of hanging) and is rolled back. Returns the rows it
    matched: 1 when nothing else held the row or its index range.
    """
    table = geneva.StepExecution.__table__
    with db.engine.connect() as connection:
        connection.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 2")
        updated = connection.execute(
            sa.update(table)
            .where(table.c.id == execution_id)
            .where(table.c.state == from_state)
            .values(state=to_state)
        ).rowcount
        connection.rollback()
    return int(updated)
