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

A rate-limited key's use of its window (R-LIM-23) is read from its ring in
``geneva_drive_limit_starts`` by the database's clock
(:class:`~flask_geneva.db.database_time.DatabaseTime`): the starts within the
last ``per`` and the oldest of them, by two correlated subqueries along the
ring's primary key, evaluated only for the rows returned.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db.database_time import DatabaseTime
from flask_geneva.db.limit_starts import limit_starts_table
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
    "waited_limits",
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
        rate: The rate the last claim used (starts per ``per``), or None for
            a key without a rate limit.
        per_ms: Its window in milliseconds, or None.
        rate_used: The starts of the key within the last ``per`` by the
            database's clock (R-LIM-23), or None without a rate.
        next_start_at: When the window is full (``rate_used >= rate``), the
            earliest time it allows the next start: its oldest start plus
            ``per`` (database clock, aware UTC); else None.
        read_at: The database's time of the read (to say "in 4 s"), or None.
    """

    limit_name: str
    limit_key: str
    running: int
    granted: int
    waiting: int
    concurrency: int | None
    oldest_waiting_since: datetime | None
    updated_at: datetime | None
    rate: int | None = None
    per_ms: int | None = None
    rate_used: int | None = None
    next_start_at: datetime | None = None
    read_at: datetime | None = None

    @property
    def busy(self) -> bool:
        """Whether anything holds, was granted or waits for a slot of the key."""
        return bool(self.running or self.granted or self.waiting)

    @property
    def per(self) -> timedelta | None:
        """The rate's window, or None without a rate."""
        return None if self.per_ms is None else timedelta(milliseconds=self.per_ms)

    @property
    def rate_full(self) -> bool:
        """Whether the rate's window holds ``rate`` starts: none is allowed now."""
        return (
            self.rate is not None
            and self.rate_used is not None
            and self.rate_used >= self.rate
        )


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
        not_before: For a grant of a full rate window, the time the window
            allows its start (R-LIM-24), else None.
    """

    limit_name: str
    limit_key: str
    position: int
    granted_at: datetime | None
    waiting_since: datetime
    priority: int
    not_before: datetime | None = None

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


def _oldest_ungranted(waiters: sa.Table, keys: Any) -> Any:
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


def _in_window(starts: sa.Table, keys: Any, value: Any) -> Any:
    """``value`` over the key row's starts within its last ``per_ms`` by the
    database's clock (correlated; along the ring's primary key)."""
    return (
        sa.select(value)
        .where(
            starts.c.limit_name == keys.c.limit_name,
            starts.c.limit_key == keys.c.limit_key,
            starts.c.started_at > DatabaseTime(minus_ms=keys.c.per_ms),
        )
        .correlate(keys)
        .scalar_subquery()
    )


def _activity_columns(session: orm.Session, keys: Any) -> list[Any]:
    """The columns of a :class:`KeyActivity` read from ``keys`` (the table or a
    page of it): the counters, the oldest wait, the rate's use of its window
    and the database's time."""
    _, waiters, _, _ = limit_tables(session)
    starts = limit_starts_table(waiters.metadata)
    return [
        keys.c.limit_name,
        keys.c.limit_key,
        keys.c.running,
        keys.c.granted,
        keys.c.waiting,
        keys.c.concurrency,
        keys.c.rate,
        keys.c.per_ms,
        _oldest_ungranted(waiters, keys).label("oldest"),
        keys.c.updated_at,
        _in_window(starts, keys, sa.func.count()).label("rate_used"),
        _in_window(starts, keys, sa.func.min(starts.c.started_at)).label(
            "oldest_start"
        ),
        DatabaseTime().label("read_at"),
    ]


def _activity(row: Any) -> KeyActivity:
    """A :class:`KeyActivity` from a row of :func:`_activity_columns`."""
    rate = None if row.rate is None or row.per_ms is None else int(row.rate)
    per_ms = None if rate is None else int(row.per_ms)
    used = None if rate is None else int(row.rate_used or 0)
    next_start_at = None
    full = rate is not None and used is not None and used >= rate
    if full and row.oldest_start is not None and per_ms is not None:
        next_start_at = row.oldest_start + timedelta(milliseconds=per_ms)
    return KeyActivity(
        limit_name=str(row.limit_name),
        limit_key=str(row.limit_key),
        running=int(row.running),
        granted=int(row.granted),
        waiting=int(row.waiting),
        concurrency=None if row.concurrency is None else int(row.concurrency),
        oldest_waiting_since=row.oldest,
        updated_at=row.updated_at,
        rate=rate,
        per_ms=per_ms,
        rate_used=used,
        next_start_at=next_start_at,
        read_at=row.read_at,
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
    waiter's start and, for a rate-limited key, the starts within its last
    ``per`` by the database's clock and when a full window allows the next
    (R-LIM-23). Two statements: the page (the key rows chosen first, then the
    correlated reads for those rows only) and a count of the matching rows.

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
    keys, _, _, _ = limit_tables(session)
    criteria: list[Any] = []
    if name is not None:
        criteria.append(keys.c.limit_name == name)
    if key_prefix:
        criteria.append(keys.c.limit_key.startswith(key_prefix, autoescape=True))
    if busy_only:
        criteria.append(_busy(keys))

    def order(table: Any) -> list[Any]:
        return [
            table.c.waiting.desc(),
            (table.c.running + table.c.granted).desc(),
            table.c.limit_name,
            table.c.limit_key,
        ]

    page = (
        sa.select(keys)
        .where(*criteria)
        .order_by(*order(keys))
        .limit(max(1, limit))
        .subquery("key_page")
    )
    statement = sa.select(*_activity_columns(session, page)).order_by(*order(page))
    connection = session_sync.connection_of(session)
    rows = [_activity(row) for row in connection.execute(statement)]
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

    With the oldest ungranted wait and, for a rate-limited key, its use of
    the window and when a full window allows the next start (R-LIM-23,
    R-LIM-41, R-LIM-45). One statement.

    Args:
        session: A session bound to the models.
        name: The limit's name.
        key: The key.

    Returns:
        The row, or None when the key has none.
    """
    keys, _, _, _ = limit_tables(session)
    row = (
        session_sync.connection_of(session)
        .execute(
            sa.select(*_activity_columns(session, keys)).where(
                keys.c.limit_name == name, keys.c.limit_key == key
            )
        )
        .first()
    )
    return None if row is None else _activity(row)


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
        not_before=row.not_before,
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


def waited_limits(session: orm.Session, workflow_ids: list[Any]) -> dict[Any, str]:
    """The limit each listed workflow's execution waits for (R-LIM-42).

    One grouped statement over the waiter rows of the listed workflows (by
    their ``workflow_id`` index): the workflows list's Next run column reads
    "waiting for <limit>" for them. A waiter is found by its row, whatever its
    execution's ``job_id`` (``resume()`` re-publishes it, R-EXT-21).

    Args:
        session: A session bound to the models (plain reads).
        workflow_ids: The workflows of one list page.

    Returns:
        ``{workflow id: limit name}`` for the workflows with a waiter (the
        smallest name when one waits for several, which does not happen: an
        execution waits in one queue at a time).
    """
    if not workflow_ids:
        return {}
    _, waiters, _, _ = limit_tables(session)
    rows = session_sync.connection_of(session).execute(
        sa.select(waiters.c.workflow_id, sa.func.min(waiters.c.limit_name))
        .where(waiters.c.workflow_id.in_(workflow_ids))
        .group_by(waiters.c.workflow_id)
    )
    return {row[0]: str(row[1]) for row in rows}
