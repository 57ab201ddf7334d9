"""A test database without an optional install unit (R-DM-30, R-MIG-02).

Each function removes with ``ALTER TABLE``/``DROP`` what one unit adds, as on a
database that never installed it; :data:`DROPS` maps the unit's name to it. Tests
use them through the ``without_unit`` fixture (``tests/conftest.py``), which has
the shared server schema rebuilt for the next test.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from flask_geneva import reset_column_caches
from tests.apps.basic import db

EXECUTIONS = "geneva_drive_step_executions"
WAITING_INDEX = "index_geneva_drive_step_executions_on_state_and_wait_deadline"


def _quote(name: str) -> str:
    return str(db.engine.dialect.identifier_preparer.quote(name))


def _drop_index(connection: sa.Connection, index: str, table: str) -> None:
    on_table = f" ON {_quote(table)}" if db.engine.dialect.name == "mysql" else ""
    connection.execute(sa.text(f"DROP INDEX {_quote(index)}{on_table}"))


def _drop_columns(connection: sa.Connection, table: str, *columns: str) -> None:
    for column in columns:
        connection.execute(
            sa.text(f"ALTER TABLE {_quote(table)} DROP COLUMN {_quote(column)}")
        )


def _drop_table(connection: sa.Connection, table: str) -> None:
    connection.execute(sa.text(f"DROP TABLE {_quote(table)}"))


def drop_resumable_support(connection: sa.Connection) -> None:
    """``add_resumable_support``: the ``cursor`` and ``continues_from_id`` columns."""
    if db.engine.dialect.name == "sqlite":
        # SQLite refuses to drop an indexed column.
        connection.execute(
            sa.text(
                "DROP INDEX IF EXISTS "
                "index_geneva_drive_step_executions_on_continues_from_id"
            )
        )
    _drop_columns(connection, EXECUTIONS, "cursor", "continues_from_id")


def drop_worker_registry(connection: sa.Connection) -> None:
    """``add_worker_registry``: the workers table and the executions' ``worker_id``."""
    _drop_index(
        connection, "index_geneva_drive_step_executions_on_worker_id", EXECUTIONS
    )
    _drop_columns(connection, EXECUTIONS, "worker_id")
    _drop_table(connection, "geneva_drive_workers")


def drop_maintenance_runs(connection: sa.Connection) -> None:
    """``add_maintenance_runs``: the maintenance runs table."""
    _drop_table(connection, "geneva_drive_maintenance_runs")


def drop_workflow_signals(connection: sa.Connection) -> None:
    """``add_workflow_signals``: the signals table and the executions' three
    waiting columns with their index."""
    _drop_index(connection, WAITING_INDEX, EXECUTIONS)
    _drop_columns(connection, EXECUTIONS, "signal_id", "waiting_since", "wait_deadline")
    _drop_table(connection, "geneva_drive_signals")


def drop_worker_dead_after(connection: sa.Connection) -> None:
    """``add_worker_dead_after``: the workers' ``dead_after_ms`` column."""
    _drop_columns(connection, "geneva_drive_workers", "dead_after_ms")


def drop_step_execution_metadata(connection: sa.Connection) -> None:
    """``add_step_execution_metadata``: the executions' ``metadata`` column (on a
    fresh install the create-table unit adds it, R-MIG-05)."""
    _drop_columns(connection, EXECUTIONS, "metadata")


def drop_flow_limits(connection: sa.Connection) -> None:
    """``add_flow_limits``: the three limit tables and the executions' ``limit_holds``."""
    _drop_columns(connection, EXECUTIONS, "limit_holds")
    _drop_table(connection, "geneva_drive_limit_starts")
    _drop_table(connection, "geneva_drive_limit_waiters")
    _drop_table(connection, "geneva_drive_limit_keys")


def drop_child_workflows(connection: sa.Connection) -> None:
    """``add_child_workflows``: the child and result columns of workflows, their
    unique index and the child counts table."""
    _drop_index(
        connection,
        "index_geneva_drive_workflows_unique_child",
        "geneva_drive_workflows",
    )
    _drop_columns(
        connection,
        "geneva_drive_workflows",
        "parent_workflow_id",
        "parent_execution_id",
        "parent_step_name",
        "child_key",
        "parent_close",
        "child_settled",
        "result",
    )
    _drop_table(connection, "geneva_drive_child_counts")


def drop_schedules(connection: sa.Connection) -> None:
    """``add_schedules``: the schedules and schedule fires tables."""
    _drop_table(connection, "geneva_drive_schedule_fires")
    _drop_table(connection, "geneva_drive_schedules")


def drop_workflow_deadlines(connection: sa.Connection) -> None:
    """``add_workflow_deadlines``: the workflows' ``deadline_at`` and its index."""
    _drop_index(
        connection, "index_geneva_drive_workflows_deadline", "geneva_drive_workflows"
    )
    _drop_columns(connection, "geneva_drive_workflows", "deadline_at")


def drop_trace_context(connection: sa.Connection) -> None:
    """``add_trace_context``: the workflows' ``trace_context``."""
    _drop_columns(connection, "geneva_drive_workflows", "trace_context")


DROPS: dict[str, Callable[[sa.Connection], None]] = {
    "add_step_execution_metadata": drop_step_execution_metadata,
    "add_resumable_support": drop_resumable_support,
    "add_worker_registry": drop_worker_registry,
    "add_maintenance_runs": drop_maintenance_runs,
    "add_workflow_signals": drop_workflow_signals,
    "add_worker_dead_after": drop_worker_dead_after,
    "add_flow_limits": drop_flow_limits,
    "add_child_workflows": drop_child_workflows,
    "add_schedules": drop_schedules,
    "add_workflow_deadlines": drop_workflow_deadlines,
    "add_trace_context": drop_trace_context,
}


def drop_unit(unit: str) -> None:
    """Remove what the install unit ``unit`` (a :data:`DROPS` key) adds from the
    app's database, in one transaction; the column caches are reset."""
    db.session.remove()
    with db.engine.begin() as connection:
        DROPS[unit](connection)
    reset_column_caches()
