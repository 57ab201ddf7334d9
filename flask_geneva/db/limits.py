"""The limit tables and every SQL statement on them (SPEC §24, R-LIM-10..31).

Two tables, created by the ``add_flow_limits`` install unit:

* ``geneva_drive_limit_keys``: one counter row per (limit name, key), the
  per-key mutex. ``running`` counts executions holding a slot, ``granted``
  the slots handed to waiters whose task is on its way, ``waiting`` the
  waiters not granted yet; ``concurrency`` is the cap last used. A slot is
  taken by one guarded ``UPDATE`` (:func:`try_acquire`) and given back by
  another (:func:`try_release`), so the cap holds across any number of
  workers and hosts; on SQLite through its single writer.
* ``geneva_drive_limit_waiters``: the executions waiting for a slot of one
  key, in priority order then first come first served (R-LIM-12).

The rule of the whole feature (R-LIM-30): a key row is the only row locked;
waiter rows are read plainly and written by primary key, always while their
key row is held; no locking range read on these tables.

A key row is created on its first use. On SQLite inside the caller's
transaction (its single writer serializes everything); on PostgreSQL and
MySQL/MariaDB in a short transaction of its own on another connection
(:func:`create_key`), because two transactions inserting one new primary key
deadlock on MariaDB's duplicate-key locks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from flask_geneva.db import session_sync
from flask_geneva.db.column_types import ExactText
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import table_once
from flask_geneva.db.context import models_of
from flask_geneva.db.states import LIMIT_KEYS_TABLE
from flask_geneva.db.states import LIMIT_WAITERS_TABLE
from flask_geneva.db.states import WorkflowState

__all__ = [
    "KeyCounts",
    "Waiter",
    "change_counts",
    "create_key",
    "delete_waiter",
    "eligible_waiters",
    "execution_limit_holds",
    "grant_waiters",
    "insert_waiter",
    "keep_if_no_waiters",
    "keys_to_pump",
    "limit_keys_table",
    "limit_tables",
    "limit_waiters_table",
    "lock_key",
    "overdue_grants",
    "return_grant",
    "try_acquire",
    "try_release",
    "waiter_of",
    "waiter_states",
]

#: Workflow states whose waiters may be granted a slot (R-LIM-14): a paused
#: workflow's waiter keeps its place and is skipped.
_GRANTABLE_WORKFLOW_STATES = (WorkflowState.READY.value, WorkflowState.PERFORMING.value)


def limit_keys_table(metadata: sa.MetaData) -> sa.Table:
    """The limit key counters, defined once per metadata (R-LIM-10)."""
    return table_once(
        metadata,
        LIMIT_KEYS_TABLE,
        sa.Column("limit_name", ExactText(64), primary_key=True),
        sa.Column("limit_key", ExactText(255), primary_key=True),
        sa.Column("running", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("granted", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("waiting", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("per_ms", sa.BigInteger(), nullable=True),
        sa.Column("rate_seq", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def limit_waiters_table(metadata: sa.MetaData, key: Any) -> sa.Table:
    """The limit waiters, defined once per metadata (R-LIM-11).

    Args:
        metadata: The host's metadata.
        key: The type of the schema's keys (``execution_id``, ``workflow_id``).
    """
    return table_once(
        metadata,
        LIMIT_WAITERS_TABLE,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("limit_name", ExactText(64), nullable=False),
        sa.Column("limit_key", ExactText(255), nullable=False),
        sa.Column("execution_id", key, nullable=False, unique=True),
        sa.Column("workflow_id", key, nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("neg_priority", sa.Integer(), nullable=False),
        sa.Column("queue", sa.String(255), nullable=True),
        sa.Column("waiting_since", UTCDateTime(), nullable=False),
        sa.Column("granted_at", UTCDateTime(), nullable=True),
        sa.Column("not_before", UTCDateTime(), nullable=True),
        sa.Index(
            "index_geneva_drive_limit_waiters_queue",
            "limit_name",
            "limit_key",
            "granted_at",
            "neg_priority",
            "waiting_since",
            "id",
        ),
        sa.Index("index_geneva_drive_limit_waiters_on_workflow_id", "workflow_id"),
    )


def limit_tables(session: orm.Session) -> tuple[sa.Table, sa.Table, sa.Table, sa.Table]:
    """``(keys, waiters, workflows, step executions)`` tables of the models."""
    models = models_of(session)
    metadata = models.StepExecution.metadata
    return (
        metadata.tables[LIMIT_KEYS_TABLE],
        metadata.tables[LIMIT_WAITERS_TABLE],
        models.Workflow.__table__,
        models.StepExecution.__table__,
    )


@dataclasses.dataclass(frozen=True)
class KeyCounts:
    """A key row's counters, read under its lock (R-LIM-10)."""

    running: int
    granted: int
    waiting: int
    concurrency: int | None
    #: The rate limit last used (starts per ``per_ms`` milliseconds), or None.
    rate: int | None = None
    per_ms: int | None = None
    #: Starts counted since the rate was last set (R-LIM-23).
    rate_seq: int = 0


