"""The statements of the background jobs: housekeeping, the dispatcher, the outbox.

Part of the store layer (issue 15: every statement on geneva's two tables is
built in the store modules, ``tests/test_sql_ownership.py``). The jobs in
:mod:`flask_geneva.engine.operators.housekeeping`,
:mod:`flask_geneva.engine.operators.dispatcher` and
:mod:`flask_geneva.engine.outbox` decide what to do; this module says how the rows are
found, counted, deleted and handed back, including the dialect quirks: the
literal ``LIMIT`` in a derived table for MySQL (R-HK-12), inlined states for the
partial indexes (R-DM-12), ``FOR UPDATE SKIP LOCKED`` where the database has it
(R-DSP-05), and SQLite's ``BEGIN IMMEDIATE`` (BTR-13).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.publications import LIMITED_JOB_ID
from flask_geneva.db import sqlite as sqlite_locking
from flask_geneva.db import workers as worker_rows
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState

__all__ = [
    "cleanup_id_selects",
    "count_deferred",
    "count_workflows_by_type_and_state",
    "delete_ended_child_counts",
    "delete_ended_workflows",
    "delete_orphaned_child_counts",
    "due_deferred_executions",
    "hand_back_unpublished",
    "stuck_in_progress_candidates",
    "stuck_in_progress_criteria",
    "stuck_scheduled_candidates",
    "stuck_scheduled_criteria",
]


# -- cleanup (R-HK-10..13) -----------------------------------------------------------


def delete_ended_workflows(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    cutoff: datetime,
    *,
    batch_size: int,
    signal_cls: Any = None,
) -> tuple[int, int, int]:
    """Delete finished/canceled workflows that ended before ``cutoff``, in batches.

    Their workflow signals first (``signal_cls`` given: the table has no foreign
    key, so nothing else removes them, R-WSIG-63), then their executions, then
    the workflows (R-HK-10/11). Each batch is one
    bounded ``DELETE … WHERE id IN (SELECT id FROM (SELECT … LIMIT n) AS batch)``
    in its own committed transaction (R-HK-12); no row lock is held between
    batches.

    Args:
        session: The housekeeping session; committed after every batch.
        workflow_cls: The ``Workflow`` class.
        execution_cls: The ``StepExecution`` class.
        cutoff: Workflows whose ``transitioned_at`` is earlier are deleted.
        batch_size: Rows per DELETE (``GENEVA_HOUSEKEEPING_BATCH_SIZE``).
        signal_cls: The ``WorkflowSignal`` class when the ``add_workflow_signals``
            unit is installed, else None (no signal is touched).

    Returns:
        ``(workflows deleted, executions deleted, signals deleted)``.
    """
    selects = cleanup_id_selects(
        workflow_cls, execution_cls, cutoff, signal_cls=signal_cls
    )
    signals = 0
    if signal_cls is not None:
        signals = _delete_in_batches(
            session, signal_cls, selects["signals"], batch_size=batch_size
        )
    executions = _delete_in_batches(
        session, execution_cls, selects["executions"], batch_size=batch_size
    )
    workflows = _delete_in_batches(
        session,
        workflow_cls,
        selects["workflows"],
        batch_size=batch_size,
        still_eligible=_ended_before(workflow_cls, cutoff),
    )
    return workflows, executions, signals


def delete_ended_child_counts(
    session: orm.Session,
    workflow_cls: Any,
    counts_table: sa.Table,
    cutoff: datetime,
    *,
    batch_size: int,
) -> int:
    """Delete the child counts of workflows cleanup deletes, in batches (R-CHD-32).

    The rows of parents finished or canceled before ``cutoff`` (the cleanup's
    own rule, R-HK-11), except those still marked ``cancel_due_at``: the
    dispatcher cancels those parents' children first (R-CHD-31), with or
    without the parent's row. Each batch reads the parents' ids plainly along
    the workflows' ``transitioned_at`` index and deletes those rows by primary
    key in its own committed transaction.

    Returns:
        How many counts rows were deleted.
    """
    column = counts_table.c.parent_workflow_id
    select_batch = (
        sa.select(column)
        .join(workflow_cls, workflow_cls.id == column)
        .where(*_ended_before(workflow_cls, cutoff))
        .where(counts_table.c.cancel_due_at.is_(None))
        .limit(batch_size)
    )
    return _delete_counts_in_batches(
        session,
        counts_table,
        select_batch,
        counts_table.c.cancel_due_at.is_(None),
        batch_size=batch_size,
    )


def delete_orphaned_child_counts(
    session: orm.Session, workflow_cls: Any, counts_table: sa.Table, *, batch_size: int
) -> int:
    """Delete counts rows whose parent row was deleted outside cleanup (R-CHD-32).

    A parent deleted by the application (``session.delete(parent)``) leaves
    its counts row: no foreign key removes it. Rows without a parent and
    without a cancel mark (the dispatcher deletes a marked one itself, R-CHD-31)
    are read plainly (an anti-join over the counts table, one row per parent)
    and deleted by primary key, ``batch_size`` per committed transaction; a
    deleted parent never comes back, so nothing is re-checked.

    Returns:
        How many counts rows were deleted.
    """
    column = counts_table.c.parent_workflow_id
    parents = sa.select(workflow_cls.id).where(workflow_cls.id == column)
    select_batch = (
        sa.select(column)
        .where(counts_table.c.cancel_due_at.is_(None), ~parents.exists())
        .limit(batch_size)
    )
    return _delete_counts_in_batches(
        session, counts_table, select_batch, sa.true(), batch_size=batch_size
    )


def _delete_counts_in_batches(
    session: orm.Session,
    counts_table: sa.Table,
    select_batch: sa.Select[Any],
    still: Any,
    *,
    batch_size: int,
) -> int:
    """Read a batch of parent ids plainly, DELETE their counts rows where
    ``still`` holds, commit; until a batch comes back short (R-CHD-32)."""
    column = counts_table.c.parent_workflow_id
    total = 0
    while True:
        batch = list(session.scalars(select_batch))
        if batch:
            result = session.execute(
                sa.delete(counts_table).where(column.in_(batch)).where(still),
                execution_options={"synchronize_session": False},
            )
            total += int(result.rowcount or 0)  # type: ignore[attr-defined]
        session.commit()
        if len(batch) < batch_size:
            return total


def cleanup_id_selects(
    workflow_cls: Any, execution_cls: Any, cutoff: datetime, *, signal_cls: Any = None
) -> dict[str, sa.Select[Any]]:
    """The SELECTs of the ids each cleanup pass deletes, in pass order (R-HK-12).

    ``"signals"`` (when ``signal_cls`` is given), ``"executions"`` and
    ``"workflows"``: the rows of finished/canceled workflows whose
    ``transitioned_at`` is earlier than ``cutoff``. Each batch reads them with
    a LIMIT; they are served by the ``transitioned_at`` index of the workflows
    and the ``workflow_id`` indexes of the other tables (R-HK-14).
    """
    eligible = _ended_before(workflow_cls, cutoff)

    def of_eligible(row_cls: Any) -> sa.Select[Any]:
        return (
            sa.select(row_cls.id)
            .join(workflow_cls, workflow_cls.id == row_cls.workflow_id)
            .where(*eligible)
        )

    selects = {} if signal_cls is None else {"signals": of_eligible(signal_cls)}
    selects["executions"] = of_eligible(execution_cls)
    selects["workflows"] = sa.select(workflow_cls.id).where(*eligible)
    return selects


def _ended_before(workflow_cls: Any, cutoff: datetime) -> tuple[Any, ...]:
    """Finished or canceled before ``cutoff`` (R-HK-11)."""
    return (
        workflow_cls.state.in_(TERMINAL_WORKFLOW_STATES),
        workflow_cls.transitioned_at < cutoff,
    )


def _delete_in_batches(
    session: orm.Session,
    model: Any,
    ids: sa.Select[Any],
    *,
    batch_size: int,
    still_eligible: tuple[Any, ...] = (),
) -> int:
    """Delete the rows ``ids`` selects, ``batch_size`` per committed DELETE.

    Args:
        still_eligible: Conditions on ``model``'s own columns the DELETE
            re-checks on MySQL/MariaDB (the workflows pass), see below.

    On MySQL/MariaDB the batch's ids are read first by a plain ``SELECT`` (a
    consistent read, no lock) and the DELETE names them: InnoDB reads the
    tables of a DELETE's subquery with shared locks at every isolation level,
    so ``DELETE … WHERE id IN (SELECT … JOIN …)`` locked every live workflow
    and execution its scan passed, waited for their workers and operators and
    deadlocked with them (R-HK-12, R-CFG-04). The rows it reads belong to
    ended workflows, which no operation changes any more.
    """
    # Table-level DELETE: no ORM cascade or polymorphic filter is wanted here.
    table = model.__table__
    if session.get_bind().dialect.name in ("mysql", "mariadb"):
        return _delete_named_in_batches(
            session, table, ids, batch_size=batch_size, still_eligible=still_eligible
        )
    # A literal LIMIT inside a derived table: MySQL rejects LIMIT directly in an
    # IN (...) subquery and some drivers do not bind LIMIT parameters (R-HK-12).
    batch = ids.limit(sa.literal_column(str(int(batch_size)), sa.Integer)).subquery(
        "batch"
    )
    statement = sa.delete(table).where(
        table.c.id.in_(sa.select(batch.c.id).scalar_subquery())
    )
    total = 0
    while True:
        sqlite_locking.write_transaction(session)
        result = session.execute(
            statement, execution_options={"synchronize_session": False}
        )
        deleted = int(result.rowcount or 0)  # type: ignore[attr-defined]
        session.commit()
        total += deleted
        if deleted < batch_size:
            return total


def _delete_named_in_batches(
    session: orm.Session,
    table: sa.Table,
    ids: sa.Select[Any],
    *,
    batch_size: int,
    still_eligible: tuple[Any, ...],
) -> int:
    """MySQL/MariaDB: read a batch of ids without a lock, DELETE those rows."""
    select_batch = ids.limit(batch_size)
    total = 0
    while True:
        batch = list(session.scalars(select_batch))
        if batch:
            result = session.execute(
                sa.delete(table).where(table.c.id.in_(batch)).where(*still_eligible),
                execution_options={"synchronize_session": False},
            )
            total += int(result.rowcount or 0)  # type: ignore[attr-defined]
        session.commit()
        if len(batch) < batch_size:
            return total


# -- stuck execution recovery (R-HK-20..27) ------------------------------------------


def _inline(state: StepExecutionState) -> Any:
    """The state as an SQL literal, not a bound parameter.

    A partial index (``WHERE state = 'in_progress'``, R-DM-12) is only usable when
    the planner sees the value: SQLite never matches a parameter against an index
    predicate, and PostgreSQL's generic plans for prepared statements do not either.
    """
    return sa.literal(state.value, literal_execute=True)


def stuck_in_progress_criteria(
    execution: Any,
    threshold: timedelta,
    now: datetime,
    *,
    workers: sa.Table | None = None,
    dead_after: timedelta | None = None,
) -> list[Any]:
    """WHERE criteria of a stuck (abandoned) ``in_progress`` execution (R-HK-20).

    Without the worker registry (``workers`` None): ``started_at`` earlier than
    ``now`` minus the threshold (``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``). With
    it: an execution claimed by a registered worker is stuck when that worker
    missed its heartbeats for ``dead_after``, whatever its age; one without a
    worker keeps the age rule (R-WRK-06). Shared by recovery,
    ``flask geneva status`` and the admin, so they count the same rows.

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
        threshold: ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD``.
        now: The reference time (aware UTC).
        workers: The workers table when the registry exists, else None.
        dead_after: ``GENEVA_WORKER_DEAD_AFTER`` (needed with ``workers``).
    """
    in_progress = execution.state == _inline(StepExecutionState.IN_PROGRESS)
    if workers is None or dead_after is None:
        return [in_progress, execution.started_at < now - threshold]
    return [
        in_progress,
        worker_rows.abandoned_criteria(
            execution,
            workers,
            now=now,
            dead_after=dead_after,
            age_threshold=threshold,
        ),
    ]


def stuck_scheduled_criteria(
    execution: Any, threshold: timedelta, now: datetime
) -> list[Any]:
    """WHERE criteria of a ``scheduled`` execution overdue beyond the threshold.

    ``scheduled_for`` earlier than ``now`` minus the threshold
    (``GENEVA_STUCK_SCHEDULED_THRESHOLD``, R-HK-20). Recovery adds that the
    workflow is not paused (R-HK-27); the counts of ``flask geneva status`` and
    the admin overview do not.

    Args:
        execution: The ``StepExecution`` model or its table's columns (``.c``).
        threshold: ``GENEVA_STUCK_SCHEDULED_THRESHOLD``.
        now: The reference time (aware UTC).
    """
    return [
        execution.state == _inline(StepExecutionState.SCHEDULED),
        execution.scheduled_for < now - threshold,
        # A waiter for a limit's slot is never stuck: its wait is the limit's
        # (R-LIM-18); the transaction that frees a slot publishes it.
        sa.or_(execution.job_id.is_(None), execution.job_id != LIMITED_JOB_ID),
    ]


def stuck_in_progress_candidates(
    session: orm.Session,
    execution_cls: Any,
    *,
    threshold: timedelta,
    now: datetime,
    batch_size: int,
    workers: sa.Table | None = None,
    dead_after: timedelta | None = None,
    dead_workers_only: bool = False,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(execution id, workflow id)`` of stuck ``in_progress`` executions.

    Oldest ``started_at`` first, through the partial index of R-DM-12; keyset
    batches as :func:`_candidates` explains (R-HK-20, R-HK-21). With the worker
    registry the criteria are :func:`stuck_in_progress_criteria`'s liveness
    rule; ``dead_workers_only`` keeps the executions that name a worker
    and those a live worker released (the dispatcher's quick pass, R-WRK-06,
    R-FLT-11).
    """
    criteria = stuck_in_progress_criteria(
        execution_cls, threshold, now, workers=workers, dead_after=dead_after
    )
    if dead_workers_only:
        # R-FLT-11: and those a live worker released.
        criteria.append(
            sa.or_(
                execution_cls.worker_id.is_not(None),
                worker_rows.released_criterion(execution_cls),
            )
        )
    return _candidates(
        session,
        execution_cls,
        column=execution_cls.started_at,
        criteria=tuple(criteria),
        batch_size=batch_size,
    )


