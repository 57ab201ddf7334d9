"""The worker registry table and every SQL statement on it (R-WRK-01..08).

``geneva_drive_workers`` holds one row per process that executes steps: who it
is (hostname, pid, Celery node name, queues, library version), when it started
and when it last proved it is alive (``last_heartbeat_at``). The heartbeat
thread of :mod:`flask_geneva.worker_registry` writes it; recovery reads it
(:func:`abandoned_criteria`). The table is optional: without the
``add_worker_registry`` install unit nothing here is called (R-WRK-08).

Statements are Core statements on a connection of their own, so the heartbeat
thread never touches the host's ORM session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from flask_geneva.model_columns import UTCDateTime
from flask_geneva.model_states import WORKERS_TABLE
from flask_geneva.model_states import StepExecutionState

__all__ = [
    "WorkerIdentity",
    "abandoned_criteria",
    "count_abandoned",
    "delete_worker",
    "insert_worker",
    "last_heartbeat",
    "live_worker_ids",
    "prune_dead_workers",
    "touch_worker",
    "worker_rows",
    "workers_table",
    "workers_with_executions",
]


@dataclasses.dataclass(frozen=True)
class WorkerIdentity:
    """Who a registered worker process is (R-WRK-01).

    Attributes:
        worker_id: The registry key (a UUID string), written to the executions
            the process claims.
        hostname: The machine's host name.
        pid: The operating-system process id.
        node_name: The Celery node name (``celery@host``), or None.
        queues: The queues the worker consumes from.
        library_version: flask_geneva's version in that process.
    """

    worker_id: str
    hostname: str
    pid: int
    node_name: str | None
    queues: tuple[str, ...]
    library_version: str


def workers_table(metadata: sa.MetaData) -> sa.Table:
    """Return the ``geneva_drive_workers`` table of ``metadata``, defining it once.

    :func:`flask_geneva.model_factory.build_models` calls it with the host's
    ``db.metadata``, so ``db.create_all()`` creates it with the other two tables
    and the install unit ``add_worker_registry`` matches it (R-WRK-01).
    """
    existing = metadata.tables.get(WORKERS_TABLE)
    if existing is not None:
        return existing
    return sa.Table(
        WORKERS_TABLE,
        metadata,
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("node_name", sa.String(255), nullable=True),
        sa.Column("queues", sa.Text(), nullable=True),
        sa.Column("library_version", sa.String(64), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("last_heartbeat_at", UTCDateTime(), nullable=False),
        sa.Index(
            "index_geneva_drive_workers_on_last_heartbeat_at", "last_heartbeat_at"
        ),
    )


def insert_worker(
    connection: sa.Connection, table: sa.Table, identity: WorkerIdentity, now: datetime
) -> None:
    """INSERT the worker's row, started and last seen at ``now`` (R-WRK-02)."""
    connection.execute(
        sa.insert(table).values(
            id=identity.worker_id,
            hostname=identity.hostname[:255],
            pid=identity.pid,
            node_name=None if identity.node_name is None else identity.node_name[:255],
            queues=",".join(identity.queues) or None,
            library_version=identity.library_version[:64],
            started_at=now,
            last_heartbeat_at=now,
        )
    )


def touch_worker(
    connection: sa.Connection, table: sa.Table, worker_id: str, now: datetime
) -> bool:
    """Record a heartbeat (R-WRK-03).

    Returns:
        False when the row is gone (pruned as dead): the caller inserts it again.
    """
    result = connection.execute(
        sa.update(table).where(table.c.id == worker_id).values(last_heartbeat_at=now)
    )
    return bool(result.rowcount)


def delete_worker(connection: sa.Connection, table: sa.Table, worker_id: str) -> None:
    """DELETE the worker's row: its clean shutdown (R-WRK-04)."""
    connection.execute(sa.delete(table).where(table.c.id == worker_id))


