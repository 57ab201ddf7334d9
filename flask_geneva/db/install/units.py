"""The flask_geneva schema units and table names (R-MIG-02, R-DM-20).

Each :class:`SchemaUnit` is one logical schema change, written as one Alembic
revision; :data:`UNITS` lists them in the order they are written and applied.
"""

from __future__ import annotations

from dataclasses import dataclass

# The names are defined once, with the rest of the vocabulary, in db/states.
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

__all__ = [
    "KEY_TYPES",
    "KEY_TYPE_CHOICES",
    "MAINTENANCE_RUNS_TABLE",
    "OUR_TABLES",
    "OUTCOME_HOURS_TABLE",
    "SIGNALS_TABLE",
    "STEP_EXECUTIONS_TABLE",
    "UNITS",
    "WORKERS_TABLE",
    "WORKFLOWS_TABLE",
    "SchemaUnit",
]

OUR_TABLES = frozenset(
    {
        WORKFLOWS_TABLE,
        STEP_EXECUTIONS_TABLE,
        WORKERS_TABLE,
        SIGNALS_TABLE,
        MAINTENANCE_RUNS_TABLE,
        OUTCOME_HOURS_TABLE,
        LIMIT_KEYS_TABLE,
        LIMIT_WAITERS_TABLE,
        CHILD_COUNTS_TABLE,
        LIMIT_STARTS_TABLE,
        SCHEDULES_TABLE,
        SCHEDULE_FIRES_TABLE,
    }
)
"""The tables flask_geneva's migrations create and manage."""

KEY_TYPES = ("bigint", "uuid")
"""Key types the schema can be written with (R-DM-20)."""

KEY_TYPE_CHOICES = ("auto", *KEY_TYPES)
"""Values of ``flask geneva install --key-type``."""


@dataclass(frozen=True)
class SchemaUnit:
    """One logical schema change, written as one Alembic revision (R-MIG-02).

    Attributes:
        name: Stable unit name; the revision's marker is ``geneva_drive_<name>``.
        title: One-line description used in the revision's docstring.
        template: File name of the body template in ``migration_templates``.
    """

    name: str
    title: str
    template: str

    @property
    def slug(self) -> str:
        """The stable marker: revision message and file name slug (R-MIG-03)."""
        return f"geneva_drive_{self.name}"


UNITS: tuple[SchemaUnit, ...] = (
    SchemaUnit(
        "create_workflows",
        "create the geneva_drive_workflows table",
        "01_create_workflows.py.tmpl",
    ),
    SchemaUnit(
        "create_step_executions",
        "create the geneva_drive_step_executions table",
        "02_create_step_executions.py.tmpl",
    ),
    SchemaUnit(
        "add_finished_at",
        "add step_executions.finished_at with its index and backfill it",
        "03_add_finished_at.py.tmpl",
    ),
    SchemaUnit(
        "add_error_class_name",
        "add step_executions.error_class_name",
        "04_add_error_class_name.py.tmpl",
    ),
    SchemaUnit(
        "add_step_execution_metadata",
        "add step_executions.metadata",
        "05_add_step_execution_metadata.py.tmpl",
    ),
    SchemaUnit(
        "add_workflow_metadata",
        "add workflows.metadata",
        "06_add_workflow_metadata.py.tmpl",
    ),
    SchemaUnit(
        "allow_null_hero",
        "allow NULL hero_type and hero_id on workflows",
        "07_allow_null_hero.py.tmpl",
    ),
    SchemaUnit(
        "add_in_progress_index",
        "add the in-progress started_at index on step_executions",
        "08_add_in_progress_index.py.tmpl",
    ),
    SchemaUnit(
        "add_resumable_support",
        "add step_executions.cursor and continues_from_id (resumable steps)",
        "09_add_resumable_support.py.tmpl",
    ),
    SchemaUnit(
        "add_worker_registry",
        "create geneva_drive_workers and add step_executions.worker_id",
        "10_add_worker_registry.py.tmpl",
    ),
    SchemaUnit(
        "add_maintenance_runs",
        "create geneva_drive_maintenance_runs (last dispatcher/housekeeping runs)",
        "11_add_maintenance_runs.py.tmpl",
    ),
    SchemaUnit(
        "add_admin_indexes",
        "add the admin's workflows indexes (type+state, created_at, transitioned_at)",
        "12_add_admin_indexes.py.tmpl",
    ),
    SchemaUnit(
        "add_workflow_signals",
        "create geneva_drive_signals and add the waiting columns to step_executions",
        "13_add_workflow_signals.py.tmpl",
    ),
    SchemaUnit(
        "add_recorded_error_index",
        "add the partial index of step executions with a recorded error (admin)",
        "14_add_recorded_error_index.py.tmpl",
    ),
    SchemaUnit(
        "add_worker_dead_after",
        "add geneva_drive_workers.dead_after_ms (each worker's own dead-after)",
        "15_add_worker_dead_after.py.tmpl",
    ),
    SchemaUnit(
        "widen_one_active_to_waiting",
        "widen the one-active index to waiting executions (PostgreSQL, SQLite)",
        "16_widen_one_active_to_waiting.py.tmpl",
    ),
    SchemaUnit(
        "add_outcome_hours",
        "create geneva_drive_outcome_hours (the admin's hourly outcome counts)",
        "17_add_outcome_hours.py.tmpl",
    ),
    SchemaUnit(
        "add_flow_limits",
        "create the limit keys, waiters and starts tables (flow control by limits)",
        "18_add_flow_limits.py.tmpl",
    ),
    SchemaUnit(
        "add_child_workflows",
        "add the child and result columns to workflows and create the child counts",
        "19_add_child_workflows.py.tmpl",
    ),
    SchemaUnit(
        "add_schedules",
        "create the schedules and schedule fires tables (recurring starts)",
        "20_add_schedules.py.tmpl",
    ),
    SchemaUnit(
        "add_workflow_deadlines",
        "add workflows.deadline_at and the index of ongoing workflows by deadline",
        "21_add_workflow_deadlines.py.tmpl",
    ),
    SchemaUnit(
        "add_trace_context",
        "add workflows.trace_context (the W3C trace context of the creating span)",
        "22_add_trace_context.py.tmpl",
    ),
    SchemaUnit(
        "add_list_indexes",
        "index the admin lists' keyset sort and executions by error class",
        "23_add_list_indexes.py.tmpl",
    ),
    SchemaUnit(
        "add_dispatch_index",
        "index the deferred executions the dispatcher publishes",
        "24_add_dispatch_index.py.tmpl",
    ),
)
"""The schema units in the order they are written and applied (R-MIG-02)."""
