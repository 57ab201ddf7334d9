"""Limit rows written by hand, as the claim path leaves them (R-LIM-10, R-LIM-11).

The operators' views (R-LIM-40..45) read the key counters and the waiter queue;
these helpers put a known picture there without running workers: a key row with
given counters, and an execution parked as :func:`flask_geneva.engine.limits.
acquire.claim_slots` parks it (``job_id = "geneva:limited"``, ``limit_holds =
{"waits": [name, key], "since": ...}`` and a waiter row).
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from flask_geneva.core import clock
from flask_geneva.core.publications import LIMITED_JOB_ID
from flask_geneva.db.database_time import DatabaseTime
from tests.apps.basic import db
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer


def keys_table() -> sa.Table:
    return db.metadata.tables["geneva_drive_limit_keys"]


def waiters_table() -> sa.Table:
    return db.metadata.tables["geneva_drive_limit_waiters"]


def starts_table() -> sa.Table:
    return db.metadata.tables["geneva_drive_limit_starts"]


def set_key(
    name: str,
    key: str,
    *,
    running: int = 0,
    granted: int = 0,
    waiting: int = 0,
    concurrency: int | None = 2,
    rate: int | None = None,
    per: timedelta | None = None,
) -> None:
    """Write the counter row of ``(name, key)`` (replacing one that exists);
    with ``rate`` and ``per``, the rate its last claim used (R-LIM-23)."""
    table = keys_table()
    with external_writer() as connection:
        connection.execute(
            sa.delete(table).where(table.c.limit_name == name, table.c.limit_key == key)
        )
        connection.execute(
            sa.insert(table).values(
                limit_name=name,
                limit_key=key,
                running=running,
                granted=granted,
                waiting=waiting,
                concurrency=concurrency,
                rate=rate,
                per_ms=None if per is None else int(per / timedelta(milliseconds=1)),
                updated_at=clock.now(),
            )
        )


def park(
    workflow_id: Any,
    execution_id: Any,
    name: str,
    key: str,
    *,
    since: datetime,
    priority: int = 0,
    granted_at: datetime | None = None,
    not_before: datetime | None = None,
) -> None:
    """Make ``execution_id`` (a scheduled execution of ``workflow_id``) a waiter
    of ``(name, key)``; ``not_before``: granted for a later start (R-LIM-24)."""
    executions = executions_table()
    with external_writer() as connection:
        connection.execute(
            sa.update(executions)
            .where(executions.c.id == execution_id)
            .values(
                job_id=LIMITED_JOB_ID,
                limit_holds={"waits": [name, key], "since": since.isoformat()},
            )
        )
        connection.execute(
            sa.insert(waiters_table()).values(
                limit_name=name,
                limit_key=key,
                execution_id=execution_id,
                workflow_id=workflow_id,
                priority=priority,
                neg_priority=-priority,
                queue=None,
                waiting_since=since,
                granted_at=granted_at,
                not_before=not_before,
            )
        )


def record_starts(name: str, key: str, ages: list[timedelta]) -> list[datetime]:
    """Fill the rate ring of ``(name, key)``: one start per age, that long before
    the database's clock (slot ``i`` for the ``i``-th age; R-LIM-23).

    Returns:
        The start times written, as read back, in slot order.
    """
    table = starts_table()
    where = sa.and_(table.c.limit_name == name, table.c.limit_key == key)
    with external_writer() as connection:
        connection.execute(sa.delete(table).where(where))
        for slot, age in enumerate(ages):
            connection.execute(
                sa.insert(table).values(
                    limit_name=name,
                    limit_key=key,
                    slot=slot,
                    started_at=DatabaseTime(minus=age),
                )
            )
        return list(
            connection.execute(
                sa.select(table.c.started_at).where(where).order_by(table.c.slot)
            ).scalars()
        )
