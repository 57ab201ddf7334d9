"""All locking queries and state writes on the two tables; dialect quirks live here.

Locking discipline (SPEC §7): lock the workflow row, then the execution row, both
re-read from the database, in one transaction. ``SELECT … FOR UPDATE`` does that on
PostgreSQL and MySQL/MariaDB. SQLite has no row locks, so geneva transactions start
with ``BEGIN IMMEDIATE`` (BTR-13), which takes the database write lock up front and
serialises lock-then-check sequences; :func:`install_sqlite_locking` sets that up on
the engine (plus WAL and a busy timeout).

State columns are changed only by the helpers here, under those locks, and
written by :mod:`flask_geneva.core_rows` as Core UPDATEs guarded by the state
read under the lock (R-DM-40, R-DM-41).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import traceback
import weakref
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva import core_rows
from flask_geneva.exceptions import InvalidStateTransition
from flask_geneva.models import STEP_EXECUTIONS_TABLE
from flask_geneva.models import WORKFLOWS_TABLE
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "OptionalColumns",
    "install_sqlite_locking",
    "lock_execution",
    "lock_workflow",
    "optional_columns",
    "reset_column_caches",
    "rollback_after_error",
    "write_transaction",
]

_store_log = logging.getLogger("flask_geneva")

# -- optional column detection (R-DM-30..35) ----------------------------------------


@dataclasses.dataclass(frozen=True)
class OptionalColumns:
    """Which optional columns exist in the connected database (R-DM-30)."""

    workflow_metadata: bool = True
    step_execution_metadata: bool = True
    error_class_name: bool = True
    cursor: bool = True
    continues_from_id: bool = True

    @property
    def resumable(self) -> bool:
        """Both ``cursor`` and ``continues_from_id`` exist (R-DM-33)."""
        return self.cursor and self.continues_from_id


#: Detected columns per engine. Weak keys: a disposed test engine takes its entry
#: with it, and a new engine at the same address is never mistaken for it.
_column_cache: weakref.WeakKeyDictionary[sa.Engine, OptionalColumns] = (
    weakref.WeakKeyDictionary()
)
_column_cache_lock = threading.Lock()
#: Built statements and loader options, keyed by classes, dialect and columns.
_statement_cache: dict[tuple[Any, ...], Any] = {}


def reset_column_caches() -> None:
    """Forget detected optional columns, e.g. after running migrations (R-DM-31)."""
    with _column_cache_lock:
        _column_cache.clear()
        _statement_cache.clear()
    core_rows.clear_caches()


def optional_columns(session: orm.Session) -> OptionalColumns:
    """Return the optional columns present, detected once per engine (R-DM-30).

    Detection inspects the schema on first use (never at import time) and is cached
    per engine until :func:`reset_column_caches`.
    """
    bind = session.get_bind(mapper=None, clause=None)
    engine = bind.engine if isinstance(bind, sa.Connection) else bind
    cached = _column_cache.get(engine)
    if cached is not None:
        return cached
    with _column_cache_lock:
        cached = _column_cache.get(engine)
        if cached is not None:
            return cached
        # The session's own connection: on SQLite a second connection would wait
        # for the write lock this session may already hold (BEGIN IMMEDIATE).
        inspector = sa.inspect(session.connection())
        tables = set(inspector.get_table_names())
        workflow_columns = (
            {c["name"] for c in inspector.get_columns(WORKFLOWS_TABLE)}
            if WORKFLOWS_TABLE in tables
            else set()
        )
        execution_columns = (
            {c["name"] for c in inspector.get_columns(STEP_EXECUTIONS_TABLE)}
            if STEP_EXECUTIONS_TABLE in tables
            else set()
        )
        if not workflow_columns or not execution_columns:
            # Tables not created yet: assume a complete schema and do not cache, so
            # the first use after `flask db upgrade` detects for real.
            return OptionalColumns()
        detected = OptionalColumns(
            workflow_metadata="metadata" in workflow_columns,
            step_execution_metadata="metadata" in execution_columns,
            error_class_name="error_class_name" in execution_columns,
            cursor="cursor" in execution_columns,
            continues_from_id="continues_from_id" in execution_columns,
        )
        _column_cache[engine] = detected
        return detected


def undefer_options(
    session: orm.Session, workflow_cls: Any, execution_cls: Any
) -> list[Any]:
    """Loader options that load the optional columns that exist (R-DM-32)."""
    columns = optional_columns(session)
    key = ("undefer", workflow_cls, execution_cls, columns)
    cached = _statement_cache.get(key)
    if cached is not None:
        return list(cached)
    options: list[Any] = []
    if workflow_cls is not None and columns.workflow_metadata:
        options.append(orm.undefer(workflow_cls.meta))
    if execution_cls is not None:
        if columns.step_execution_metadata:
            options.append(orm.undefer(execution_cls.meta))
        if columns.error_class_name:
            options.append(orm.undefer(execution_cls.error_class_name))
        if columns.resumable:
            options.append(orm.undefer(execution_cls.cursor))
            options.append(orm.undefer(execution_cls.continues_from_id))
    _statement_cache[key] = tuple(options)
    return options


# -- SQLite locking (BTR-13) -----------------------------------------------------------

_IMMEDIATE_FLAG = "geneva_begin_immediate"


def install_sqlite_locking(engine: sa.Engine, *, busy_timeout_ms: int = 30000) -> None:
    """Give a SQLite ``engine`` real write locks (BTR-13).

    Installs event listeners that hand transaction control to SQLAlchemy
    (pysqlite's own implicit BEGIN is disabled), enable WAL journaling, a busy
    timeout of ``busy_timeout_ms`` milliseconds and foreign keys, and begin every
    transaction with ``BEGIN IMMEDIATE``, as Rails and Django do for SQLite.

    Why every transaction: SQLite has one writer at a time. A deferred transaction
    that reads first and writes later fails at once with "database is locked" when
    another connection wrote in between (WAL snapshot conflict; the busy timeout
    does not apply). Taking the write lock at BEGIN makes such transactions wait
    for their turn instead. Read-only transactions then also queue, so keep them
    short (Flask-SQLAlchemy ends the session with each request).

    Idempotent. Call before the engine opens connections (``Geneva.init_app`` does).
    """
    if engine.dialect.name != "sqlite" or engine.__dict__.get("_geneva_locking"):
        return
    engine.__dict__["_geneva_locking"] = True

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            with contextlib.suppress(Exception):
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            return  # e.g. Alembic's autocommit_block: no transaction wanted
        connection.info[_IMMEDIATE_FLAG] = True
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def write_transaction(
    session: orm.Session, connection: sa.Connection | None = None
) -> None:
    """Begin (if needed) a transaction that holds the write lock before it reads.

    With :func:`install_sqlite_locking` every SQLite transaction already does.
    On a SQLite engine without it, a no-op write statement takes the lock (SQLite
    takes it for any write statement, even one matching no row). Elsewhere the
    row locks of :func:`lock_workflow` do the work and this does nothing (the
    next statement begins the transaction). ``connection``, when given, is the
    session's connection (saves looking the bind up again).
    """
    dialect = (connection or session.get_bind()).dialect.name
    if dialect != "sqlite":
        return  # the next statement begins the transaction; row locks do the rest
    if connection is None:
        connection = session.connection()
    if connection.info.get(_IMMEDIATE_FLAG):
        return
    connection.exec_driver_sql(
        f"UPDATE {WORKFLOWS_TABLE} SET id = id WHERE 1 = 0"  # noqa: S608 - constant
    )
    connection.info[_IMMEDIATE_FLAG] = True


# -- locking reads -----------------------------------------------------------------


def lock_workflow(session: orm.Session, workflow_id: Any) -> Any:
    """Lock and re-read the workflow row; return the instance or None if gone.

    Must be the first lock of a transaction (workflow before execution, SPEC §7).
    """
    geneva = _geneva_from_session(session)
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
    execution_cls = _geneva_from_session(session).StepExecution
    write_transaction(session)
    return session.scalars(
        sa.select(execution_cls)
        .where(execution_cls.id == step_execution_id)
        .options(*undefer_options(session, None, execution_cls))
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def lock_workflow_and_execution(
    session: orm.Session, step_execution_id: Any
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
    :func:`flask_geneva.core_rows.materialize`, or an ORM load where that must
    not stand in (load listeners, a subclass with columns of its own).

    Returns:
        ``(workflow, execution)``; ``(None, None)`` when the execution row is gone.
    """
    geneva = _geneva_from_session(session)
    workflow_cls, execution_cls = geneva.Workflow, geneva.StepExecution
    connection = session.connection()
    write_transaction(session, connection)
    workflow_keys, workflow_columns, execution_keys, execution_columns = _lock_columns(
        session, workflow_cls, execution_cls
    )
    params = {"step_execution_id": step_execution_id}
    workflow_values: Any
    execution_values: Any
    if connection.dialect.name in _JOINED_LOCK_DIALECTS:
        row = connection.execute(
            _cached_statement(
                ("lock-pair", workflow_columns, execution_columns),
                lambda: _joined_lock_statement(
                    workflow_cls, execution_cls, workflow_columns, execution_columns
                ),
            ),
            params,
        ).one_or_none()
        if row is None:
            return None, None
        workflow_values = row[: len(workflow_keys)]
        execution_values = row[len(workflow_keys) :]
    else:
        # FOR UPDATE locks only the rows of the outer table: the workflow is
        # locked here and the execution second, as SPEC §7 orders.
        workflow_values = connection.execute(
            _cached_statement(
                ("lock-owner", workflow_columns, execution_cls),
                lambda: _owner_lock_statement(
                    workflow_cls, execution_cls, workflow_columns
                ),
            ),
            params,
        ).one_or_none()
        if workflow_values is None:
            return None, None
        execution_values = connection.execute(
            _cached_statement(
                ("lock-execution", execution_columns),
                lambda: _execution_lock_statement(execution_cls, execution_columns),
            ),
            params,
        ).one_or_none()
        if execution_values is None:
            return None, None
    workflow_mapper = _mapper_for_type(
        workflow_cls, workflow_values[workflow_keys.index("type")]
    )
    execution_mapper = sa.inspect(execution_cls)
    if (
        workflow_mapper is None
        # A subclass with columns of its own: the base columns do not fill it.
        or len(workflow_mapper.column_attrs)
        != len(workflow_keys) + (0 if "meta" in workflow_keys else 1)
        or not core_rows.materialize_allowed(
            session, (workflow_mapper, execution_mapper)
        )
        # A workflow class with an __init__ of its own is loaded by the ORM,
        # which never calls __init__ (core_rows.materialize would call it).
        or getattr(workflow_mapper.class_, "__geneva_defines_init__", False)
    ):
        # The rows are locked already; the ORM reads them again.
        return _orm_lock_pair(session, workflow_cls, execution_cls, step_execution_id)
    return (
        core_rows.materialize(session, workflow_mapper, workflow_keys, workflow_values),
        core_rows.materialize(
            session, execution_mapper, execution_keys, execution_values
        ),
    )


def _mapper_for_type(workflow_cls: Any, type_name: Any) -> Any:
    """The mapper a workflow row of ``type_name`` loads as (R-STI-02), or None."""
    try:
        return sa.inspect(workflow_cls).polymorphic_map[type_name]
    except KeyError:
        return None


def _cached_statement(key: tuple[Any, ...], build: Any) -> Any:
    statement = _statement_cache.get(key)
    if statement is None:
        # Built once: construction and cache-key generation are a measurable
        # share of a step's CPU time (bench/end_to_end.py).
        statement = _statement_cache[key] = build()
    return statement


def _lock_columns(
    session: orm.Session, workflow_cls: Any, execution_cls: Any
) -> tuple[tuple[str, ...], Any, tuple[str, ...], Any]:
    columns = optional_columns(session)
    workflow_keys, workflow_columns = core_rows.column_keys(
        workflow_cls, frozenset() if columns.workflow_metadata else frozenset({"meta"})
    )
    execution_keys, execution_columns = core_rows.column_keys(
        execution_cls, absent_execution_columns(columns)
    )
    return workflow_keys, workflow_columns, execution_keys, execution_columns


def absent_execution_columns(columns: OptionalColumns) -> frozenset[str]:
    """Attribute keys of the step-execution optional columns that do not exist."""
    absent = set()
    if not columns.step_execution_metadata:
        absent.add("meta")
    if not columns.error_class_name:
        absent.add("error_class_name")
    if not columns.cursor:
        absent.add("cursor")
    if not columns.continues_from_id:
        absent.add("continues_from_id")
    return frozenset(absent)


def _joined_lock_statement(
    workflow_cls: Any, execution_cls: Any, workflow_columns: Any, execution_columns: Any
) -> Any:
    workflows = sa.inspect(workflow_cls).local_table
    executions = sa.inspect(execution_cls).local_table
    return (
        sa.select(*workflow_columns, *execution_columns)
        .select_from(
            workflows.join(executions, executions.c.workflow_id == workflows.c.id)
        )
        .where(executions.c.id == sa.bindparam("step_execution_id"))
        .with_for_update()
    )


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


def _execution_lock_statement(execution_cls: Any, execution_columns: Any) -> Any:
    executions = sa.inspect(execution_cls).local_table
    return (
        sa.select(*execution_columns)
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
    """Lock and return the workflow's scheduled/in-progress executions, oldest first."""
    execution_cls = _geneva_from_session(session).StepExecution
    return list(
        session.scalars(
            sa.select(execution_cls)
            .where(execution_cls.workflow_id == workflow_id)
            .where(
                execution_cls.state.in_(
                    (StepExecutionState.SCHEDULED, StepExecutionState.IN_PROGRESS)
                )
            )
            .options(*undefer_options(session, None, execution_cls))
            .order_by(execution_cls.created_at, execution_cls.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    )


# -- state writes -------------------------------------------------------------------

_WORKFLOW_TRANSITIONS_FROM = (WorkflowState.READY, WorkflowState.PERFORMING)
_EXECUTION_TRANSITIONS: dict[str, tuple[str, ...]] = {
    StepExecutionState.SCHEDULED: (
        StepExecutionState.SCHEDULED,
        StepExecutionState.IN_PROGRESS,
        StepExecutionState.CANCELED,
        StepExecutionState.SKIPPED,
        StepExecutionState.FAILED,
        StepExecutionState.COMPLETED,
    ),
    StepExecutionState.IN_PROGRESS: (
        StepExecutionState.IN_PROGRESS,
        StepExecutionState.COMPLETED,
        StepExecutionState.FAILED,
        StepExecutionState.CANCELED,
        StepExecutionState.SKIPPED,
    ),
}
_STATE_TIMESTAMP = {
    StepExecutionState.COMPLETED: "completed_at",
    StepExecutionState.FAILED: "failed_at",
    StepExecutionState.SKIPPED: "skipped_at",
    StepExecutionState.CANCELED: "canceled_at",
}


def set_workflow_state(
    workflow: Any,
    state: WorkflowState,
    now: datetime,
    *,
    validate: bool = True,
    **attributes: Any,
) -> None:
    """Set the workflow state in memory (flushed with the transaction).

    Entering finished/canceled/paused sets ``transitioned_at`` (R-WF-03). With
    ``validate`` the executor's transition rule applies (R-WF-02).

    Raises:
        InvalidStateTransition: ``validate`` and the current state is not ready or
            performing (a same-state transition is a no-op).
    """
    current = workflow.state
    if validate and current != state and current not in _WORKFLOW_TRANSITIONS_FROM:
        raise InvalidStateTransition(
            f"cannot transition workflow {workflow.id} from {current!r} to "
            f"{state.value!r}; allowed only from 'ready' or 'performing'"
        )
    for name, value in attributes.items():
        setattr(workflow, name, value)
    if current == state and validate:
        return
    workflow.state = state.value
    if state in (WorkflowState.FINISHED, WorkflowState.CANCELED, WorkflowState.PAUSED):
        workflow.transitioned_at = now
    if state == WorkflowState.PERFORMING and workflow.started_at is None:
        workflow.started_at = now


def set_execution_state(
    execution: Any,
    state: StepExecutionState,
    now: datetime,
    *,
    outcome: Outcome | None = None,
    validate: bool = True,
) -> None:
    """Set the execution state, outcome and timestamps in memory (R-SE-01..03).

    ``in_progress`` sets ``started_at``; every terminal state sets its own timestamp
    and ``finished_at`` to the same ``now``.

    Raises:
        InvalidStateTransition: ``validate`` and the transition is not allowed
            (R-SE-01), e.g. from a terminal state.
    """
    current = execution.state
    if validate and state not in _EXECUTION_TRANSITIONS.get(current, ()):
        raise InvalidStateTransition(
            f"cannot transition step execution {execution.id} from {current!r} to "
            f"{state.value!r}"
        )
    execution.state = state.value
    if outcome is not None:
        execution.outcome = outcome.value
    if state == StepExecutionState.IN_PROGRESS:
        execution.started_at = now
    timestamp = _STATE_TIMESTAMP.get(state)
    if timestamp is not None:
        setattr(execution, timestamp, now)
        execution.finished_at = now


def cancel_scheduled_executions(
    session: orm.Session, workflow_id: Any, now: datetime, *, except_id: Any = None
) -> int:
    """Bulk-cancel the workflow's ``scheduled`` executions (R-SCH-03, R-SE-03).

    Sets state and outcome ``canceled`` with ``canceled_at``/``finished_at``;
    ``in_progress`` executions are untouched. Returns the number of rows changed.
    """
    execution_cls = _geneva_from_session(session).StepExecution
    statement = (
        sa.update(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.state == StepExecutionState.SCHEDULED)
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
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def exception_class_name(error: BaseException) -> str:
    """Module-qualified class name of ``error``; builtins unqualified (R-SE-20)."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def exception_details(error: BaseException) -> dict[str, Any]:
    """Return ``{"class", "message", "backtrace"}`` for metadata (R-SE-20)."""
    frames = traceback.format_exception(type(error), error, error.__traceback__)
    return {
        "class": exception_class_name(error),
        "message": str(error),
        "backtrace": [line.rstrip("\n") for line in frames],
    }


def record_error(execution: Any, error: BaseException) -> None:
    """Record ``error`` on the execution's error columns and metadata (R-SE-20)."""
    details = exception_details(error)
    execution.error_message = details["message"]
    execution.error_backtrace = "\n".join(details["backtrace"])
    session = orm.object_session(execution)
    columns = optional_columns(session) if session is not None else OptionalColumns()
    if columns.error_class_name:
        execution.error_class_name = details["class"][:255]
    execution.write_metadata("exception", details)


def record_exception_metadata(execution: Any, error: BaseException) -> None:
    """Store exception info in metadata only (reattempted executions, R-SE-21)."""
    execution.write_metadata("exception", exception_details(error))


def _geneva_from_session(session: orm.Session) -> Any:
    geneva = session.info.get("geneva")
    if geneva is not None:
        return geneva
    from flask import current_app

    return current_app.extensions["geneva"].geneva


def commit_keeping_state(session: orm.Session) -> None:
    """Commit without expiring loaded instances.

    Used after geneva's own locked transactions: the instances hold exactly what
    was just written, so reloading them would only cost statements.
    """
    previous = session.expire_on_commit
    session.expire_on_commit = False
    try:
        core_rows.flush(session, _geneva_from_session(session))
        session.commit()
    finally:
        session.expire_on_commit = previous


@contextlib.contextmanager
def savepoint(session: orm.Session) -> Iterator[Any]:
    """A SAVEPOINT around a block; rolled back (and re-raised) on error."""
    with session.begin_nested() as nested:
        yield nested


def rollback_after_error(session: orm.Session, error: BaseException) -> None:
    """Roll ``session`` back after ``error`` without ever hiding ``error``.

    A rollback that fails too (a session left in an unusable state, a lost
    connection) is logged and the session closed, so the caller goes on to
    report or re-raise the first error, not the second (issue 14).
    """
    try:
        session.rollback()
    except Exception as rollback_error:  # noqa: BLE001 - never mask ``error``
        _store_log.warning(
            "rolling back after %s failed (%s: %s); closing the session",
            type(error).__name__,
            type(rollback_error).__name__,
            rollback_error,
        )
        session.close()
