"""Locking reads of the two tables, and the bulk cancel of scheduled executions.

Locking discipline (SPEC §7): lock the workflow row, then the execution row, both
re-read from the database, in one transaction. ``SELECT … FOR UPDATE`` does that on
PostgreSQL and MySQL/MariaDB. SQLite has no row locks, so geneva transactions start
with ``BEGIN IMMEDIATE`` (BTR-13; :mod:`flask_geneva.db.sqlite`), which takes
the database write lock up front and serialises lock-then-check sequences.

A row's state is changed by :func:`flask_geneva.engine.transitions.apply.apply` on the
instances locked here, and written by :mod:`flask_geneva.db.write_path` as Core
UPDATEs guarded by the state read under the lock (R-DM-40, R-DM-41); the one
bulk state write is :func:`cancel_scheduled_executions`. Which optional columns
the reads load is decided by :mod:`flask_geneva.db.optional_columns`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import execution_exits
from flask_geneva.db import session_sync
from flask_geneva.db.optional_columns import absent_execution_columns
from flask_geneva.db.optional_columns import absent_workflow_columns
from flask_geneva.db.optional_columns import cached_statement
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.db.optional_columns import undefer_options
from flask_geneva.db.session_transactions import geneva_from_session
from flask_geneva.db.sqlite import write_transaction
from flask_geneva.db.states import ACTIVE_EXECUTION_STATES
from flask_geneva.db.states import Outcome
from flask_geneva.db.states import StepExecutionState

__all__ = [
    "cancel_scheduled_executions",
    "finalize_unread_execution_keys",
    "lock_active_executions",
    "lock_execution",
    "lock_workflow",
    "lock_workflow_and_execution",
    "lock_workflow_and_execution_probing_hero",
]

#: The step-execution columns finalize reads under its lock after a body that
#: returned normally (R-EXE-40, R-EXE-44): the guard of the state write
#: (R-DM-40) and what the outcome, the next step and the signals' payloads
#: read. The others are expired on the instance, not re-read: an access
#: reads them from the row (R-EXE-48).
#: ``limit_holds`` too: the write path releases a held slot from it (R-LIM-20).
FINALIZE_EXECUTION_KEYS = frozenset(
    {"id", "workflow_id", "step_name", "state", "limit_holds"}
)


def finalize_unread_execution_keys(session: orm.Session) -> tuple[str, ...]:
    """The execution attribute keys finalize's lock leaves unread (R-EXE-48).

    The existing columns of the step-execution table outside
    :data:`FINALIZE_EXECUTION_KEYS`: the keys an optimistic finalize expires
    as the lock would have (R-EXE-81).
    """
    geneva = geneva_from_session(session)
    return _lock_columns(
        session, geneva.Workflow, geneva.StepExecution, FINALIZE_EXECUTION_KEYS
    )[4]


# -- locking reads -----------------------------------------------------------------


def lock_workflow(session: orm.Session, workflow_id: Any) -> Any:
    """Lock and re-read the workflow row; return the instance or None if gone.

    Must be the first lock of a transaction (workflow before execution, SPEC §7).
    """
    geneva = geneva_from_session(session)
    workflow_cls = geneva.Workflow
    write_transaction(session)
    return session.scalars(
        sa.select(workflow_cls)
        .where(workflow_cls.id == workflow_id)
        .options(*undefer_options(session, workflow_cls, None))
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def lock_execution(session: orm.Session, step_execution_id: Any) -> Any:
    """Lock and re-read the execution row; return it or None if gone."""
    execution_cls = geneva_from_session(session).StepExecution
    write_transaction(session)
    return session.scalars(
        sa.select(execution_cls)
        .where(execution_cls.id == step_execution_id)
        .options(*undefer_options(session, None, execution_cls))
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def lock_workflow_and_execution(
    session: orm.Session,
    step_execution_id: Any,
    *,
    execution_keys: frozenset[str] | None = None,
) -> tuple[Any, Any]:
    """Lock the execution's workflow, then the execution (SPEC §7 order, R-EXE-10).

    On PostgreSQL one statement locks both rows: ``SELECT … FROM workflows JOIN
    step_executions … FOR UPDATE`` takes its row locks in the order of the FROM
    list, the workflow first. On SQLite the transaction already holds the write
    lock, so the same single statement serves. On MySQL/MariaDB, where InnoDB
    locks rows in whatever join order the optimizer picks, the workflow is found
    and locked by one statement and the execution by a second.

    Both rows are re-read from the database: the session's instances (new ones,
    or those it already holds, overwritten) carry exactly the locked rows. The
    reads are Core statements turned into instances by
    :func:`flask_geneva.db.session_sync.materialize`, or an ORM load where that must
    not stand in (load listeners, a subclass with columns of its own).

    Args:
        session: The session (its transaction takes the locks).
        step_execution_id: The execution's primary key.
        execution_keys: Read only these attribute keys of the execution (e.g.
            :data:`FINALIZE_EXECUTION_KEYS`; its primary key always): the
            statement carries fewer columns, and the execution's other
            attributes are expired, so an access reads them from the row
            (R-EXE-48). None reads every column. The ORM fallback reads all.

    Returns:
        ``(workflow, execution)``; ``(None, None)`` when the execution row is gone.
    """
    workflow, execution, _ = _lock_pair(
        session, step_execution_id, None, execution_keys
    )
    return workflow, execution


def lock_workflow_and_execution_probing_hero(
    session: orm.Session,
    step_execution_id: Any,
    hero_cls: Any,
    hero_id: Any,
    *,
    execution_keys: frozenset[str] | None = None,
) -> tuple[Any, Any, bool | None]:
    """:func:`lock_workflow_and_execution`, also telling whether a hero row exists.

    A locking statement carries an ``EXISTS`` on the row of ``hero_cls`` whose
    primary key is ``hero_id``, so the hero check of an inline continuation
    (R-EXE-73) costs no statement of its own: the joined statement on
    PostgreSQL and SQLite, the execution's (second) locking statement on
    MariaDB. The subquery takes no lock (``FOR UPDATE`` locks only the rows of
    its own FROM list; MariaDB reads a select-list subquery as a plain
    ``SELECT``). On MySQL, and when the rows are read by the ORM, nothing is
    probed.

    Args:
        session: The session (its transaction takes the locks).
        step_execution_id: The execution's primary key.
        hero_cls: The hero's mapped class, with a one-column primary key.
        hero_id: The primary key to look for, of that column's Python type.
        execution_keys: As for :func:`lock_workflow_and_execution`.

    Returns:
        ``(workflow, execution, present)``: ``present`` is whether the hero row
        exists, or None when it was not probed; ``(None, None, None)`` when the
        execution row is gone.
    """
    return _lock_pair(session, step_execution_id, (hero_cls, hero_id), execution_keys)


def lock_workflow_and_execution_probing_heroes(
    session: orm.Session,
    step_execution_id: Any,
    hero_types: tuple[tuple[str, Any], ...],
) -> tuple[Any, Any, bool | None]:
    """:func:`lock_workflow_and_execution`, also telling whether the hero exists
    when the locked workflow's ``hero_type`` is one of ``hero_types`` (R-EXE-83).

    The claim knows neither the workflow nor its hero before it locks: on
    PostgreSQL and SQLite the joined locking statement carries a ``CASE`` on
    the workflow's ``hero_type`` with an ``EXISTS`` on each listed type's row
    of the workflow's ``hero_id``; on MariaDB the execution's (second)
    statement carries the one ``EXISTS`` of the type the first one read. The
    subqueries lock nothing (as :func:`lock_workflow_and_execution_probing_hero`).

    Args:
        session: The session (its transaction takes the locks).
        step_execution_id: The execution's primary key.
        hero_types: ``(hero_type, hero class)`` pairs; each class has a
            one-column primary key comparable with ``hero_id``.

    Returns:
        ``(workflow, execution, present)``: ``present`` is None when the
        workflow's hero type is not listed, its ``hero_id`` is NULL, or
        nothing was probed (MySQL, the ORM's read); ``(None, None, None)``
        when the execution row is gone.
    """
    return _lock_pair(session, step_execution_id, None, None, hero_types)


def _lock_pair(
    session: orm.Session,
    step_execution_id: Any,
    hero_probe: tuple[Any, Any] | None,
    only_execution_keys: frozenset[str] | None = None,
    hero_types: tuple[tuple[str, Any], ...] = (),
) -> tuple[Any, Any, bool | None]:
    geneva = geneva_from_session(session)
    workflow_cls, execution_cls = geneva.Workflow, geneva.StepExecution
    connection = session_sync.connection_of(session)
    write_transaction(session, connection)
    workflow_keys, workflow_columns, execution_keys, execution_columns, unread = (
        _lock_columns(session, workflow_cls, execution_cls, only_execution_keys)
    )
    params = {"step_execution_id": step_execution_id}
    workflow_values: Any
    execution_values: Any
    hero_present: bool | None = None
    if connection.dialect.name in _JOINED_LOCK_DIALECTS:
        hero_key = None
        if hero_probe is not None:
            hero_key = sa.inspect(hero_probe[0]).primary_key[0]
            params["geneva_hero_id"] = hero_probe[1]
        type_keys = tuple(
            (name, sa.inspect(cls).primary_key[0]) for name, cls in hero_types
        )
        row = connection.execute(
            cached_statement(
                ("lock-pair", workflow_columns, execution_columns, hero_key, type_keys),
                lambda: _joined_lock_statement(
                    workflow_cls,
                    execution_cls,
                    workflow_columns,
                    execution_columns,
                    hero_key,
                    type_keys,
                ),
            ),
            params,
        ).one_or_none()
        if row is None:
            return None, None, None
        split = len(workflow_keys)
        workflow_values = row[:split]
        execution_values = row[split : split + len(execution_keys)]
        if hero_key is not None or (type_keys and row[-1] is not None):
            hero_present = bool(row[-1])
    else:
        # FOR UPDATE locks only the rows of the outer table: the workflow is
        # locked here and the execution second, as SPEC §7 orders.
        workflow_values = connection.execute(
            cached_statement(
                ("lock-owner", workflow_columns, execution_cls),
                lambda: _owner_lock_statement(
                    workflow_cls, execution_cls, workflow_columns
                ),
            ),
            params,
        ).one_or_none()
        if workflow_values is None:
            return None, None, None
        if hero_probe is None and hero_types:
            hero_probe = _listed_hero(workflow_keys, workflow_values, hero_types)
        hero_key = None
        if hero_probe is not None and _probe_is_lock_free(connection.dialect):
            hero_key = sa.inspect(hero_probe[0]).primary_key[0]
            params["geneva_hero_id"] = hero_probe[1]
        execution_values = connection.execute(
            cached_statement(
                ("lock-execution", execution_columns, hero_key),
                lambda: _execution_lock_statement(
                    execution_cls, execution_columns, hero_key
                ),
            ),
            params,
        ).one_or_none()
        if execution_values is None:
            return None, None, None
        if hero_key is not None:
            hero_present = bool(execution_values[-1])
            execution_values = execution_values[: len(execution_keys)]
    workflow_mapper = _mapper_for_type(
        workflow_cls, workflow_values[workflow_keys.index("type")]
    )
    execution_mapper = sa.inspect(execution_cls)
    if (
        workflow_mapper is None
        # A subclass with columns of its own: the base columns do not fill it.
        or len(workflow_mapper.column_attrs)
        != len(workflow_keys) + len(absent_workflow_columns(optional_columns(session)))
        or not session_sync.materialize_allowed(
            session, (workflow_mapper, execution_mapper)
        )
        # A workflow class with an __init__ of its own is loaded by the ORM,
        # which never calls __init__ (session_sync.materialize would call it).
        or getattr(workflow_mapper.class_, "__geneva_defines_init__", False)
    ):
        # The rows are locked already; the ORM reads them again.
        workflow, execution = _orm_lock_pair(
            session, workflow_cls, execution_cls, step_execution_id
        )
        return workflow, execution, None
    workflow = session_sync.materialize(
        session, workflow_mapper, workflow_keys, workflow_values
    )
    execution = session_sync.materialize(
        session, execution_mapper, execution_keys, execution_values
    )
    if unread:
        # Not re-read: what the instance held may be stale (R-EXE-48).
        session.expire(execution, unread)
    return workflow, execution, hero_present


def _listed_hero(
    workflow_keys: tuple[str, ...],
    workflow_values: Any,
    hero_types: tuple[tuple[str, Any], ...],
) -> tuple[Any, Any] | None:
    """``(hero class, hero_id)`` of the read workflow row, if its type is listed."""
    hero_type = workflow_values[workflow_keys.index("hero_type")]
    hero_id = workflow_values[workflow_keys.index("hero_id")]
    if hero_id is None:
        return None
    for name, hero_cls in hero_types:
        if name == hero_type:
            return hero_cls, hero_id
    return None


def _mapper_for_type(workflow_cls: Any, type_name: Any) -> Any:
    """The mapper a workflow row of ``type_name`` loads as (R-STI-02), or None."""
    try:
        return sa.inspect(workflow_cls).polymorphic_map[type_name]
    except KeyError:
        return None


def _lock_columns(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    only_execution_keys: frozenset[str] | None,
) -> tuple[tuple[str, ...], Any, tuple[str, ...], Any, tuple[str, ...]]:
    """Keys and columns of both rows' reads, and the execution keys not read.

    ``only_execution_keys``: read only these of the execution's existing
    columns (the primary key always); None: all of them. Worked out once per
    classes, detected columns and key set.
    """
    columns = optional_columns(session)

    def build() -> tuple[tuple[str, ...], Any, tuple[str, ...], Any, tuple[str, ...]]:
        workflow_keys, workflow_columns = session_sync.column_keys(
            workflow_cls, absent_workflow_columns(columns)
        )
        absent = absent_execution_columns(columns)
        execution_keys, execution_columns = session_sync.column_keys(
            execution_cls, absent
        )
        unread: tuple[str, ...] = ()
        if only_execution_keys is not None:
            unread = tuple(
                key
                for key in execution_keys
                if key not in only_execution_keys and key != "id"
            )
            execution_keys, execution_columns = session_sync.column_keys(
                execution_cls, absent.union(unread)
            )
        return (
            workflow_keys,
            workflow_columns,
            execution_keys,
            execution_columns,
            unread,
        )

    return cached_statement(  # type: ignore[no-any-return]
        ("lock-columns", workflow_cls, execution_cls, columns, only_execution_keys),
        build,
    )


def _joined_lock_statement(
    workflow_cls: Any,
    execution_cls: Any,
    workflow_columns: Any,
    execution_columns: Any,
    hero_key: Any = None,
    type_keys: tuple[tuple[str, Any], ...] = (),
) -> Any:
    workflows = sa.inspect(workflow_cls).local_table
    executions = sa.inspect(execution_cls).local_table
    probes = _hero_probe_columns(hero_key)
    if type_keys:
        # R-EXE-83: the EXISTS of the locked workflow's own hero type, if listed.
        probes += (
            sa.case(
                *(
                    (
                        workflows.c.hero_type == name,
                        sa.exists().where(key == workflows.c.hero_id),
                    )
                    for name, key in type_keys
                ),
                else_=sa.null(),
            ).label("geneva_hero_present"),
        )
    return (
        sa.select(*workflow_columns, *execution_columns, *probes)
        .select_from(
            workflows.join(executions, executions.c.workflow_id == workflows.c.id)
        )
        .where(executions.c.id == sa.bindparam("step_execution_id"))
        .with_for_update()
    )


def _hero_probe_columns(hero_key: Any) -> tuple[Any, ...]:
    """The ``EXISTS`` on the hero row for a locking statement's select list, if any.

    A subquery of the select list: ``FOR UPDATE`` does not lock its rows, and it
    reads as a plain ``SELECT`` would (R-EXE-78).
    """
    if hero_key is None:
        return ()
    return (
        sa.exists()
        .where(hero_key == sa.bindparam("geneva_hero_id", type_=hero_key.type))
        .label("geneva_hero_present"),
    )


def _probe_is_lock_free(dialect: sa.Dialect) -> bool:
    """Whether a MySQL-family ``FOR UPDATE`` leaves a select-list subquery unlocked.

    MariaDB reads it as a consistent (non-locking) read: checked on 10.11, where
    the probe neither waits for nor takes a lock on the hero row. MySQL is not
    checked: there the hero check stays a statement of its own.
    """
    return bool(getattr(dialect, "is_mariadb", False))


def _owner_lock_statement(
    workflow_cls: Any, execution_cls: Any, workflow_columns: Any
) -> Any:
    workflows = sa.inspect(workflow_cls).local_table
    executions = sa.inspect(execution_cls).local_table
    owner = (
        sa.select(executions.c.workflow_id)
        .where(executions.c.id == sa.bindparam("step_execution_id"))
        .scalar_subquery()
    )
    return sa.select(*workflow_columns).where(workflows.c.id == owner).with_for_update()


def _execution_lock_statement(
    execution_cls: Any, execution_columns: Any, hero_key: Any = None
) -> Any:
    executions = sa.inspect(execution_cls).local_table
    return (
        sa.select(*execution_columns, *_hero_probe_columns(hero_key))
        .where(executions.c.id == sa.bindparam("step_execution_id"))
        .with_for_update()
    )


def _orm_lock_pair(
    session: orm.Session, workflow_cls: Any, execution_cls: Any, step_execution_id: Any
) -> tuple[Any, Any]:
    """The ORM load of both rows (populate_existing), for the fallback cases."""
    execution_owner = (
        sa.select(execution_cls.workflow_id)
        .where(execution_cls.id == step_execution_id)
        .scalar_subquery()
    )
    workflow = session.scalars(
        sa.select(workflow_cls)
        .where(workflow_cls.id == execution_owner)
        .options(*undefer_options(session, workflow_cls, None))
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if workflow is None:
        return None, None
    execution = lock_execution(session, step_execution_id)
    if execution is None:
        return None, None
    return workflow, execution


#: Dialects whose single joined ``SELECT … FOR UPDATE`` locks the workflow row
#: before the execution row (PostgreSQL locks in FROM-list order; SQLite holds
#: the database write lock already).
_JOINED_LOCK_DIALECTS = frozenset({"postgresql", "sqlite"})


def lock_active_executions(session: orm.Session, workflow_id: Any) -> list[Any]:
    """Lock and return the workflow's scheduled, in-progress and waiting executions.

    Oldest first. A ``waiting`` execution (parked at a ``wait_for`` gate,
    R-WSIG-10) is the workflow's current execution as much as a scheduled one.
    """
    execution_cls = geneva_from_session(session).StepExecution
    return list(
        session.scalars(
            sa.select(execution_cls)
            .where(execution_cls.workflow_id == workflow_id)
            .where(execution_cls.state.in_(ACTIVE_EXECUTION_STATES))
            .options(*undefer_options(session, None, execution_cls))
            .order_by(execution_cls.created_at, execution_cls.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    )


def cancel_scheduled_executions(
    session: orm.Session, workflow_id: Any, now: datetime, *, except_id: Any = None
) -> int:
    """Bulk-cancel the workflow's ``scheduled`` and ``waiting`` executions (R-SCH-03).

    Sets state and outcome ``canceled`` with ``canceled_at``/``finished_at``
    (R-SE-03); ``in_progress`` executions are untouched. A parked (``waiting``)
    execution is canceled like a scheduled one, so a new execution never
    coexists with it (R-WSIG-16). Returns the number of rows changed.
    """
    geneva = geneva_from_session(session)
    execution_cls = geneva.StepExecution
    left = _limited_scheduled(session, execution_cls, workflow_id, except_id)
    statement = (
        sa.update(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(
            execution_cls.state.in_(
                (StepExecutionState.SCHEDULED, StepExecutionState.WAITING)
            )
        )
        .values(
            state=StepExecutionState.CANCELED.value,
            outcome=Outcome.CANCELED.value,
            canceled_at=now,
            finished_at=now,
            updated_at=now,
        )
        .execution_options(synchronize_session="fetch")
    )
    if except_id is not None:
        statement = statement.where(execution_cls.id != except_id)
    result = session.execute(statement)
    if left:
        # The bulk UPDATE bypasses the write path: its waiters leave the
        # queue here, in the same transaction (R-LIM-22).
        execution_exits.notify_executions_left(session, geneva, left, now)
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _limited_scheduled(
    session: orm.Session, execution_cls: Any, workflow_id: Any, except_id: Any
) -> list[execution_exits.ExecutionLeft]:
    """The workflow's ``scheduled`` executions waiting for a limit's slot."""
    if not optional_columns(session).flow_limits:
        return []
    query = sa.select(execution_cls.id, execution_cls.limit_holds).where(
        execution_cls.workflow_id == workflow_id,
        execution_cls.state == StepExecutionState.SCHEDULED.value,
        execution_cls.limit_holds.is_not(None),
    )
    if except_id is not None:
        query = query.where(execution_cls.id != except_id)
    return [
        execution_exits.ExecutionLeft(
            row_id, StepExecutionState.SCHEDULED.value, "canceled", holds
        )
        for row_id, holds in session.execute(query)
    ]
