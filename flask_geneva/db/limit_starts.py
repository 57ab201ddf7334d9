"""The start times of rate-limited keys and every statement on them (R-LIM-23..26).

``geneva_drive_limit_starts`` is a ring of at most ``rate`` rows per (limit,
key): slot ``n % rate`` holds the time of the key's ``n``-th start (the key
row's ``rate_seq`` counts them), so the row a start is about to overwrite is
the start ``rate`` starts back. A start is allowed only when that one is at
least ``per`` old, by the database's clock
(:class:`~flask_geneva.db.database_time.DatabaseTime`), so no window of length
``per`` ever holds more than ``rate`` starts, whatever the workers' clocks
say. Every function here runs while the caller holds the key row
(:func:`flask_geneva.db.limits.lock_key`, R-LIM-30).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db.column_types import ExactText
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import table_once
from flask_geneva.db.database_time import DatabaseTime
from flask_geneva.db.limits import KeyCounts
from flask_geneva.db.states import LIMIT_STARTS_TABLE

__all__ = [
    "RateStart",
    "limit_starts_table",
    "rate_room",
    "set_rate",
    "take_rate_start",
    "undo_rate_start",
]


def _key_is(table: sa.Table, name: str, key: str) -> sa.ColumnElement[bool]:
    return sa.and_(table.c.limit_name == name, table.c.limit_key == key)


def limit_starts_table(metadata: sa.MetaData) -> sa.Table:
    """The start times of rate-limited keys, defined once per metadata (R-LIM-23).

    A ring of at most ``rate`` rows per key: slot ``n % rate`` holds the time of
    the key's ``n``-th start, so the row about to be overwritten is the start
    ``rate`` starts back.
    """
    return table_once(
        metadata,
        LIMIT_STARTS_TABLE,
        sa.Column("limit_name", ExactText(64), primary_key=True),
        sa.Column("limit_key", ExactText(255), primary_key=True),
        sa.Column("slot", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
    )


@dataclasses.dataclass(frozen=True)
class RateStart:
    """The outcome of :func:`take_rate_start`.

    Attributes:
        allowed: Whether a start was recorded.
        slot: The ring slot written (to undo it), or None.
        replaced: The start time the slot held before (None: the row was new).
        next_at: When refused, the earliest time (database clock, aware UTC)
            the window allows the next start.
        started_at: When allowed, the start's time by the database's clock
            (recorded with the claim, R-LIM-23).
    """

    allowed: bool
    slot: int | None = None
    replaced: datetime | None = None
    next_at: datetime | None = None
    started_at: datetime | None = None


def set_rate(
    session: orm.Session,
    keys: sa.Table,
    starts: sa.Table,
    name: str,
    key: str,
    rate: int,
    per_ms: int,
    now: datetime,
) -> None:
    """Record a key's rate limit, forgetting the starts of a different one.

    The caller holds the key row. A changed rate or window starts the ring
    afresh (R-LIM-25): the old slots do not map onto the new ring.
    """
    connection = session_sync.connection_of(session)
    connection.execute(sa.delete(starts).where(_key_is(starts, name, key)))
    connection.execute(
        sa.update(keys)
        .where(_key_is(keys, name, key))
        .values(rate=rate, per_ms=per_ms, rate_seq=0, updated_at=now)
    )


def take_rate_start(
    session: orm.Session,
    keys: sa.Table,
    starts: sa.Table,
    name: str,
    key: str,
    counts: KeyCounts,
    per: timedelta,
) -> RateStart:
    """Record one start of a rate-limited key if the window allows it (R-LIM-23).

    The caller holds the key row, whose ``rate`` and ``per_ms`` are the limit's
    (:func:`set_rate`). Start ``n`` takes ring slot ``n % rate``: allowed when
    the slot is empty (fewer than ``rate`` starts so far) or its time, the
    start ``rate`` starts back, is at least ``per`` old by the database's
    clock. So no window of length ``per`` ever holds more than ``rate`` starts.

    Returns:
        What happened (see :class:`RateStart`).
    """
    assert counts.rate is not None  # noqa: S101 - set_rate ran
    connection = session_sync.connection_of(session)
    slot = counts.rate_seq % counts.rate
    where = sa.and_(_key_is(starts, name, key), starts.c.slot == slot)
    replaced = None
    row = None
    if counts.rate_seq >= counts.rate:
        row = connection.execute(
            sa.select(
                starts.c.started_at,
                sa.case((starts.c.started_at <= DatabaseTime(minus=per), 1), else_=0),
            ).where(where)
        ).first()
    if row is not None and not row[1]:
        return RateStart(False, next_at=row[0] + per)
    if row is None:  # fewer than rate starts so far (or a ring row deleted by hand)
        statement: Any = sa.insert(starts).values(
            limit_name=name, limit_key=key, slot=slot, started_at=DatabaseTime()
        )
        returning = connection.dialect.insert_returning
    else:
        replaced = row[0]
        statement = sa.update(starts).where(where).values(started_at=DatabaseTime())
        returning = connection.dialect.update_returning
    if returning:
        started_at = connection.execute(
            statement.returning(starts.c.started_at)
        ).scalar_one()
    else:  # MariaDB's UPDATE: read the time it wrote
        connection.execute(statement)
        started_at = connection.execute(
            sa.select(starts.c.started_at).where(where)
        ).scalar_one()
    connection.execute(
        sa.update(keys)
        .where(_key_is(keys, name, key))
        .values(rate_seq=keys.c.rate_seq + 1)
    )
    return RateStart(True, slot=slot, replaced=replaced, started_at=started_at)


def undo_rate_start(
    session: orm.Session,
    keys: sa.Table,
    starts: sa.Table,
    name: str,
    key: str,
    start: RateStart,
) -> None:
    """Take back a start :func:`take_rate_start` recorded in this transaction
    (another limit of the step refused it, R-LIM-10's all or nothing)."""
    if not start.allowed or start.slot is None:
        return
    connection = session_sync.connection_of(session)
    where = sa.and_(_key_is(starts, name, key), starts.c.slot == start.slot)
    if start.replaced is None:
        connection.execute(sa.delete(starts).where(where))
    else:
        connection.execute(
            sa.update(starts).where(where).values(started_at=start.replaced)
        )
    connection.execute(
        sa.update(keys)
        .where(_key_is(keys, name, key))
        .values(rate_seq=keys.c.rate_seq - 1)
    )


def rate_room(
    session: orm.Session,
    starts: sa.Table,
    name: str,
    key: str,
    rate: int,
    per: timedelta,
) -> tuple[int, datetime | None]:
    """How many more starts the window allows now, and when the next frees up.

    A plain read of the key's ring (the caller holds the key row), for the
    grants (R-LIM-24): ``(rate - starts in the last per, the oldest of them +
    per)``; the second is None when the window holds no start.
    """
    row = (
        session_sync.connection_of(session)
        .execute(
            sa.select(sa.func.count(), sa.func.min(starts.c.started_at)).where(
                _key_is(starts, name, key),
                starts.c.started_at > DatabaseTime(minus=per),
            )
        )
        .first()
    )
    used = int(row[0]) if row is not None else 0
    oldest = row[1] if row is not None else None
    return rate - used, (None if oldest is None else oldest + per)
