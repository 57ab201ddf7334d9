"""Operators' reads of the limit tables: the CLI, the admin, status and gauges.

Concurrency limits (SPEC §24) keep one counter row per (limit, key) in
``geneva_drive_limit_keys`` and a queue in ``geneva_drive_limit_waiters``
(:mod:`flask_geneva.db.limits`, which owns every write). These reads show them
to operators (R-LIM-40..45): ``flask geneva limits``, the admin's Limits page,
the sentence of a waiting execution, the status line and the gauges.

Every read is plain (no row lock, R-LIM-30: only the claim and release paths lock
key rows) and bounded: key lists by a row limit, counts and sums by one grouped
statement over the key rows, a waiter's position by one count along the queue
index ``(limit_name, limit_key, granted_at, neg_priority, waiting_since, id)``.
The caller ends the read transaction. None of this runs without the
``add_flow_limits`` unit: callers check
:attr:`~flask_geneva.db.optional_columns.OptionalColumns.flow_limits` first.

The results are dataclasses with one field per counter so that the rate limits
still to come add their columns (``rate``, ``per``, starts in the window) next
to ``concurrency`` without changing a caller.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db.limits import limit_tables

__all__ = [
    "MAX_OVERVIEW_KEYS",
    "KeyActivity",
    "KeyWaiter",
    "LimitOverview",
    "LimitTotals",
    "WaiterPosition",
    "key_activity",
    "key_waiters",
    "limit_overview",
    "limit_totals",
    "waiter_position",
]

#: The most key rows one overview returns (``flask geneva limits``, the admin page).
MAX_OVERVIEW_KEYS = 200


@dataclasses.dataclass(frozen=True)
class KeyActivity:
    """One (limit, key) counter row as operators see it (R-LIM-40).

    Attributes:
        limit_name: The limit's name.
        limit_key: The key (``""`` is the global key of a limit without ``key``).
        running: Executions holding a slot.
        granted: Slots handed to waiters whose task is on its way.
        waiting: Waiters not granted yet.
        concurrency: The cap the last claim used (None before any claim).
        oldest_waiting_since: When the longest-waiting ungranted waiter of
            the key started waiting, or None without one.
        updated_at: The row's last change.
    """

    limit_name: str
    limit_key: str
    running: int
    granted: int
    waiting: int
    concurrency: int | None
    oldest_waiting_since: datetime | None
    updated_at: datetime | None

    @property
    def busy(self) -> bool:
        """Whether anything holds, was granted or waits for a slot of the key."""
        return bool(self.running or self.granted or self.waiting)


@dataclasses.dataclass(frozen=True)
class LimitOverview:
    """A page of key rows and how many matched in all (R-LIM-40).

    Attributes:
        keys: At most ``limit`` rows, most waiting first.
        total: The key rows matching the filters; ``total - len(keys)`` are
            left out ("… N more keys").
    """

    keys: list[KeyActivity]
    total: int

    @property
    def more(self) -> int:
        """How many matching keys are not in :attr:`keys`."""
        return max(0, self.total - len(self.keys))


@dataclasses.dataclass(frozen=True)
class LimitTotals:
    """The sums over the keys of one limit (gauges, status line; R-LIM-43/44).

    Attributes:
        limit_name: The limit's name.
        keys: Its key rows.
        busy_keys: Those with a running, granted or waiting execution.
        running: Sum of ``running``.
        granted: Sum of ``granted``.
        waiting: Sum of ``waiting``.
        oldest_waiting_since: The oldest ungranted waiter's start, or None.
    """

    limit_name: str
    keys: int
    busy_keys: int
    running: int
    granted: int
    waiting: int
    oldest_waiting_since: datetime | None


@dataclasses.dataclass(frozen=True)
class WaiterPosition:
    """Where one waiting execution stands in its key's queue (R-LIM-41).

    Attributes:
        limit_name: The limit it waits for.
        limit_key: The key.
        position: 1 for the next waiter to be granted, counted among the
            key's ungranted waiters in grant order (priority, then waiting
            since, then arrival); 0 when it was granted.
        granted_at: When a slot was granted to it, or None.
        waiting_since: When it started waiting.
        priority: Its merged priority.
    """

    limit_name: str
    limit_key: str
    position: int
    granted_at: datetime | None
    waiting_since: datetime
    priority: int

    @property
    def granted(self) -> bool:
        """Whether a slot was granted and its task is on its way."""
        return self.granted_at is not None


@dataclasses.dataclass(frozen=True)
class KeyWaiter:
    """One waiter of a key with its workflow's class, for the admin (R-LIM-45)."""

    execution_id: Any
    workflow_id: Any
    workflow_type: str | None
    workflow_state: str | None
    priority: int
    waiting_since: datetime
    granted_at: datetime | None