@dataclasses.dataclass(frozen=True)
class Waiter:
    """One waiter row (R-LIM-11).

    ``workflow_type`` (the workflow's stored ``type``) and ``step_name`` (its
    execution's step) are read with the row where a grant is published, so
    its task carries the step's time limits (R-STO-03); None elsewhere.
    """

    id: int
    limit_name: str
    limit_key: str
    execution_id: Any
    workflow_id: Any
    priority: int
    queue: str | None
    waiting_since: datetime
    granted_at: datetime | None
    workflow_type: str | None = None
    step_name: str | None = None


def _key_is(table: sa.Table, name: str, key: str) -> Any:
    return sa.and_(table.c.limit_name == name, table.c.limit_key == key)


def try_acquire(
    session: orm.Session,
    keys: sa.Table,
    name: str,
    key: str,
    cap: int,
    now: datetime,
) -> bool:
    """Take a slot with one guarded ``UPDATE``: the fast path (R-LIM-10).

    Matches only while ``running + granted < cap`` and no waiter is queued
    (a newcomer never jumps the queue, R-LIM-12).

    Returns:
        Whether the slot was taken; False also when the key row is missing.
    """
    statement = (
        sa.update(keys)
        .where(
            _key_is(keys, name, key),
            keys.c.running + keys.c.granted < cap,
            keys.c.waiting == 0,
        )
        .values(running=keys.c.running + 1, concurrency=cap, updated_at=now)
    )
    result = session_sync.connection_of(session).execute(statement)
    return int(result.rowcount or 0) == 1


def keep_if_no_waiters(
    session: orm.Session, keys: sa.Table, name: str, key: str, now: datetime
) -> bool:
    """Lock a key row the caller holds a slot of, if nobody waits (R-LIM-15).

    One guarded ``UPDATE`` (of ``updated_at``): an inline continuation keeps
    its slot for the next step only when no waiter is queued for it.

    Returns:
        Whether the row matched (no waiter).
    """
    statement = (
        sa.update(keys)
        .where(_key_is(keys, name, key), keys.c.waiting == 0)
        .values(updated_at=now)
    )
    result = session_sync.connection_of(session).execute(statement)
    return int(result.rowcount or 0) == 1


def try_release(
    session: orm.Session, keys: sa.Table, name: str, key: str, now: datetime
) -> bool:
    """Give a slot back with one guarded ``UPDATE``: the fast path (R-LIM-20).

    Matches only when no waiter is queued (nobody to wake) and a slot is held.

    Returns:
        Whether it was given back; False means the slow path must run under
        the key row's lock (:func:`lock_key`).
    """
    statement = (
        sa.update(keys)
        .where(_key_is(keys, name, key), keys.c.waiting == 0, keys.c.running > 0)
        .values(running=keys.c.running - 1, updated_at=now)
    )
    result = session_sync.connection_of(session).execute(statement)
    return int(result.rowcount or 0) == 1


def lock_key(
    session: orm.Session, keys: sa.Table, name: str, key: str
) -> KeyCounts | None:
    """Lock the key row (``SELECT ... FOR UPDATE`` of one primary key) and read it.

    Returns:
        Its counters, or None when the key has no row yet.
    """
    statement = (
        sa.select(
            keys.c.running,
            keys.c.granted,
            keys.c.waiting,
            keys.c.concurrency,
            keys.c.rate,
            keys.c.per_ms,
            keys.c.rate_seq,
        )
        .where(_key_is(keys, name, key))
        .with_for_update()
    )
    row = session_sync.connection_of(session).execute(statement).first()
    if row is None:
        return None
    return KeyCounts(
        int(row[0]),
        int(row[1]),
        int(row[2]),
        row[3],
        row[4],
        None if row[5] is None else int(row[5]),
        int(row[6] or 0),
    )


