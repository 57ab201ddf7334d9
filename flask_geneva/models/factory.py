"""``build_models``: maps the two tables onto the host's ``db.Model`` (SPEC §2-§4).

:func:`build_models` combines :class:`~flask_geneva.models.workflow.WorkflowMixin` and
:class:`~flask_geneva.models.step_execution.StepExecutionMixin` with ``db.Model`` into
``Workflow`` and ``StepExecution`` (``geneva.Workflow`` / ``geneva.StepExecution``).
Workflow classes are single-table-inheritance subclasses of ``geneva.Workflow``
(R-STI-01); a row whose ``type`` matches no class loads as the base class (R-STI-02).

Optional columns (workflows ``metadata``; executions ``metadata``, ``error_class_name``,
``cursor``, ``continues_from_id``, ``worker_id``, ``signal_id``, ``waiting_since``,
``wait_deadline``, ``limit_holds``) are mapped *deferred*: no SQL
statement mentions them unless :mod:`flask_geneva.db.optional_columns` has
detected that they exist
(R-DM-30..35).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db.child_counts import child_counts_table
from flask_geneva.db.column_types import ExactText
from flask_geneva.db.column_types import JSONDocument
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import primary_key_type
from flask_geneva.db.limit_starts import limit_starts_table
from flask_geneva.db.limits import limit_keys_table
from flask_geneva.db.limits import limit_waiters_table
from flask_geneva.db.maintenance_runs import maintenance_runs_table
from flask_geneva.db.outcome_hours import outcome_hours_table
from flask_geneva.db.schedules import schedule_fires_table
from flask_geneva.db.schedules import schedules_table
from flask_geneva.db.states import DEADLINE_INDEX
from flask_geneva.db.states import DEADLINE_INDEX_WHERE
from flask_geneva.db.states import STEP_EXECUTIONS_TABLE
from flask_geneva.db.states import UNIQUE_CHILD_INDEX
from flask_geneva.db.states import WORKFLOWS_TABLE
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState
from flask_geneva.db.workers import workers_table
from flask_geneva.models.step_execution import StepExecutionMixin
from flask_geneva.models.workflow import WorkflowMixin

__all__ = ["build_models"]

# At most one scheduled, in_progress or waiting execution per workflow
# (R-DM-09..11, R-DM-17, R-WSIG-16).
_ONE_ACTIVE_WHERE = "state IN ('scheduled','in_progress','waiting')"
# At most one ongoing workflow per (type, hero) unless allow_multiple (R-DM-03/04).
_ONGOING_WHERE = "state NOT IN ('finished','canceled')"


def _state_column(initial: str) -> orm.MappedColumn[str]:
    """A ``state`` column: a NOT NULL string starting at ``initial``."""
    return orm.mapped_column(
        sa.String(255), nullable=False, default=initial, server_default=initial
    )


def _partial_index(
    name: str,
    *columns: str,
    where: str,
    sqlite_where: str | None = None,
    unique: bool = False,
) -> sa.Index:
    """An index over the rows matching ``where``, on PostgreSQL and SQLite only.

    MariaDB has no partial indexes, so none is created there; ``sqlite_where``
    is SQLite's spelling of ``where`` when it differs. The ``info`` flag lets
    the autogenerate filter pass over the index on other dialects.
    """
    return sa.Index(
        name,
        *columns,
        unique=unique,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where if sqlite_where is None else sqlite_where),
        info={"geneva_dialect_specific": True},
    ).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]  # documented: tuple of names


def _deadline_indexes() -> tuple[sa.Index, sa.Index]:
    """The deadline index (R-DL-10) in its two dialect forms, one name.

    PostgreSQL and SQLite index only the ongoing workflows with a deadline
    (partial); MySQL/MariaDB have no partial indexes and get ``(state,
    deadline_at)``, which the dispatcher's ``state IN (...)`` reads as three
    ranges. ``geneva_dialects`` tells the autogenerate filter which form
    belongs to the database it compares against.
    """
    partial = _partial_index(DEADLINE_INDEX, "deadline_at", where=DEADLINE_INDEX_WHERE)
    partial.info["geneva_dialects"] = ("postgresql", "sqlite")
    composite = sa.Index(
        DEADLINE_INDEX,
        "state",
        "deadline_at",
        info={"geneva_dialect_specific": True, "geneva_dialects": ("mysql", "mariadb")},
    ).ddl_if(dialect=("mysql", "mariadb"))  # type: ignore[arg-type]  # documented: tuple of names
    return partial, composite


class _FallbackPolymorphicMap(dict[Any, Any]):
    """Polymorphic map loading unknown ``type`` values as the base class (R-STI-02)."""

    def __init__(self, base_mapper: orm.Mapper[Any]) -> None:
        super().__init__()
        self.base_mapper = base_mapper

    def __missing__(self, key: Any) -> orm.Mapper[Any]:
        return self.base_mapper


def build_models(
    db: Any, geneva: Any, *, key_type: str = "bigint"
) -> tuple[type[WorkflowMixin], type[StepExecutionMixin]]:
    """Create the ``Workflow`` and ``StepExecution`` models on ``db.Model``.

    Args:
        db: The host's ``flask_sqlalchemy.SQLAlchemy`` instance.
        geneva: The :class:`~flask_geneva.Geneva` extension the models belong to.
        key_type: ``"bigint"`` (default) or ``"uuid"``: type of primary keys and of
            ``hero_id``/``workflow_id``/``continues_from_id`` (R-DM-20..22). Must match
            the schema written by ``flask geneva install``.

    Returns:
        ``(Workflow, StepExecution)``.
    """
    key = primary_key_type(key_type)
    # UUID keys are generated client-side (R-DM-21); bigint keys autoincrement.
    id_default = uuid.uuid4 if key_type == "uuid" else None
    model_base = db.Model
    now = clock.now

    class Workflow(WorkflowMixin, model_base):  # type: ignore[misc, valid-type]
        """A durable workflow row; subclass it to declare a workflow (SPEC §3)."""

        _geneva_is_base = True
        __geneva__ = geneva
        __tablename__ = WORKFLOWS_TABLE

        id: orm.Mapped[Any] = orm.mapped_column(
            key, primary_key=True, default=id_default
        )
        type: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
        hero_type: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        hero_id: orm.Mapped[Any] = orm.mapped_column(key, nullable=True)
        state: orm.Mapped[str] = _state_column(WorkflowState.READY.value)
        current_step_name: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        next_step_name: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        allow_multiple: orm.Mapped[bool] = orm.mapped_column(
            sa.Boolean, nullable=False, default=False, server_default=sa.false()
        )
        meta: orm.Mapped[Any] = orm.mapped_column(
            "metadata", JSONDocument().evaluates_none(), nullable=True, deferred=True
        )
        started_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        transitioned_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        # Child workflows (R-CHD-10): the parent, the execution and step that
        # started it, its key among the step's children, what canceling the
        # parent does to it, and how it settled for the parent. Optional
        # columns of the add_child_workflows unit, no foreign keys.
        parent_workflow_id: orm.Mapped[Any] = orm.mapped_column(
            key.evaluates_none(), nullable=True, deferred=True
        )
        parent_execution_id: orm.Mapped[Any] = orm.mapped_column(
            key.evaluates_none(), nullable=True, deferred=True
        )
        parent_step_name: orm.Mapped[str | None] = orm.mapped_column(
            ExactText(255).evaluates_none(), nullable=True, deferred=True
        )
        child_key: orm.Mapped[str | None] = orm.mapped_column(
            ExactText(255).evaluates_none(), nullable=True, deferred=True
        )
        parent_close: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(16).evaluates_none(), nullable=True, deferred=True
        )
        child_settled: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(16).evaluates_none(), nullable=True, deferred=True
        )
        # The workflow's result (R-CHD-01), encoded by the cursor codec.
        result_document: orm.Mapped[Any] = orm.mapped_column(
            "result", JSONDocument().evaluates_none(), nullable=True, deferred=True
        )
        # The workflow's deadline (R-DL-10): an optional column of the
        # add_workflow_deadlines unit.
        deadline_at: orm.Mapped[datetime | None] = orm.mapped_column(
            UTCDateTime().evaluates_none(), nullable=True, deferred=True
        )
        # The W3C trace context of the span that created the workflow
        # (R-OTEL-20): an optional column of the add_trace_context unit.
        trace_context: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(255).evaluates_none(), nullable=True, deferred=True
        )
        created_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now()
        )
        updated_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now(), onupdate=lambda: now()
        )

        __mapper_args__ = {"polymorphic_on": "type"}
        __table_args__ = (
            sa.Index("index_geneva_drive_workflows_on_type", "type"),
            sa.Index("index_geneva_drive_workflows_on_state", "state"),
            sa.Index(
                "index_geneva_drive_workflows_on_hero_type_and_hero_id",
                "hero_type",
                "hero_id",
            ),
            # The admin's counts, sorts and created range (unit add_admin_indexes).
            sa.Index("index_geneva_drive_workflows_on_type_and_state", "type", "state"),
            sa.Index("index_geneva_drive_workflows_on_created_at", "created_at"),
            # Its transitioned_at sort read by keyset, NULL rows by id (unit
            # add_list_indexes replaced the transitioned_at index, R-ADM-151).
            sa.Index(
                "index_geneva_drive_workflows_on_transitioned_at_and_id",
                "transitioned_at",
                "id",
            ),
            # A child is unique per (parent, starting step, key) (R-CHD-11);
            # top-level workflows (NULL parent) never collide.
            sa.Index(
                UNIQUE_CHILD_INDEX,
                "parent_workflow_id",
                "parent_step_name",
                "child_key",
                unique=True,
            ),
            _partial_index(
                "index_geneva_drive_workflows_unique_ongoing",
                "type",
                "hero_type",
                "hero_id",
                unique=True,
                where=f"{_ONGOING_WHERE} AND allow_multiple = false",
                sqlite_where=f"{_ONGOING_WHERE} AND allow_multiple = 0",
            ),
            # The dispatcher's way to workflows past their deadline (R-DL-10).
            *_deadline_indexes(),
        )

    # Unknown STI identities load as the base class (R-STI-02, BTR-18). Subclass
    # mappers share this map object, so it must be replaced before any subclass.
    mapper = sa.inspect(Workflow)
    fallback = _FallbackPolymorphicMap(mapper)
    fallback.update(mapper.polymorphic_map)
    mapper.polymorphic_map = fallback
    # Such a row keeps its stored type when the executor or an operator updates
    # it (R-STI-03): geneva's UPDATEs are Core statements (R-DM-41), so the ORM's
    # polymorphic identity check (a warning on an unknown identity) never sees it.

    class StepExecution(StepExecutionMixin, model_base):  # type: ignore[misc, valid-type]
        """One attempt at one step: idempotency key and audit record (SPEC §4)."""

        __geneva__ = geneva
        __tablename__ = STEP_EXECUTIONS_TABLE

        id: orm.Mapped[Any] = orm.mapped_column(
            key, primary_key=True, default=id_default
        )
        workflow_id: orm.Mapped[Any] = orm.mapped_column(
            key,
            sa.ForeignKey(f"{WORKFLOWS_TABLE}.id", ondelete="CASCADE"),
            nullable=False,
        )
        step_name: orm.Mapped[str] = orm.mapped_column(sa.String(255), nullable=False)
        state: orm.Mapped[str] = _state_column(StepExecutionState.SCHEDULED.value)
        outcome: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        scheduled_for: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False
        )
        started_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        completed_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        failed_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        canceled_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        skipped_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        finished_at: orm.Mapped[datetime | None] = orm.mapped_column(UTCDateTime())
        error_class_name: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(255).evaluates_none(), deferred=True
        )
        error_message: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
        error_backtrace: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
        job_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
        meta: orm.Mapped[Any] = orm.mapped_column(
            "metadata", JSONDocument().evaluates_none(), nullable=True, deferred=True
        )
        # evaluates_none(): an unset optional column is left out of the INSERT
        # instead of being sent as NULL, so inserts work where it is absent
        # (R-DM-32, R-DEG-01).
        cursor: orm.Mapped[Any] = orm.mapped_column(
            "cursor",
            JSONDocument(sqlite_type_name="JSON").evaluates_none(),
            nullable=True,
            deferred=True,
        )
        continues_from_id: orm.Mapped[Any] = orm.mapped_column(
            key.evaluates_none(), nullable=True, deferred=True
        )
        # The registered worker that claimed it (R-WRK-05), no foreign key.
        worker_id: orm.Mapped[str | None] = orm.mapped_column(
            sa.String(36).evaluates_none(), nullable=True, deferred=True
        )
        # Workflow signals (R-WSIG-02): the signal a wait_for step claimed, when
        # it parked and until when it waits; optional, no foreign key.
        signal_id: orm.Mapped[Any] = orm.mapped_column(
            key.evaluates_none(), nullable=True, deferred=True
        )
        waiting_since: orm.Mapped[datetime | None] = orm.mapped_column(
            UTCDateTime().evaluates_none(), nullable=True, deferred=True
        )
        wait_deadline: orm.Mapped[datetime | None] = orm.mapped_column(
            UTCDateTime().evaluates_none(), nullable=True, deferred=True
        )
        # Flow control by limits (R-LIM-11): what the execution holds or waits
        # for, e.g. {"held": [["partner-api", "acme"]]}; NULL when unlimited.
        limit_holds: orm.Mapped[Any] = orm.mapped_column(
            JSONDocument().evaluates_none(), nullable=True, deferred=True
        )
        created_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now()
        )
        updated_at: orm.Mapped[datetime] = orm.mapped_column(
            UTCDateTime(), nullable=False, default=lambda: now(), onupdate=lambda: now()
        )

        workflow: orm.Mapped[Any] = orm.relationship(Workflow, lazy="select")

        __table_args__ = (
            sa.Index(
                "index_geneva_drive_step_executions_on_workflow_id", "workflow_id"
            ),
            sa.Index("index_geneva_drive_step_executions_on_state", "state"),
            sa.Index(
                "index_geneva_drive_step_executions_on_scheduled_for", "scheduled_for"
            ),
            sa.Index(
                "index_geneva_drive_step_executions_scheduled", "state", "scheduled_for"
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_workflow_and_created_at",
                "workflow_id",
                "created_at",
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_workflow_id_and_state",
                "workflow_id",
                "state",
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_finished_at", "finished_at"
            ),
            sa.Index(
                "index_geneva_drive_step_executions_on_continues_from_id",
                "continues_from_id",
            ),
            sa.Index("index_geneva_drive_step_executions_on_worker_id", "worker_id"),
            sa.Index(
                "index_geneva_drive_step_executions_on_state_and_wait_deadline",
                "state",
                "wait_deadline",
            ),
            # The one-active index as the latest unit leaves it: widened to
            # `waiting` (unit widen_one_active_to_waiting, R-DM-17). Alembic
            # does not compare the predicate, so a database with the narrow
            # index (before that unit) shows no drift either.
            _partial_index(
                "index_geneva_drive_step_executions_one_active",
                "workflow_id",
                unique=True,
                where=_ONE_ACTIVE_WHERE,
            ),
            # The admin's error filters (unit add_recorded_error_index, R-DM-16):
            # no partial indexes on MariaDB, so none there.
            _partial_index(
                "index_geneva_drive_step_executions_recorded_errors",
                "created_at",
                "id",
                "workflow_id",
                "error_class_name",
                where="state IN ('failed','skipped') AND error_message IS NOT NULL",
            ),
            # The executions list's error class filter (unit add_list_indexes,
            # R-ADM-154): no partial indexes on MariaDB, so none there.
            _partial_index(
                "index_geneva_drive_step_executions_on_error_class_name",
                "error_class_name",
                where="error_class_name IS NOT NULL",
            ),
            # The dispatcher's deferred pass (unit add_dispatch_index,
            # R-DM-18): no partial indexes on MariaDB, so none there.
            _partial_index(
                "index_geneva_drive_step_executions_deferred",
                "scheduled_for",
                "id",
                where="state = 'scheduled' AND job_id = 'geneva:deferred'",
            ),
            _partial_index(
                "index_geneva_drive_step_executions_in_progress_started_at",
                "started_at",
                where="state = 'in_progress'",
            ),
        )

    # The worker registry (R-WRK-01): on the same metadata, so create_all and
    # the autogenerate filter treat it like the other two tables.
    workers_table(model_base.metadata)
    # The last runs of the dispatcher and housekeeping (R-HK-40).
    maintenance_runs_table(model_base.metadata)
    # The admin's hourly outcome counts, filled by housekeeping (R-ADM-58).
    outcome_hours_table(model_base.metadata)
    # Flow control by limits (R-LIM-10/11).
    limit_keys_table(model_base.metadata)
    limit_waiters_table(model_base.metadata, key)
    limit_starts_table(model_base.metadata)
    # Child workflows (R-CHD-10).
    child_counts_table(model_base.metadata, key)
    # Schedules (R-SCHED-10).
    schedules_table(model_base.metadata)
    schedule_fires_table(model_base.metadata)
    return Workflow, StepExecution