def _oldest_ungranted(waiters: sa.Table, keys: sa.Table) -> Any:
    """``MIN(waiting_since)`` of a key row's ungranted waiters (correlated)."""
    return (
        sa.select(sa.func.min(waiters.c.waiting_since))
        .where(
            waiters.c.limit_name == keys.c.limit_name,
            waiters.c.limit_key == keys.c.limit_key,
            waiters.c.granted_at.is_(None),
        )
        .correlate(keys)
        .scalar_subquery()
    )


def _busy(keys: sa.Table) -> Any:
    return sa.or_(keys.c.running > 0, keys.c.granted > 0, keys.c.waiting > 0)


def limit_overview(
    session: orm.Session,
    *,
    name: str | None = None,
    key_prefix: str | None = None,
    busy_only: bool = False,
    limit: int = MAX_OVERVIEW_KEYS,
) -> LimitOverview:
    """The key rows of the limits, most waiting first (R-LIM-40, R-LIM-45).

    Ordered by ``waiting`` (descending), then ``running + granted``
    (descending), then limit name and key; each row with the oldest ungranted
    waiter's start. Two statements: the page and a count of the matching rows.

    Args:
        session: A session bound to the models (plain reads; the caller ends
            the transaction).
        name: Only this limit's keys.
        key_prefix: Only keys starting with this text (``%`` and ``_`` match
            themselves).
        busy_only: Only keys with a running, granted or waiting execution.
        limit: The most rows returned (at least 1).

    Returns:
        The rows and the number of matching keys.

    Raises:
        sqlalchemy.exc.DBAPIError: The limit tables are missing (the
            ``add_flow_limits`` unit; callers check it first).
    """
    keys, waiters, _, _ = limit_tables(session)
    criteria: list[Any] = []
    if name is not None:
        criteria.append(keys.c.limit_name == name)
    if key_prefix:
        criteria.append(keys.c.limit_key.startswith(key_prefix, autoescape=True))
    if busy_only:
        criteria.append(_busy(keys))
    statement = (
        sa.select(
            keys.c.limit_name,
            keys.c.limit_key,
            keys.c.running,
            keys.c.granted,
            keys.c.waiting,
            keys.c.concurrency,
            _oldest_ungranted(waiters, keys).label("oldest"),
            keys.c.updated_at,
        )
        .where(*criteria)
        .order_by(
            keys.c.waiting.desc(),
            (keys.c.running + keys.c.granted).desc(),
            keys.c.limit_name,
            keys.c.limit_key,
        )
        .limit(max(1, limit))
    )
    connection = session_sync.connection_of(session)
    rows = [
        KeyActivity(
            limit_name=str(row.limit_name),
            limit_key=str(row.limit_key),
            running=int(row.running),
            granted=int(row.granted),
            waiting=int(row.waiting),
            concurrency=None if row.concurrency is None else int(row.concurrency),
            oldest_waiting_since=row.oldest,
            updated_at=row.updated_at,
        )
        for row in connection.execute(statement)
    ]
    if len(rows) < max(1, limit):
        return LimitOverview(rows, len(rows))
    total = connection.execute(
        sa.select(sa.func.count()).select_from(keys).where(*criteria)
    ).scalar()
    return LimitOverview(rows, int(total or 0))


def limit_totals(session: orm.Session) -> list[LimitTotals]:
    """Per limit name: keys, busy keys, running, granted, waiting, oldest wait.

    Two grouped statements: one over the key rows, one over the ungranted
    waiters (the oldest ``waiting_since`` per limit). Limits without a key row
    are absent (R-LIM-43, R-LIM-44).

    Args:
        session: A session bound to the models (plain reads).

    Returns:
        One :class:`LimitTotals` per limit name with key rows, sorted by name.
    """
    keys, waiters, _, _ = limit_tables(session)
    connection = session_sync.connection_of(session)
    busy = sa.case((_busy(keys), 1), else_=0)
    sums = connection.execute(
        sa.select(
            keys.c.limit_name,
            sa.func.count(),
            sa.func.sum(busy),
            sa.func.sum(keys.c.running),
            sa.func.sum(keys.c.granted),
            sa.func.sum(keys.c.waiting),
        ).group_by(keys.c.limit_name)
    ).all()
    oldest = dict(
        connection.execute(
            sa.select(waiters.c.limit_name, sa.func.min(waiters.c.waiting_since))
            .where(waiters.c.granted_at.is_(None))
            .group_by(waiters.c.limit_name)
        ).all()
    )
    return sorted(
        (
            LimitTotals(
                limit_name=str(name),
                keys=int(count or 0),
                busy_keys=int(busy_keys or 0),
                running=int(running or 0),
                granted=int(granted or 0),
                waiting=int(waiting or 0),
                oldest_waiting_since=oldest.get(name),
            )
            for name, count, busy_keys, running, granted, waiting in sums
        ),
        key=lambda totals: totals.limit_name,
    )