def create_key(
    session: orm.Session,
    keys: sa.Table,
    name: str,
    key: str,
    cap: int | None,
    now: datetime,
) -> None:
    """Create the key row if it does not exist (the slow path of a first use).

    On SQLite in the session's transaction; elsewhere committed at once on a
    connection of its own, so two claims creating one key never deadlock
    (module docstring). An existing row is left as it is.
    """
    values = {
        "limit_name": name,
        "limit_key": key,
        "running": 0,
        "granted": 0,
        "waiting": 0,
        "concurrency": cap,
        "updated_at": now,
    }
    connection = session_sync.connection_of(session)
    dialect = connection.dialect.name
    if dialect == "sqlite":
        connection.execute(sqlite.insert(keys).values(values).on_conflict_do_nothing())
        return
    if dialect == "postgresql":
        statement: Any = postgresql.insert(keys).values(values).on_conflict_do_nothing()
    else:
        statement = sa.insert(keys).values(values).prefix_with("IGNORE")
    with connection.engine.begin() as own:
        own.execute(statement)


def change_counts(
    session: orm.Session,
    keys: sa.Table,
    name: str,
    key: str,
    now: datetime,
    *,
    running: int = 0,
    granted: int = 0,
    waiting: int = 0,
    concurrency: int | None = None,
) -> None:
    """Add to the counters of a key row the caller holds locked (the slow path)."""
    values: dict[str, Any] = {"updated_at": now}
    if running:
        values["running"] = keys.c.running + running
    if granted:
        values["granted"] = keys.c.granted + granted
    if waiting:
        values["waiting"] = keys.c.waiting + waiting
    if concurrency is not None:
        values["concurrency"] = concurrency
    session_sync.connection_of(session).execute(
        sa.update(keys).where(_key_is(keys, name, key)).values(values)
    )


def _waiter(row: Any) -> Waiter:
    # The grant's read adds the workflow's type and the step (R-STO-03); the
    # other reads of waiters have neither column.
    return Waiter(
        id=int(row.id),
        limit_name=row.limit_name,
        limit_key=row.limit_key,
        execution_id=row.execution_id,
        workflow_id=row.workflow_id,
        priority=int(row.priority),
        queue=row.queue,
        waiting_since=row.waiting_since,
        granted_at=row.granted_at,
        workflow_type=getattr(row, "waiter_workflow_type", None),
        step_name=getattr(row, "waiter_step_name", None),
    )


def waiter_of(
    session: orm.Session, waiters: sa.Table, execution_id: Any
) -> Waiter | None:
    """The waiter row of ``execution_id``, or None (a plain read)."""
    row = (
        session_sync.connection_of(session)
        .execute(sa.select(waiters).where(waiters.c.execution_id == execution_id))
        .first()
    )
    return None if row is None else _waiter(row)


def insert_waiter(
    session: orm.Session,
    waiters: sa.Table,
    *,
    name: str,
    key: str,
    execution_id: Any,
    workflow_id: Any,
    priority: int,
    queue: str | None,
    waiting_since: datetime,
) -> None:
    """Queue ``execution_id`` for a slot of ``(name, key)`` (R-LIM-11)."""
    session_sync.connection_of(session).execute(
        sa.insert(waiters).values(
            limit_name=name,
            limit_key=key,
            execution_id=execution_id,
            workflow_id=workflow_id,
            priority=priority,
            neg_priority=-priority,
            queue=queue,
            waiting_since=waiting_since,
            granted_at=None,
        )
    )


def delete_waiter(session: orm.Session, waiters: sa.Table, waiter_id: int) -> None:
    """Delete one waiter row by its primary key."""
    session_sync.connection_of(session).execute(
        sa.delete(waiters).where(waiters.c.id == waiter_id)
    )


def eligible_waiters(
    session: orm.Session,
    waiters: sa.Table,
    workflows: sa.Table,
    name: str,
    key: str,
    limit: int,
    executions: sa.Table | None = None,
) -> list[Waiter]:
    """The first ``limit`` waiters of ``(name, key)`` that may be granted (R-LIM-12/14).

    Not granted yet, of a ``ready`` or ``performing`` workflow; priority
    (higher first), then the time they started waiting, then arrival. A plain
    read: the caller holds the key row. With ``executions``, the same
    statement reads each waiter's workflow type and step name, for its
    task's time limits (R-STO-03).
    """
    columns: list[Any] = [waiters, workflows.c.type.label("waiter_workflow_type")]
    source: Any = waiters.join(workflows, workflows.c.id == waiters.c.workflow_id)
    if executions is not None:
        columns.append(executions.c.step_name.label("waiter_step_name"))
        source = source.outerjoin(executions, executions.c.id == waiters.c.execution_id)
    statement = (
        sa.select(*columns)
        .select_from(source)
        .where(
            _key_is(waiters, name, key),
            waiters.c.granted_at.is_(None),
            workflows.c.state.in_(_GRANTABLE_WORKFLOW_STATES),
        )
        .order_by(waiters.c.neg_priority, waiters.c.waiting_since, waiters.c.id)
        .limit(limit)
    )
    return [
        _waiter(row) for row in session_sync.connection_of(session).execute(statement)
    ]


