"""The child counts table and every statement on it (SPEC §25, R-CHD-10..43).

``geneva_drive_child_counts`` holds one row per parent workflow that started
children (created by the ``add_child_workflows`` install unit):

* ``started``: children the parent created (each counted once, by the INSERT
  that created it, R-CHD-11);
* ``settled``: children that finished, were canceled or paused by an error
  (each counted once, R-CHD-20); ``failed``: those of them canceled or paused
  by an error now;
* ``waiting_execution_id``, ``wake_at_settled``, ``waiting_queue``,
  ``waiting_priority``: the parent's execution parked at a
  ``wait_for_children`` gate, how many settled children wake it and where its
  task goes (R-CHD-21);
* ``wake_due_at``: when a child's settlement made that wait due; set once, by
  the settlement that crossed the threshold, cleared by the parent's claim
  (R-CHD-22, R-CHD-24);
* ``cancel_due_at``: when the parent was canceled with ongoing children that
  the dispatcher still has to cancel (R-CHD-31).

The row is a *leaf* lock (R-CHD-40): every transaction locks it after the
workflow, execution and limit key rows it locks, and locks nothing after it.
So a child's settlement is applied by a ``before_commit`` hook
(:mod:`flask_geneva.engine.children.settle`), never where the child's state
is written. A child counts for its parent in O(1): one ``UPDATE`` of this row
by primary key, never a scan of the children (R-CHD-20).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from flask_geneva.db import session_sync
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import table_once
from flask_geneva.db.context import models_of
from flask_geneva.db.states import CHILD_COUNTS_TABLE

__all__ = [
    "ChildCounts",
    "SettlementWake",
    "add_started",
    "apply_settlement",
    "child_counts_table",
    "clear_cancel_due",
    "clear_wait",
    "counts_of",
    "delete_counts",
    "due_cancels",
    "due_wakes",
    "mark_cancel_due",
    "register_wait",
    "touch_wake",
]


def child_counts_table(metadata: sa.MetaData, key: Any) -> sa.Table:
    """The child counts of parent workflows, defined once per metadata (R-CHD-10).

    Args:
        metadata: The host's metadata.
        key: The type of the schema's keys (``parent_workflow_id``,
            ``waiting_execution_id``).
    """
    return table_once(
        metadata,
        CHILD_COUNTS_TABLE,
        sa.Column("parent_workflow_id", key, primary_key=True, autoincrement=False),
        sa.Column("started", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("settled", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("waiting_execution_id", key, nullable=True),
        sa.Column("wake_at_settled", sa.Integer(), nullable=True),
        sa.Column("waiting_queue", sa.String(255), nullable=True),
        sa.Column("waiting_priority", sa.Integer(), nullable=True),
        sa.Column("wake_due_at", UTCDateTime(), nullable=True),
        sa.Column("cancel_due_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Index("index_geneva_drive_child_counts_on_wake_due_at", "wake_due_at"),
        sa.Index("index_geneva_drive_child_counts_on_cancel_due_at", "cancel_due_at"),
    )


@dataclasses.dataclass(frozen=True)
class ChildCounts:
    """One parent's child counts, as read (R-CHD-10).

    Attributes:
        started: Children the parent created.
        settled: Children that finished, were canceled or paused by an error.
        failed: Of those, the ones canceled or paused by an error.
        waiting_execution_id: The parent's execution parked for its children,
            or None.
        wake_at_settled: How many settled children wake it, or None.
    """

    started: int
    settled: int
    failed: int
    waiting_execution_id: Any
    wake_at_settled: int | None


@dataclasses.dataclass(frozen=True)
class SettlementWake:
    """A parked parent execution that a settlement made due (R-CHD-22).

    Attributes:
        parent_workflow_id: The parent.
        execution_id: Its execution parked at the ``wait_for_children`` gate.
        queue: The queue its task goes to, or None for the default.
        priority: Its task's priority, or None.
        workflow_type: The parent's stored ``type``, read by the same
            statement (for its task's time limits, R-STO-03), or None.
        step_name: The parked execution's step, likewise, or None.
    """

    parent_workflow_id: Any
    execution_id: Any
    queue: str | None
    priority: int | None
    workflow_type: str | None = None
    step_name: str | None = None


#: The values of a counts row without a registered wait (R-CHD-24).
_NO_WAIT: dict[str, Any] = {
    "waiting_execution_id": None,
    "wake_at_settled": None,
    "waiting_queue": None,
    "waiting_priority": None,
    "wake_due_at": None,
}


def _table(session: orm.Session) -> sa.Table:
    table: sa.Table = models_of(session).Workflow.metadata.tables[CHILD_COUNTS_TABLE]
    return table


def _wake_step(session: orm.Session, table: sa.Table) -> tuple[Any, Any]:
    """Scalar subqueries of a counts row's parent ``type`` and parked step.

    Correlated to ``table``: read in the statement that returns the wake
    (R-STO-03), so that its publication needs no statement of its own.
    """
    geneva = models_of(session)
    workflows = geneva.Workflow.__table__
    executions = geneva.StepExecution.__table__
    # Qualified by hand: SQLAlchemy writes RETURNING's columns of the updated
    # table unqualified, and the workflows table has a parent_workflow_id too.
    prefix = session.get_bind().dialect.identifier_preparer.format_table(table)
    parent_id: sa.ColumnElement[Any] = sa.literal_column(f"{prefix}.parent_workflow_id")
    waiting_id: sa.ColumnElement[Any] = sa.literal_column(
        f"{prefix}.waiting_execution_id"
    )
    workflow_type = (
        sa.select(workflows.c.type)
        .where(workflows.c.id == parent_id)
        .scalar_subquery()
        .label("wake_workflow_type")
    )
    step_name = (
        sa.select(executions.c.step_name)
        .where(executions.c.id == waiting_id)
        .scalar_subquery()
        .label("wake_step_name")
    )
    return workflow_type, step_name


def _dialect_name(session: orm.Session) -> str:
    return session.get_bind().dialect.name


def counts_of(session: orm.Session, parent_workflow_id: Any) -> ChildCounts | None:
    """The parent's child counts (a plain read), or None before its first child."""
    table = _table(session)
    row = session.execute(
        sa.select(
            table.c.started,
            table.c.settled,
            table.c.failed,
            table.c.waiting_execution_id,
            table.c.wake_at_settled,
        ).where(table.c.parent_workflow_id == parent_workflow_id)
    ).first()
    if row is None:
        return None
    return ChildCounts(
        int(row.started),
        int(row.settled),
        int(row.failed),
        row.waiting_execution_id,
        row.wake_at_settled,
    )


def add_started(
    session: orm.Session, parent_workflow_id: Any, count: int, now: datetime
) -> None:
    """Count ``count`` new children of the parent, creating its row (R-CHD-11).

    One upsert by primary key in the caller's transaction (the one that
    inserted the children).
    """
    if count <= 0:
        return
    table = _table(session)
    values = {
        "parent_workflow_id": parent_workflow_id,
        "started": count,
        "settled": 0,
        "failed": 0,
        "updated_at": now,
    }
    name = _dialect_name(session)
    statement: Any
    insert: Any
    if name == "postgresql":
        insert = postgresql.insert(table).values(**values)
        statement = insert.on_conflict_do_update(
            index_elements=[table.c.parent_workflow_id],
            set_={"started": table.c.started + count, "updated_at": now},
        )
    elif name == "sqlite":
        insert = sqlite.insert(table).values(**values)
        statement = insert.on_conflict_do_update(
            index_elements=[table.c.parent_workflow_id],
            set_={"started": table.c.started + count, "updated_at": now},
        )
    elif name in ("mysql", "mariadb"):
        insert = mysql.insert(table).values(**values)
        statement = insert.on_duplicate_key_update(
            started=table.c.started + count, updated_at=now
        )
    else:  # pragma: no cover - the three supported databases are above
        raise NotImplementedError(f"child workflows are not supported on {name}")
    session_sync.connection_of(session).execute(statement)


def apply_settlement(
    session: orm.Session,
    parent_workflow_id: Any,
    *,
    settled: int,
    failed: int,
    now: datetime,
) -> SettlementWake | None:
    """Add settled and failed children to the parent's counts (R-CHD-20/22).

    One guarded ``UPDATE`` by primary key. When the parent has an execution
    parked for its children, no wake is due yet and the new ``settled`` count
    reaches its ``wake_at_settled``, the same statement sets ``wake_due_at``
    to ``now``: exactly one settlement makes a wait due.

    The ``wake_due_at`` assignment comes first in the ``SET`` list: MySQL and
    MariaDB evaluate single-table assignments left to right (later ones see
    the new values), PostgreSQL and SQLite always the old ones.

    Returns:
        The parked execution this settlement made due, or None (none parked,
        not due yet, made due earlier, or no row: the parent is gone).
    """
    table = _table(session)
    due = sa.case(
        (
            sa.and_(
                table.c.waiting_execution_id.is_not(None),
                table.c.wake_due_at.is_(None),
                table.c.settled + settled >= table.c.wake_at_settled,
            ),
            sa.literal(now, UTCDateTime()),
        ),
        else_=table.c.wake_due_at,
    )
    statement = (
        sa.update(table)
        .where(table.c.parent_workflow_id == parent_workflow_id)
        .ordered_values(
            (table.c.wake_due_at, due),
            (table.c.settled, table.c.settled + settled),
            (table.c.failed, table.c.failed + failed),
            (table.c.updated_at, now),
        )
    )
    wanted = (
        table.c.waiting_execution_id,
        table.c.waiting_queue,
        table.c.waiting_priority,
        table.c.wake_due_at,
        *_wake_step(session, table),
    )
    connection = session_sync.connection_of(session)
    if connection.dialect.update_returning:
        # PostgreSQL, SQLite: one statement.
        row = connection.execute(statement.returning(*wanted)).first()
    else:
        # MySQL/MariaDB: the row is ours until commit; a plain read sees it.
        result = connection.execute(statement)
        row = None
        if int(result.rowcount or 0) == 1:
            row = connection.execute(
                sa.select(*wanted).where(
                    table.c.parent_workflow_id == parent_workflow_id
                )
            ).first()
    if row is None or row.waiting_execution_id is None or row.wake_due_at != now:
        return None
    return SettlementWake(
        parent_workflow_id,
        row.waiting_execution_id,
        row.waiting_queue,
        row.waiting_priority,
        row.wake_workflow_type,
        row.wake_step_name,
    )


def register_wait(
    session: orm.Session,
    parent_workflow_id: Any,
    execution_id: Any,
    *,
    wake_at_settled: int,
    queue: str | None,
    priority: int | None,
    now: datetime,
) -> bool:
    """Park ``execution_id`` for the parent's children, if it must wait (R-CHD-21).

    One ``UPDATE ... WHERE settled < :wake_at_settled``: the check and the
    registration are one statement, so a child settling meanwhile either is
    counted before it (nothing registered: the caller runs the step) or sees
    the registration and makes it due.

    Returns:
        True when registered (the caller parks the execution), False when
        ``settled`` already reaches ``wake_at_settled`` (or no row exists).
    """
    table = _table(session)
    result = session_sync.connection_of(session).execute(
        sa.update(table)
        .where(
            table.c.parent_workflow_id == parent_workflow_id,
            table.c.settled < wake_at_settled,
        )
        .values(
            waiting_execution_id=execution_id,
            wake_at_settled=wake_at_settled,
            waiting_queue=queue,
            waiting_priority=priority,
            wake_due_at=None,
            updated_at=now,
        )
    )
    return int(result.rowcount or 0) == 1


def clear_wait(
    session: orm.Session, parent_workflow_id: Any, execution_id: Any, now: datetime
) -> None:
    """Forget the parked ``execution_id`` (its wait is over, R-CHD-24)."""
    table = _table(session)
    session_sync.connection_of(session).execute(
        sa.update(table)
        .where(
            table.c.parent_workflow_id == parent_workflow_id,
            table.c.waiting_execution_id == execution_id,
        )
        .values(**_NO_WAIT, updated_at=now)
    )


def due_wakes(
    session: orm.Session, before: datetime, *, limit: int
) -> list[SettlementWake]:
    """Waits made due before ``before`` whose parent has not claimed them (R-CHD-24).

    A plain read along ``index_geneva_drive_child_counts_on_wake_due_at``.
    """
    table = _table(session)
    rows = session.execute(
        sa.select(
            table.c.parent_workflow_id,
            table.c.waiting_execution_id,
            table.c.waiting_queue,
            table.c.waiting_priority,
            *_wake_step(session, table),
        )
        .where(
            table.c.wake_due_at < before,
            table.c.waiting_execution_id.is_not(None),
        )
        .order_by(table.c.wake_due_at)
        .limit(limit)
    ).all()
    return [
        SettlementWake(
            row.parent_workflow_id,
            row.waiting_execution_id,
            row.waiting_queue,
            row.waiting_priority,
            row.wake_workflow_type,
            row.wake_step_name,
        )
        for row in rows
    ]


def touch_wake(
    session: orm.Session, parent_workflow_id: Any, execution_id: Any, now: datetime
) -> bool:
    """Move a due wake's time to ``now`` (it was published again, R-CHD-24)."""
    table = _table(session)
    result = session_sync.connection_of(session).execute(
        sa.update(table)
        .where(
            table.c.parent_workflow_id == parent_workflow_id,
            table.c.waiting_execution_id == execution_id,
            table.c.wake_due_at.is_not(None),
        )
        .values(wake_due_at=now, updated_at=now)
    )
    return int(result.rowcount or 0) == 1


def mark_cancel_due(
    session: orm.Session, parent_workflow_id: Any, now: datetime
) -> None:
    """The parent was canceled: mark its children for the dispatcher (R-CHD-31).

    Marked only when children are not all settled and it is not marked yet;
    a registered wait is forgotten either way (the parent will not run it).
    """
    table = _table(session)
    mark = sa.case(
        (
            sa.and_(
                table.c.cancel_due_at.is_(None),
                table.c.settled < table.c.started,
            ),
            sa.literal(now, UTCDateTime()),
        ),
        else_=table.c.cancel_due_at,
    )
    session_sync.connection_of(session).execute(
        sa.update(table)
        .where(table.c.parent_workflow_id == parent_workflow_id)
        .values(cancel_due_at=mark, **_NO_WAIT, updated_at=now)
    )


def due_cancels(session: orm.Session, *, limit: int) -> list[Any]:
    """Parents whose ongoing children are to be canceled, oldest first (R-CHD-31)."""
    table = _table(session)
    return list(
        session.scalars(
            sa.select(table.c.parent_workflow_id)
            .where(table.c.cancel_due_at.is_not(None))
            .order_by(table.c.cancel_due_at)
            .limit(limit)
        )
    )


def delete_counts(session: orm.Session, parent_workflow_id: Any) -> None:
    """Delete the parent's counts row (its workflow was deleted, R-CHD-32)."""
    table = _table(session)
    session_sync.connection_of(session).execute(
        sa.delete(table).where(table.c.parent_workflow_id == parent_workflow_id)
    )


def clear_cancel_due(
    session: orm.Session, parent_workflow_id: Any, now: datetime
) -> None:
    """The parent's children are all canceled or settled: nothing more to do."""
    table = _table(session)
    session_sync.connection_of(session).execute(
        sa.update(table)
        .where(table.c.parent_workflow_id == parent_workflow_id)
        .values(cancel_due_at=None, updated_at=now)
    )
