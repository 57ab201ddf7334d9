"""The worker registry table and every SQL statement on it (R-WRK-01..08).

``geneva_drive_workers`` holds one row per process that executes steps: who it
is (hostname, pid, Celery node name, queues, library version), when it started
and when it last proved it is alive (``last_heartbeat_at``). The heartbeat
thread of :mod:`flask_geneva.engine.workers.registry` writes it; recovery reads it
(:func:`abandoned_criteria`). The table is optional: without the
``add_worker_registry`` install unit nothing here is called (R-WRK-08).

Heartbeats are written and judged with the database's clock
(:class:`~flask_geneva.db.database_time.DatabaseTime`, R-WRK-15), never a
process's: a worker whose clock lags, or a recovering host whose clock runs
ahead, cannot make a live worker look dead. A worker is dead only when its
heartbeat is older than the dead-after both by the database's clock and
relative to the newest heartbeat of any worker
(:func:`dead_heartbeat`, R-WRK-14): after a database outage longer than the
dead-after every worker looks stale, and none is judged dead until some worker
has written a heartbeat again.

Each worker may record its own dead-after (``dead_after_ms``, the
``add_worker_dead_after`` unit, R-WRK-17). A row is judged with the greater of
the judge's ``GENEVA_WORKER_DEAD_AFTER`` and its own value (NULL, or a table
without the column: the judge's), so a process configured with a shorter
dead-after than a worker heartbeats for can slow recovery, never kill that
worker's running steps. A table passed without the column (the database lacks
the unit, :func:`without_dead_after`) is judged as before.

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

from flask_geneva.core.publications import RELEASED_JOB_ID_PREFIX
from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.database_time import DatabaseTime
from flask_geneva.db.states import WORKERS_TABLE
from flask_geneva.db.states import StepExecutionState

__all__ = [
    "DEAD_AFTER_COLUMN",
    "DatabaseTime",
    "WorkerIdentity",
    "abandoned_criteria",
    "age_heartbeat",
    "alive_heartbeat",
    "count_abandoned",
    "dead_heartbeat",
    "delete_worker",
    "held_executions",
    "insert_worker",
    "last_heartbeat",
    "live_worker_ids",
    "newest_heartbeat_age",
    "prune_dead_workers",
    "release_executions",
    "released_criterion",
    "touch_worker",
    "without_dead_after",
    "worker_liveness",
    "worker_row",
    "worker_rows",
    "workers_table",
    "workers_with_executions",
]

#: The optional column of the ``add_worker_dead_after`` unit: the worker's own
#: ``GENEVA_WORKER_DEAD_AFTER`` in milliseconds, NULL when unknown (R-WRK-17).
DEAD_AFTER_COLUMN = "dead_after_ms"


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
        dead_after: The worker's own ``GENEVA_WORKER_DEAD_AFTER``, recorded
            with its row when the table has the column (R-WRK-17); None to
            record none.
    """

    worker_id: str
    hostname: str
    pid: int
    node_name: str | None
    queues: tuple[str, ...]
    library_version: str
    dead_after: timedelta | None = None


def newest_heartbeat_age(
    connection: sa.Connection, table: sa.Table
) -> timedelta | None:
    """How long ago, by the database's clock, any worker last heartbeat (R-WRK-14).

    Returns:
        The age of the newest heartbeat, or None when no worker is registered.
    """
    row = connection.execute(
        sa.select(DatabaseTime().label("now"), _newest_heartbeat(table).label("newest"))
    ).one()
    if row.newest is None:
        return None
    age: timedelta = row.now - row.newest
    return age


def _newest_heartbeat(table: sa.Table) -> Any:
    # A derived table: MySQL refuses a DELETE whose subquery reads the table
    # deleted from, unless the subquery is materialized.
    other = table.alias("other_worker")
    newest = sa.select(sa.func.max(other.c.last_heartbeat_at).label("newest")).subquery(
        "newest_heartbeat"
    )
    return sa.select(newest.c.newest).scalar_subquery()


def dead_heartbeat(table: sa.Table, dead_after: timedelta) -> Any:
    """Criterion of a dead worker row of ``table`` (R-WRK-06, R-WRK-14).

    Its ``last_heartbeat_at`` is older than ``dead_after`` by the database's
    clock and older than the newest heartbeat of any worker minus
    ``dead_after``: some worker heartbeated after it stopped. After a database
    outage every worker looks stale by the clock, and none is dead until one
    of them heartbeats again.
    """
    beat = table.c.last_heartbeat_at
    return sa.and_(
        beat < _minus_dead_after(None, table, dead_after),
        beat < _minus_dead_after(_newest_heartbeat(table), table, dead_after),
    )