def grant_waiters(
    session: orm.Session,
    waiters: sa.Table,
    waiter_ids: Sequence[int],
    now: datetime,
    *,
    not_before: datetime | None = None,
) -> None:
    """Mark waiters granted at ``now`` (their key row is held by the caller);
    ``not_before``: the earliest start a rate window allows (R-LIM-24)."""
    if waiter_ids:
        session_sync.connection_of(session).execute(
            sa.update(waiters)
            .where(waiters.c.id.in_(list(waiter_ids)))
            .values(granted_at=now, not_before=not_before)
        )


def return_grant(session: orm.Session, waiters: sa.Table, waiter_id: int) -> None:
    """Make a granted waiter an ordinary waiter again, keeping its place (R-LIM-16)."""
    session_sync.connection_of(session).execute(
        sa.update(waiters)
        .where(waiters.c.id == waiter_id)
        .values(granted_at=None, not_before=None)
    )


def overdue_grants(
    session: orm.Session, waiters: sa.Table, granted_before: datetime, limit: int
) -> list[Waiter]:
    """Waiters granted before ``granted_before``, their slot unclaimed (R-LIM-16)."""
    statement = (
        sa.select(waiters)
        .where(
            waiters.c.granted_at.is_not(None),
            sa.func.coalesce(waiters.c.not_before, waiters.c.granted_at)
            < granted_before,
        )
        .order_by(waiters.c.granted_at, waiters.c.id)
        .limit(limit)
    )
    return [
        _waiter(row) for row in session_sync.connection_of(session).execute(statement)
    ]


def keys_to_pump(
    session: orm.Session, keys: sa.Table, limit: int
) -> list[tuple[str, str]]:
    """Keys with waiters and a free slot by their counters (R-LIM-16).

    A safety net: every release grants at once; this finds keys whose cap was
    raised by a deploy, or whose waiters' workflows were resumed.
    """
    statement = (
        sa.select(keys.c.limit_name, keys.c.limit_key)
        .where(
            keys.c.waiting > 0,
            sa.or_(
                # A rate-limited key without a grant in flight: its head
                # waiter is woken when the window allows (R-LIM-24).
                sa.and_(keys.c.rate.is_not(None), keys.c.granted == 0),
                sa.and_(
                    keys.c.rate.is_(None),
                    keys.c.running + keys.c.granted < keys.c.concurrency,
                ),
            ),
        )
        .order_by(keys.c.updated_at)
        .limit(limit)
    )
    return [
        (str(n), str(k))
        for n, k in session_sync.connection_of(session).execute(statement)
    ]


def execution_limit_holds(
    session: orm.Session, execution_cls: Any, execution_id: Any
) -> Any:
    """``limit_holds`` of one execution, read from its row (R-LIM-20)."""
    statement = sa.select(execution_cls.limit_holds).where(
        execution_cls.id == execution_id
    )
    return session_sync.connection_of(session).execute(statement).scalar()


def waiter_states(
    session: orm.Session, workflows: sa.Table, executions: sa.Table, waiter: Waiter
) -> tuple[Any, Any, Waiter]:
    """``(workflow state, execution state, waiter)`` of a waiter; None for a row gone.

    The waiter is returned with its workflow type and step name, read by the
    same statement, for its task's time limits (R-STO-03).
    """
    statement = (
        sa.select(
            workflows.c.state,
            executions.c.state,
            workflows.c.type,
            executions.c.step_name,
        )
        .select_from(workflows)
        .outerjoin(
            executions,
            sa.and_(
                executions.c.id == waiter.execution_id,
                executions.c.workflow_id == workflows.c.id,
            ),
        )
        .where(workflows.c.id == waiter.workflow_id)
    )
    row = session_sync.connection_of(session).execute(statement).first()
    if row is None:
        return None, None, waiter
    described = dataclasses.replace(waiter, workflow_type=row[2], step_name=row[3])
    return row[0], row[1], described