def stuck_scheduled_candidates(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    *,
    threshold: timedelta,
    now: datetime,
    batch_size: int,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(execution id, workflow id)`` of overdue ``scheduled`` executions.

    Oldest ``scheduled_for`` first; executions of paused workflows are left out,
    they are preserved for ``resume()`` (R-HK-20, R-HK-27).
    """
    paused = (
        sa.select(workflow_cls.id)
        .where(workflow_cls.id == execution_cls.workflow_id)
        .where(workflow_cls.state == WorkflowState.PAUSED)
        .exists()
    )
    return _candidates(
        session,
        execution_cls,
        column=execution_cls.scheduled_for,
        criteria=(
            *stuck_scheduled_criteria(execution_cls, threshold, now),
            ~paused,
        ),
        batch_size=batch_size,
    )


def _candidates(
    session: orm.Session,
    execution_cls: Any,
    *,
    column: Any,
    criteria: tuple[Any, ...],
    batch_size: int,
) -> Iterator[tuple[Any, Any]]:
    """Yield ``(execution id, workflow id)`` in ``(column, id)`` order, in batches.

    Keyset pagination: each batch starts after the last ``(column, id)`` of the
    previous one, so every row is yielded at most once even when its recovery
    failed or left it unchanged (R-HK-21). ``column >= last`` stays a plain range
    condition an index on ``column`` can serve; the tie-break is a filter. Each
    batch's read transaction is ended (rolled back) before its rows are yielded.
    """
    last: tuple[datetime, Any] | None = None
    while True:
        query = (
            sa.select(execution_cls.id, execution_cls.workflow_id, column)
            .where(*criteria)
            .order_by(column, execution_cls.id)
            .limit(batch_size)
        )
        if last is not None:
            last_value, last_id = last
            query = query.where(column >= last_value).where(
                sa.or_(column > last_value, execution_cls.id > last_id)
            )
        rows = session.execute(query).all()
        # End the read transaction: on SQLite it holds the write lock (BTR-13).
        session.rollback()
        if not rows:
            return
        for execution_id, workflow_id, _ in rows:
            yield execution_id, workflow_id
        last = (rows[-1][2], rows[-1][0])


# -- gauges (R-MET-01) ---------------------------------------------------------------


def count_workflows_by_type_and_state(
    session: orm.Session, workflow_cls: Any
) -> list[tuple[Any, Any, int]]:
    """``(type, state, count)`` rows from one grouped query (R-MET-01).

    Only the combinations present; ends the read transaction (rolls back).
    """
    table = workflow_cls.__table__
    rows = session.execute(
        sa.select(table.c.type, table.c.state, sa.func.count()).group_by(
            table.c.type, table.c.state
        )
    ).all()
    session.rollback()
    return [(row[0], row[1], int(row[2])) for row in rows]


# -- the dispatcher (R-DSP-01..06) ---------------------------------------------------


def workflow_with_job_options(
    session: orm.Session, execution_cls: Any, workflow_cls: Any
) -> Any:
    """Loader option: each execution's workflow from the query's join, with its
    metadata column (where it exists) loaded by the same statement.

    A publication reads the instance's job options from the metadata
    (R-JOB-04); deferred, the column would cost one ``SELECT`` per row
    published (issue 40).
    """
    eager = orm.contains_eager(execution_cls.workflow)
    if optional_columns(session).workflow_metadata:
        eager = eager.undefer(workflow_cls.meta)
    return eager


def due_deferred_executions(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    *,
    deferred_job_id: str,
    horizon: datetime,
    after: tuple[Any, Any] | None,
    batch_size: int,
) -> list[Any]:
    """Lock and load the next batch of deferred executions due by ``horizon``.

    ``scheduled`` rows with ``job_id = deferred_job_id`` of ``ready`` or
    ``performing`` workflows, ordered by ``(scheduled_for, id)``, starting after
    the keyset ``after`` (R-DSP-02). Starts a write transaction (BTR-13) and, on
    databases that have it, locks the rows with ``FOR UPDATE SKIP LOCKED``, so
    two dispatchers never send the same row (R-DSP-05). Each execution comes
    with its workflow loaded.

    Args:
        session: The dispatcher's session; the caller commits or rolls back.
        workflow_cls: The ``Workflow`` class.
        execution_cls: The ``StepExecution`` class.
        deferred_job_id: The dispatcher's ``job_id`` sentinel.
        horizon: Rows due at or before this time are returned.
        after: ``(scheduled_for, id)`` of the previous batch's last row, or None.
        batch_size: At most this many rows.
    """
    sqlite_locking.write_transaction(session)
    query = (
        sa.select(execution_cls)
        .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
        .where(execution_cls.state == StepExecutionState.SCHEDULED)
        .where(execution_cls.job_id == deferred_job_id)
        .where(execution_cls.scheduled_for <= horizon)
        .where(workflow_cls.state.in_((WorkflowState.READY, WorkflowState.PERFORMING)))
        .order_by(execution_cls.scheduled_for, execution_cls.id)
        .limit(batch_size)
        .options(workflow_with_job_options(session, execution_cls, workflow_cls))
    )
    if after is not None:
        query = query.where(
            execution_cls.scheduled_for >= after[0],
            sa.or_(
                execution_cls.scheduled_for > after[0],
                execution_cls.id > after[1],
            ),
        )
    if session.get_bind().dialect.name != "sqlite":
        # PostgreSQL (and MySQL 8) lock the execution rows only. MariaDB has no
        # FOR UPDATE OF (SQLAlchemy leaves OF out there; MariaDB 10.11 refuses
        # it as a syntax error), so it also locks the joined workflow rows until
        # the batch commits; with SKIP LOCKED it never waits, and a row whose
        # workflow is locked (an operator, a sender) waits for the next run.
        query = query.with_for_update(skip_locked=True, of=execution_cls)
    return list(session.scalars(query).unique())


def count_deferred(
    session: orm.Session, execution_cls: Any, *, deferred_job_id: str
) -> Any:
    """How many ``scheduled`` executions carry the dispatcher's ``job_id`` sentinel."""
    return session.scalar(
        sa.select(sa.func.count(execution_cls.id))
        .where(execution_cls.state == StepExecutionState.SCHEDULED)
        .where(execution_cls.job_id == deferred_job_id)
    )


# -- the outbox (R-DSP-02) -----------------------------------------------------------


def hand_back_unpublished(
    target: orm.Session | sa.Connection,
    execution_cls: Any,
    unpublished: list[tuple[Any, str]],
    *,
    marker: str,
) -> int:
    """Set ``job_id = marker`` on executions whose publication failed (R-DSP-02).

    Guarded: only a row still ``scheduled`` with the job id that failed changes,
    so an execution a worker already claimed (the message got through after all)
    or an operator changed is left alone.

    Args:
        target: A session (the update joins its open transaction; an ORM UPDATE,
            so loaded instances stay in step) or a connection in a transaction of
            its own (a Core UPDATE on the table).
        execution_cls: The ``StepExecution`` class.
        unpublished: ``(execution id, task id)`` pairs.
        marker: The dispatcher's ``job_id`` sentinel.

    Returns:
        How many rows changed.
    """
    changed = 0
    for execution_id, task_id in unpublished:
        if isinstance(target, orm.Session):
            result: Any = target.execute(
                sa.update(execution_cls)
                .where(execution_cls.id == execution_id)
                .where(execution_cls.job_id == task_id)
                .where(execution_cls.state == StepExecutionState.SCHEDULED)
                .values(job_id=marker)
            )
        else:
            table = execution_cls.__table__
            result = target.execute(
                sa.update(table)
                .where(table.c.id == execution_id)
                .where(table.c.job_id == task_id)
                .where(table.c.state == StepExecutionState.SCHEDULED.value)
                .values(job_id=marker)
            )
        changed += int(result.rowcount or 0)
    return changed
