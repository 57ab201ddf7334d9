"""Reading and checking the limit tables from the tests (R-LIM-10..30).

Every read goes through a connection of its own in autocommit mode: it sees
committed rows only and takes no lock (on SQLite a reading transaction would
queue behind the test session's own, BTR-13).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.support.workflow import executions_table
from tests.support.workflow import in_other_thread
from tests.support.workflow import make_user

KEYS_TABLE = "geneva_drive_limit_keys"
WAITERS_TABLE = "geneva_drive_limit_waiters"


def _reader() -> Any:
    return db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def key_row(name: str, key: str) -> dict[str, Any] | None:
    """The counter row of ``(name, key)``, or None."""
    table = db.metadata.tables[KEYS_TABLE]
    with _reader() as connection:
        row = (
            connection.execute(
                sa.select(table).where(
                    table.c.limit_name == name, table.c.limit_key == key
                )
            )
            .mappings()
            .first()
        )
    return None if row is None else dict(row)


def counters(name: str, key: str) -> tuple[int, int, int]:
    """``(running, granted, waiting)`` of a key row, which must exist."""
    row = key_row(name, key)
    assert row is not None, f"no key row for {name}/{key}"
    return row["running"], row["granted"], row["waiting"]


def waiter_rows(name: str, key: str | None = None) -> list[dict[str, Any]]:
    """The waiter rows of limit ``name`` (of one key if given), in grant order."""
    table = db.metadata.tables[WAITERS_TABLE]
    query = sa.select(table).where(table.c.limit_name == name)
    if key is not None:
        query = query.where(table.c.limit_key == key)
    with _reader() as connection:
        rows = connection.execute(
            query.order_by(table.c.neg_priority, table.c.waiting_since, table.c.id)
        ).mappings()
        return [dict(row) for row in rows]


def holders(name: str, key: str) -> list[Any]:
    """Ids of the ``in_progress`` executions whose ``limit_holds`` hold ``(name, key)``."""
    table = executions_table()
    with _reader() as connection:
        rows = connection.execute(
            sa.select(table.c.id, table.c.limit_holds).where(
                table.c.state == "in_progress", table.c.limit_holds.is_not(None)
            )
        ).all()
    return [
        row_id
        for row_id, holds in rows
        if isinstance(holds, dict) and [name, key] in (holds.get("held") or [])
    ]


def assert_consistent(name: str, key: str) -> tuple[int, int, int]:
    """Assert the key row invariant of ``(name, key)``; return its counters.

    ``running`` is the number of ``in_progress`` executions holding the key,
    ``granted`` and ``waiting`` the numbers of granted and ungranted waiter
    rows; each waiter row's execution is a ``scheduled`` execution parked on
    that key (``limit_holds.waits``); and the
    key never has more slots out than its cap (R-LIM-10, R-LIM-20, R-LIM-21).
    """
    row = key_row(name, key)
    assert row is not None, f"no key row for {name}/{key}"
    waiters = waiter_rows(name, key)
    granted = [w for w in waiters if w["granted_at"] is not None]
    found = {
        "running": len(holders(name, key)),
        "granted": len(granted),
        "waiting": len(waiters) - len(granted),
    }
    stored = {field: row[field] for field in found}
    assert stored == found, f"{name}/{key}: counters {stored}, rows say {found}"
    for waiter in waiters:
        execution = _execution(waiter["execution_id"])
        assert execution is not None, f"waiter {waiter} has no execution"
        # Its job_id is geneva:limited, or a task id once resume() published
        # it again (R-EXT-21): not checked.
        assert execution["state"] == "scheduled", (
            f"waiter row of an execution that is not waiting: {execution}"
        )
        assert (execution["limit_holds"] or {}).get("waits") == [name, key]
    if row["concurrency"] is not None:
        assert row["running"] + row["granted"] <= row["concurrency"], row
    return row["running"], row["granted"], row["waiting"]


def assert_idle(name: str, key: str) -> None:
    """Assert the invariant and that nothing holds or waits for ``(name, key)``."""
    assert assert_consistent(name, key) == (0, 0, 0)
    assert waiter_rows(name, key) == []


def _execution(execution_id: Any) -> dict[str, Any] | None:
    table = executions_table()
    with _reader() as connection:
        row = (
            connection.execute(sa.select(table).where(table.c.id == execution_id))
            .mappings()
            .first()
        )
    return None if row is None else dict(row)


def first_execution(workflow_cls: Any, email: str, **create: Any) -> tuple[Any, Any]:
    """Create a workflow for a new hero; return (workflow id, execution id)."""
    workflow = workflow_cls.create(hero=make_user(email), **create)
    ids = workflow.id, workflow.current_execution.id
    db.session.commit()
    return ids


def deliver(execution_id: Any) -> None:
    """Deliver one execution from another thread, as a second worker would."""
    in_other_thread(lambda: perform_step_execution(execution_id, continue_inline=False))


def published_ids(geneva_jobs: Any) -> list[Any]:
    """The execution ids of the recorded publications, oldest first."""
    return [p.step_execution_id for p in geneva_jobs.enqueued]