def last_heartbeat(
    connection: sa.Connection, table: sa.Table, worker_id: str
) -> datetime | None:
    """The worker's ``last_heartbeat_at``, or None when it is not registered."""
    value: datetime | None = connection.scalar(
        sa.select(table.c.last_heartbeat_at).where(table.c.id == worker_id)
    )
    return value


def live_worker_ids(table: sa.Table, now: datetime, dead_after: timedelta) -> Any:
    """SELECT of the ids of workers whose last heartbeat is within ``dead_after``."""
    return sa.select(table.c.id).where(table.c.last_heartbeat_at >= now - dead_after)


def abandoned_criteria(
    execution: Any,
    table: sa.Table,
    *,
    now: datetime,
    dead_after: timedelta,
    age_threshold: timedelta,
) -> Any:
    """WHERE clause of an abandoned ``in_progress`` execution (R-WRK-05/06).

    An execution that names a worker is abandoned when that worker has not
    heartbeated for ``dead_after`` or is gone from the registry, whatever the
    step's age; while its worker is alive it never is. An execution without a
    worker (claimed before the upgrade, or outside a registered worker) keeps
    the age rule: ``started_at`` earlier than ``now - age_threshold`` (R-HK-20).

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
        table: The workers table.
        now: The reference time (aware UTC).
        dead_after: ``GENEVA_WORKER_DEAD_AFTER``.
        age_threshold: ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``.
    """
    return sa.or_(
        sa.and_(
            execution.worker_id.is_(None),
            execution.started_at < now - age_threshold,
        ),
        sa.and_(
            execution.worker_id.is_not(None),
            execution.worker_id.not_in(live_worker_ids(table, now, dead_after)),
        ),
    )


def prune_dead_workers(
    connection: sa.Connection,
    table: sa.Table,
    execution_table: sa.Table,
    *,
    now: datetime,
    dead_after: timedelta,
) -> int:
    """DELETE dead workers that hold no ``in_progress`` execution (R-WRK-07).

    A dead worker that still holds one stays listed until recovery has moved
    the execution on, so operators see which worker abandoned it.

    Returns:
        The number of rows deleted.
    """
    holding = sa.select(execution_table.c.worker_id).where(
        execution_table.c.state == StepExecutionState.IN_PROGRESS.value,
        execution_table.c.worker_id.is_not(None),
    )
    result = connection.execute(
        sa.delete(table).where(
            table.c.last_heartbeat_at < now - dead_after,
            table.c.id.not_in(holding),
        )
    )
    return int(result.rowcount or 0)


def worker_rows(connection: sa.Connection, table: sa.Table) -> Sequence[Any]:
    """Every registered worker, oldest heartbeat first (for status and tests)."""
    return connection.execute(
        sa.select(table).order_by(table.c.last_heartbeat_at, table.c.id)
    ).all()


def workers_with_executions(
    connection: sa.Connection, table: sa.Table, execution_table: sa.Table
) -> Sequence[Any]:
    """Every registered worker with its number of ``in_progress`` executions.

    Rows have the worker's columns and ``in_progress``, oldest heartbeat first
    (R-WRK-09).
    """
    holding = (
        sa.select(sa.func.count())
        .select_from(execution_table)
        .where(
            execution_table.c.worker_id == table.c.id,
            execution_table.c.state == StepExecutionState.IN_PROGRESS.value,
        )
        .scalar_subquery()
    )
    return connection.execute(
        sa.select(table, holding.label("in_progress")).order_by(
            table.c.last_heartbeat_at, table.c.id
        )
    ).all()


def count_abandoned(
    connection: sa.Connection,
    table: sa.Table,
    execution_table: sa.Table,
    *,
    now: datetime,
    dead_after: timedelta,
) -> int:
    """``in_progress`` executions whose worker is dead or gone (R-WRK-09)."""
    columns = execution_table.c
    count = connection.scalar(
        sa.select(sa.func.count())
        .select_from(execution_table)
        .where(
            columns.state == StepExecutionState.IN_PROGRESS.value,
            columns.worker_id.is_not(None),
            columns.worker_id.not_in(live_worker_ids(table, now, dead_after)),
        )
    )
    return int(count or 0)