def alive_heartbeat(table: sa.Table, dead_after: timedelta) -> Any:
    """Criterion of a live worker row of ``table``: not :func:`dead_heartbeat`."""
    beat = table.c.last_heartbeat_at
    return sa.or_(
        beat >= _minus_dead_after(None, table, dead_after),
        beat >= _minus_dead_after(_newest_heartbeat(table), table, dead_after),
    )


def _minus_dead_after(base: Any, table: sa.Table, dead_after: timedelta) -> Any:
    """``base`` (None: the database's now) minus the row's effective dead-after.

    The effective dead-after is the greater of ``dead_after`` (the judge's
    setting) and the row's own ``dead_after_ms``; NULL, or a table without the
    column, gives ``dead_after`` (R-WRK-17). A CASE rather than GREATEST:
    SQLite has none, and PostgreSQL's ignores NULL while MariaDB's returns it.
    """
    own = table.c.get(DEAD_AFTER_COLUMN)
    if own is None:
        return DatabaseTime(base, dead_after)
    configured = sa.literal(_milliseconds(dead_after), sa.BigInteger())
    effective = sa.case((own > configured, own), else_=configured)
    return DatabaseTime(base, minus_ms=effective)


def _milliseconds(duration: timedelta) -> int:
    # Rounded up: a judge never uses less than its setting.
    return -(-duration // timedelta(milliseconds=1))


def workers_table(metadata: sa.MetaData) -> sa.Table:
    """Return the ``geneva_drive_workers`` table of ``metadata``, defining it once.

    :func:`flask_geneva.models.factory.build_models` calls it with the host's
    ``db.metadata``, so ``db.create_all()`` creates it with the other two tables
    and the install unit ``add_worker_registry`` matches it (R-WRK-01).
    """
    existing = metadata.tables.get(WORKERS_TABLE)
    if existing is not None:
        return existing
    return _define_table(metadata, with_dead_after=True)


def without_dead_after(table: sa.Table) -> sa.Table:
    """``table`` as it is without the ``add_worker_dead_after`` unit (R-WRK-17).

    A copy without the ``dead_after_ms`` column, defined once per table (kept
    in ``table.info``) in a metadata of its own: statements on it neither read
    nor write the column, and liveness uses the judge's dead-after alone.
    """
    if DEAD_AFTER_COLUMN not in table.c:
        return table
    reduced: sa.Table | None = table.info.get("geneva_without_dead_after")
    if reduced is None:
        reduced = _define_table(sa.MetaData(), with_dead_after=False)
        table.info["geneva_without_dead_after"] = reduced
    return reduced


def _define_table(metadata: sa.MetaData, *, with_dead_after: bool) -> sa.Table:
    optional = (
        [sa.Column(DEAD_AFTER_COLUMN, sa.BigInteger(), nullable=True)]
        if with_dead_after
        else []
    )
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
        *optional,
        sa.Index(
            "index_geneva_drive_workers_on_last_heartbeat_at", "last_heartbeat_at"
        ),
    )


