"""Optional-column detection: which optional columns the database has (R-DM-30..35).

The optional columns (workflow and execution ``metadata``, ``error_class_name``,
``cursor``, ``continues_from_id``, ``worker_id``, the waiting columns
``signal_id``/``waiting_since``/``wait_deadline``, the workers'
``dead_after_ms``), the workers, signals,
maintenance runs and outcome hours tables are
detected once per engine, on first use, and cached until
:func:`reset_column_caches`. Queries load only the columns that
exist (:func:`undefer_options`, :func:`absent_execution_columns`). The cache of
built statements (:func:`cached_statement`) lives here too, because its keys
depend on the detected columns and it is reset with them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db import write_path
from flask_geneva.db.context import models_of
from flask_geneva.db.states import CHILD_COUNTS_TABLE
from flask_geneva.db.states import LIMIT_KEYS_TABLE
from flask_geneva.db.states import LIMIT_STARTS_TABLE
from flask_geneva.db.states import LIMIT_WAITERS_TABLE
from flask_geneva.db.states import MAINTENANCE_RUNS_TABLE
from flask_geneva.db.states import OUTCOME_HOURS_TABLE
from flask_geneva.db.states import SCHEDULE_FIRES_TABLE
from flask_geneva.db.states import SCHEDULES_TABLE
from flask_geneva.db.states import SIGNALS_TABLE
from flask_geneva.db.states import STEP_EXECUTIONS_TABLE
from flask_geneva.db.states import WORKERS_TABLE
from flask_geneva.db.states import WORKFLOWS_TABLE
from flask_geneva.db.workers import DEAD_AFTER_COLUMN

__all__ = [
    "OptionalColumns",
    "absent_execution_columns",
    "absent_workflow_columns",
    "cached_statement",
    "optional_columns",
    "reset_column_caches",
    "undefer_options",
]

#: The step-execution columns of the ``add_workflow_signals`` unit (R-WSIG-02),
#: detected together: the unit adds all three.
_WAITING_COLUMNS = frozenset({"signal_id", "waiting_since", "wait_deadline"})
#: The workflow columns of the add_child_workflows unit (R-CHD-10).
CHILD_WORKFLOW_COLUMNS = frozenset(
    {
        "parent_workflow_id",
        "parent_execution_id",
        "parent_step_name",
        "child_key",
        "parent_close",
        "child_settled",
        "result",
    }
)


@dataclasses.dataclass(frozen=True)
class OptionalColumns:
    """Which optional columns exist in the connected database (R-DM-30)."""

    workflow_metadata: bool = True
    step_execution_metadata: bool = True
    error_class_name: bool = True
    cursor: bool = True
    continues_from_id: bool = True
    worker_id: bool = True
    workers_table: bool = True
    waiting_columns: bool = True
    signals_table: bool = True
    #: The ``add_maintenance_runs`` unit's table (R-HK-45).
    maintenance_runs: bool = True
    #: ``geneva_drive_workers.dead_after_ms`` (``add_worker_dead_after``, R-WRK-17).
    worker_dead_after: bool = True
    #: The ``add_outcome_hours`` unit's table (R-ADM-58).
    outcome_hours: bool = True
    #: The ``add_flow_limits`` unit: the three limit tables and
    #: ``step_executions.limit_holds`` (R-LIM-50).
    flow_limits: bool = True
    #: The ``add_child_workflows`` unit: the child columns and ``result`` of
    #: workflows and the child counts table (R-CHD-10, R-CHD-50).
    child_workflows: bool = True
    #: The ``add_schedules`` unit: the schedules and schedule fires tables
    #: (R-SCHED-10, R-SCHED-50).
    schedules: bool = True
    #: The ``add_workflow_deadlines`` unit: ``workflows.deadline_at`` and its
    #: index (R-DL-10, R-DL-50).
    workflow_deadlines: bool = True
    #: The ``add_trace_context`` unit: ``workflows.trace_context``, the W3C
    #: trace context of the creating span (R-OTEL-20, R-OTEL-50).
    trace_context: bool = True

    @property
    def resumable(self) -> bool:
        """Both ``cursor`` and ``continues_from_id`` exist (R-DM-33)."""
        return self.cursor and self.continues_from_id

    @property
    def worker_registry(self) -> bool:
        """The workers table and ``step_executions.worker_id`` exist (R-WRK-08)."""
        return self.worker_id and self.workers_table

    @property
    def workflow_signals(self) -> bool:
        """The signals table and the waiting columns exist (R-WSIG-04)."""
        return self.waiting_columns and self.signals_table


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
    write_path.clear_caches()


def optional_columns(session: orm.Session) -> OptionalColumns:
    """Return the optional columns present, detected once per engine (R-DM-30).

    Detection inspects the schema on first use (never at import time) and is cached
    per engine until :func:`reset_column_caches`.
    """
    bind = session_sync.bind_of(session)
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
        connection = session.connection()
        tables = set(sa.inspect(connection).get_table_names())
        workflow_columns = _column_names(connection, WORKFLOWS_TABLE, tables)
        execution_columns = _column_names(connection, STEP_EXECUTIONS_TABLE, tables)
        worker_columns = _column_names(connection, WORKERS_TABLE, tables)
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
            worker_id="worker_id" in execution_columns,
            workers_table=WORKERS_TABLE in tables,
            waiting_columns=execution_columns >= _WAITING_COLUMNS,
            signals_table=SIGNALS_TABLE in tables,
            maintenance_runs=MAINTENANCE_RUNS_TABLE in tables,
            worker_dead_after=DEAD_AFTER_COLUMN in worker_columns,
            outcome_hours=OUTCOME_HOURS_TABLE in tables,
            flow_limits=LIMIT_KEYS_TABLE in tables
            and LIMIT_WAITERS_TABLE in tables
            and LIMIT_STARTS_TABLE in tables
            and "limit_holds" in execution_columns,
            child_workflows=CHILD_COUNTS_TABLE in tables
            and workflow_columns >= CHILD_WORKFLOW_COLUMNS,
            schedules=SCHEDULES_TABLE in tables and SCHEDULE_FIRES_TABLE in tables,
            workflow_deadlines="deadline_at" in workflow_columns,
            trace_context="trace_context" in workflow_columns,
        )
        _column_cache[engine] = detected
        return detected


def _column_names(
    connection: sa.Connection, table_name: str, tables: set[str]
) -> set[str]:
    """The column names of ``table_name``, or an empty set when it is absent.

    Read from the result of ``SELECT * ... LIMIT 0`` (one short round trip, no
    row), not from the inspector's per-column reflection: on PostgreSQL that
    builds and compiles a catalog query of several joins for every engine, about
    20 ms a table, on each app's first step.
    """
    if table_name not in tables:
        return set()
    probe: sa.Select[Any] = sa.select(sa.literal_column("*"))
    probe = probe.select_from(sa.table(table_name)).limit(0)
    return set(connection.execute(probe).keys())


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
    if workflow_cls is not None and columns.child_workflows:
        # What a state change of a child needs (R-CHD-20); the rest of the
        # child columns and the result load when read.
        options.append(orm.undefer(workflow_cls.parent_workflow_id))
        options.append(orm.undefer(workflow_cls.child_settled))
    if workflow_cls is not None and columns.workflow_deadlines:
        # Checked under the lock by the dispatcher's deadline pass (R-DL-20).
        options.append(orm.undefer(workflow_cls.deadline_at))
    if workflow_cls is not None and columns.trace_context:
        # Linked to by the step's span (R-OTEL-21): read with the claim's lock.
        options.append(orm.undefer(workflow_cls.trace_context))
    if execution_cls is not None:
        if columns.step_execution_metadata:
            options.append(orm.undefer(execution_cls.meta))
        if columns.error_class_name:
            options.append(orm.undefer(execution_cls.error_class_name))
        if columns.resumable:
            options.append(orm.undefer(execution_cls.cursor))
            options.append(orm.undefer(execution_cls.continues_from_id))
        if columns.worker_id:
            options.append(orm.undefer(execution_cls.worker_id))
        if columns.waiting_columns:
            options.extend(
                orm.undefer(getattr(execution_cls, name))
                for name in sorted(_WAITING_COLUMNS)
            )
        if columns.flow_limits:
            options.append(orm.undefer(execution_cls.limit_holds))
    _statement_cache[key] = tuple(options)
    return options


def cached_statement(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """Return the statement (or loader options) cached under ``key``, built once.

    Construction and cache-key generation are a measurable share of a step's CPU
    time (bench/end_to_end.py). Keys name the classes, dialect and
    :class:`OptionalColumns` a statement depends on; :func:`reset_column_caches`
    empties the cache.

    Args:
        key: A hashable key naming everything the built object depends on.
        build: Called without arguments when ``key`` is not cached yet.

    Returns:
        The cached object, or what ``build`` returned (then cached).
    """
    statement = _statement_cache.get(key)
    if statement is None:
        statement = _statement_cache[key] = build()
    return statement


#: The workflow attribute keys of the add_child_workflows unit's columns (the
#: column ``result`` is mapped as ``result_document``).
CHILD_WORKFLOW_KEYS = (CHILD_WORKFLOW_COLUMNS - {"result"}) | {"result_document"}


@functools.lru_cache(maxsize=64)
def absent_workflow_columns(columns: OptionalColumns) -> frozenset[str]:
    """Attribute keys of the workflow columns a row read leaves unloaded.

    The optional columns that do not exist (R-DM-32), and the ``result``
    (``result_document``) always: up to ``GENEVA_MAX_RESULT_SIZE`` bytes,
    loaded when read (R-CHD-10).
    """
    absent = {"result_document"}
    if not columns.workflow_metadata:
        absent.add("meta")
    if not columns.child_workflows:
        absent.update(CHILD_WORKFLOW_KEYS)
    if not columns.workflow_deadlines:
        absent.add("deadline_at")
    if not columns.trace_context:
        absent.add("trace_context")
    return frozenset(absent)


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
    if not columns.worker_id:
        absent.add("worker_id")
    if not columns.waiting_columns:
        absent.update(_WAITING_COLUMNS)
    if not columns.flow_limits:
        absent.add("limit_holds")
    return frozenset(absent)


def installed_table(
    session: orm.Session,
    name: str,
    *,
    flag: str,
    what: str,
    log: logging.Logger | logging.LoggerAdapter[Any],
) -> sa.Table | None:
    """The optional table ``name``, or None when its install unit is missing.

    Detected once per engine with the optional columns (R-DM-30); a failed
    detection is rolled back, logged as a warning and counts as absent.

    Args:
        session: The session whose models (``models_of``) define the table.
        name: The table's name.
        flag: The :class:`OptionalColumns` field that says it exists.
        what: Names it in the warning (``"outcome hours"``).
        log: The logger of the warning.
    """
    try:
        present = getattr(optional_columns(session), flag)
    except sa.exc.SQLAlchemyError as error:
        session.rollback()
        log.warning("could not detect the %s table: %s", what, error)
        return None
    if not present:
        return None
    table: sa.Table = models_of(session).StepExecution.metadata.tables[name]
    return table