def key_activity(session: orm.Session, name: str, key: str) -> KeyActivity | None:
    """The counter row of ``(name, key)`` read plainly (no lock), or None.

    Args:
        session: A session bound to the models.
        name: The limit's name.
        key: The key.
    """
    keys, waiters, _, _ = limit_tables(session)
    row = (
        session_sync.connection_of(session)
        .execute(
            sa.select(
                keys.c.running,
                keys.c.granted,
                keys.c.waiting,
                keys.c.concurrency,
                _oldest_ungranted(waiters, keys).label("oldest"),
                keys.c.updated_at,
            ).where(keys.c.limit_name == name, keys.c.limit_key == key)
        )
        .first()
    )
    if row is None:
        return None
    return KeyActivity(
        limit_name=name,
        limit_key=key,
        running=int(row.running),
        granted=int(row.granted),
        waiting=int(row.waiting),
        concurrency=None if row.concurrency is None else int(row.concurrency),
        oldest_waiting_since=row.oldest,
        updated_at=row.updated_at,
    )


def waiter_position(session: orm.Session, execution_id: Any) -> WaiterPosition | None:
    """Where ``execution_id`` stands in the queue of the key it waits for (R-LIM-41).

    Its waiter row, and, when it is not granted, one count of the ungranted
    waiters of its key ahead of it in grant order: a higher priority, or the
    same priority and an earlier ``waiting_since``, or both equal and a
    smaller id (R-LIM-12). Paused workflows' waiters count: they keep their
    place (R-LIM-14).

    Args:
        session: A session bound to the models (plain reads).
        execution_id: The execution.

    Returns:
        Its position, or None when it has no waiter row.
    """
    _, waiters, _, _ = limit_tables(session)
    connection = session_sync.connection_of(session)
    row = connection.execute(
        sa.select(waiters).where(waiters.c.execution_id == execution_id)
    ).first()
    if row is None:
        return None
    position = 0
    if row.granted_at is None:
        ahead = connection.execute(
            sa.select(sa.func.count())
            .select_from(waiters)
            .where(
                waiters.c.limit_name == row.limit_name,
                waiters.c.limit_key == row.limit_key,
                waiters.c.granted_at.is_(None),
                sa.or_(
                    waiters.c.neg_priority < row.neg_priority,
                    sa.and_(
                        waiters.c.neg_priority == row.neg_priority,
                        sa.or_(
                            waiters.c.waiting_since < row.waiting_since,
                            sa.and_(
                                waiters.c.waiting_since == row.waiting_since,
                                waiters.c.id < row.id,
                            ),
                        ),
                    ),
                ),
            )
        ).scalar()
        position = int(ahead or 0) + 1
    return WaiterPosition(
        limit_name=str(row.limit_name),
        limit_key=str(row.limit_key),
        position=position,
        granted_at=row.granted_at,
        waiting_since=row.waiting_since,
        priority=int(row.priority),
    )


def key_waiters(
    session: orm.Session, name: str, key: str, *, limit: int = MAX_OVERVIEW_KEYS
) -> list[KeyWaiter]:
    """The waiters of ``(name, key)``: granted ones first, then in grant order.

    With their workflow's class and state (a waiter of a paused workflow is
    skipped by the grants, R-LIM-14). At most ``limit`` rows (R-LIM-45).

    Args:
        session: A session bound to the models (plain reads).
        name: The limit's name.
        key: The key.
        limit: The most rows returned.
    """
    _, waiters, workflows, _ = limit_tables(session)
    statement = (
        sa.select(
            waiters.c.execution_id,
            waiters.c.workflow_id,
            workflows.c.type,
            workflows.c.state,
            waiters.c.priority,
            waiters.c.waiting_since,
            waiters.c.granted_at,
        )
        .select_from(waiters)
        .outerjoin(workflows, workflows.c.id == waiters.c.workflow_id)
        .where(waiters.c.limit_name == name, waiters.c.limit_key == key)
        .order_by(
            sa.case((waiters.c.granted_at.is_(None), 1), else_=0),
            waiters.c.neg_priority,
            waiters.c.waiting_since,
            waiters.c.id,
        )
        .limit(max(1, limit))
    )
    return [
        KeyWaiter(
            execution_id=row.execution_id,
            workflow_id=row.workflow_id,
            workflow_type=row.type,
            workflow_state=row.state,
            priority=int(row.priority),
            waiting_since=row.waiting_since,
            granted_at=row.granted_at,
        )
        for row in session_sync.connection_of(session).execute(statement)
    ]