def insert_worker(
    connection: sa.Connection, table: sa.Table, identity: WorkerIdentity
) -> None:
    """INSERT the worker's row, started and last seen now (R-WRK-02).

    The time is the database's (R-WRK-15). The worker's own dead-after is
    written when the table has its column (R-WRK-17).
    """
    now = DatabaseTime()
    own: dict[str, Any] = {}
    if DEAD_AFTER_COLUMN in table.c and identity.dead_after is not None:
        own[DEAD_AFTER_COLUMN] = _milliseconds(identity.dead_after)
    connection.execute(
        sa.insert(table).values(
            **own,
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


def touch_worker(connection: sa.Connection, table: sa.Table, worker_id: str) -> bool:
    """Record a heartbeat at the database's current time (R-WRK-03, R-WRK-15).

    Returns:
        False when the row is gone (pruned as dead): the caller inserts it again.
    """
    result = connection.execute(
        sa.update(table)
        .where(table.c.id == worker_id)
        .values(last_heartbeat_at=DatabaseTime())
    )
    return bool(result.rowcount)


def age_heartbeat(
    connection: sa.Connection, table: sa.Table, worker_id: str, age: timedelta
) -> None:
    """Set the worker's last heartbeat to ``age`` before the database's now.

    For tests and benchmarks that need a worker whose heartbeats stopped.
    """
    connection.execute(
        sa.update(table)
        .where(table.c.id == worker_id)
        .values(last_heartbeat_at=DatabaseTime(None, age))
    )


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


def worker_liveness(
    connection: sa.Connection, table: sa.Table, worker_id: str, dead_after: timedelta
) -> tuple[datetime, bool] | None:
    """``(last heartbeat, alive)`` of the worker, or None when it is not registered.

    ``alive`` is judged in SQL with the database's clock and the newest
    heartbeat of any worker (:func:`alive_heartbeat`, R-WRK-14/15).
    """
    row = connection.execute(
        sa.select(
            table.c.last_heartbeat_at,
            sa.case((alive_heartbeat(table, dead_after), True), else_=False).label(
                "alive"
            ),
        ).where(table.c.id == worker_id)
    ).first()
    if row is None:
        return None
    return row.last_heartbeat_at, bool(row.alive)


def live_worker_ids(table: sa.Table, dead_after: timedelta) -> Any:
    """SELECT of the ids of live workers (:func:`alive_heartbeat`, R-WRK-14)."""
    return sa.select(table.c.id).where(alive_heartbeat(table, dead_after))


def _gone_is_dead(table: sa.Table) -> Any:
    # A worker missing from the registry (deregistered, or pruned) is dead only
    # when some worker has a row: an empty registry is no evidence (R-WRK-14).
    return sa.exists(sa.select(table.c.id))


def abandoned_criteria(
    execution: Any,
    table: sa.Table,
    *,
    now: datetime,
    dead_after: timedelta,
    age_threshold: timedelta,
) -> Any:
    """WHERE clause of an abandoned ``in_progress`` execution (R-WRK-05/06).

    An execution that names a worker is abandoned when that worker is dead
    (:func:`dead_heartbeat`: no heartbeat for ``dead_after`` by the database's
    clock while another worker heartbeated after it, R-WRK-14/15) or is gone
    from a registry that lists some worker, whatever the step's age; while its
    worker is alive it never is. An execution without a
    worker (claimed before the upgrade, or outside a registered worker) keeps
    the age rule: ``started_at`` earlier than ``now - age_threshold`` (R-HK-20),
    unless its live worker released it (:func:`released_criterion`): then it
    is abandoned at once (R-FLT-11).

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
        table: The workers table.
        now: The reference time of the age rule (aware UTC); liveness uses the
            database's clock.
        dead_after: ``GENEVA_WORKER_DEAD_AFTER``.
        age_threshold: ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``.
    """
    return sa.or_(
        sa.and_(
            execution.worker_id.is_(None),
            sa.or_(
                execution.started_at < now - age_threshold,
                released_criterion(execution),
            ),
        ),
        sa.and_(
            execution.worker_id.is_not(None),
            execution.worker_id.not_in(live_worker_ids(table, dead_after)),
            _gone_is_dead(table),
        ),
    )


def prune_dead_workers(
    connection: sa.Connection,
    table: sa.Table,
    execution_table: sa.Table,
    *,
    dead_after: timedelta,
) -> int:
    """DELETE dead workers that hold no ``in_progress`` execution (R-WRK-07).

    A dead worker that still holds one stays listed until recovery has moved
    the execution on, so operators see which worker abandoned it.

    Returns:
        The number of rows deleted.
    """
    holding: Any = sa.select(execution_table.c.worker_id).where(
        execution_table.c.state == StepExecutionState.IN_PROGRESS.value,
        execution_table.c.worker_id.is_not(None),
    )
    if connection.dialect.name in ("mysql", "mariadb"):
        # InnoDB reads a DELETE's subquery with shared locks at every isolation
        # level: every in-progress execution would be locked, and pruning would
        # wait (or deadlock) for each running step's finalize (R-CFG-04). A
        # plain read takes no lock; a claim committed after it is missed as by
        # a statement snapshot on PostgreSQL.
        holding = sorted(set(connection.scalars(holding)))
    result = connection.execute(
        sa.delete(table).where(
            dead_heartbeat(table, dead_after),
            table.c.id.not_in(holding),
        )
    )
    return int(result.rowcount or 0)


def worker_row(connection: sa.Connection, table: sa.Table, worker_id: str) -> Any:
    """The worker's row (node, host, pid, last heartbeat), or None when it is not
    registered (R-HK-29)."""
    return connection.execute(
        sa.select(
            table.c.node_name,
            table.c.hostname,
            table.c.pid,
            table.c.last_heartbeat_at,
        ).where(table.c.id == worker_id)
    ).first()


def worker_rows(connection: sa.Connection, table: sa.Table) -> Sequence[Any]:
    """Every registered worker, oldest heartbeat first (for status and tests)."""
    return connection.execute(
        sa.select(table).order_by(table.c.last_heartbeat_at, table.c.id)
    ).all()


def workers_with_executions(
    connection: sa.Connection,
    table: sa.Table,
    execution_table: sa.Table,
    *,
    dead_after: timedelta,
) -> Sequence[Any]:
    """Every registered worker with its number of ``in_progress`` executions.

    Rows have the worker's columns, ``in_progress`` and ``alive``
    (:func:`alive_heartbeat`), oldest heartbeat first (R-WRK-09).
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
        sa.select(
            table,
            holding.label("in_progress"),
            sa.case((alive_heartbeat(table, dead_after), True), else_=False).label(
                "alive"
            ),
        ).order_by(table.c.last_heartbeat_at, table.c.id)
    ).all()


def count_abandoned(
    connection: sa.Connection,
    table: sa.Table,
    execution_table: sa.Table,
    *,
    dead_after: timedelta,
) -> int:
    """``in_progress`` executions whose worker is dead or gone (R-WRK-09, R-WRK-14)."""
    columns = execution_table.c
    count = connection.scalar(
        sa.select(sa.func.count())
        .select_from(execution_table)
        .where(
            columns.state == StepExecutionState.IN_PROGRESS.value,
            columns.worker_id.is_not(None),
            columns.worker_id.not_in(live_worker_ids(table, dead_after)),
            _gone_is_dead(table),
        )
    )
    return int(count or 0)


def held_executions(
    connection: sa.Connection,
    execution_table: sa.Table,
    worker_id: str,
    *,
    started_before: timedelta,
) -> list[Any]:
    """Ids of the worker's ``in_progress`` executions started ``started_before`` ago.

    The age is judged against the database's clock (R-WRK-15), so an execution
    claimed a moment ago is never a candidate for a release (R-WRK-18). A plain
    read: it locks nothing and waits for no lock.
    """
    columns = execution_table.c
    return list(
        connection.scalars(
            sa.select(columns.id)
            .where(
                columns.worker_id == worker_id,
                columns.state == StepExecutionState.IN_PROGRESS.value,
                columns.started_at < DatabaseTime(None, started_before),
            )
            .order_by(columns.id)
        )
    )


def released_criterion(execution: Any) -> Any:
    """WHERE clause of an execution its live worker released (R-WRK-18, R-FLT-11).

    Its ``job_id`` starts with
    :data:`~flask_geneva.core.publications.RELEASED_JOB_ID_PREFIX`.

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
    """
    return execution.job_id.startswith(RELEASED_JOB_ID_PREFIX, autoescape=True)


def release_executions(
    connection: sa.Connection,
    execution_table: sa.Table,
    worker_id: str,
    execution_ids: Sequence[Any],
) -> int:
    """Release the worker's ``in_progress`` executions (R-WRK-18, R-FLT-11).

    ``worker_id`` becomes NULL and ``job_id`` the released marker naming the
    worker (:data:`~flask_geneva.core.publications.RELEASED_JOB_ID_PREFIX`
    followed by its id), so the next dispatcher run recovers them
    (:func:`abandoned_criteria`). Guarded: only rows still ``in_progress`` and
    still naming ``worker_id`` are changed, so a row recovered or finished
    meanwhile is left alone.

    Returns:
        The number of rows released.
    """
    if not execution_ids:
        return 0
    columns = execution_table.c
    result = connection.execute(
        sa.update(execution_table)
        .where(
            columns.id.in_(list(execution_ids)),
            columns.worker_id == worker_id,
            columns.state == StepExecutionState.IN_PROGRESS.value,
        )
        .values(worker_id=None, job_id=f"{RELEASED_JOB_ID_PREFIX}{worker_id}")
    )
    return int(result.rowcount or 0)
