"""Every SQL statement on ``geneva_drive_signals``, and the waiting executions' reads.

Workflow signals (SPEC §23) are external events delivered to one workflow; a
``wait_for`` step claims them at its gate. The engine
(:mod:`flask_geneva.engine.workflow_signals.delivery`) calls these named functions with
the
workflow row already locked by :func:`flask_geneva.db.locks.lock_workflow`, so the
sender, the gate and operators on one workflow are serialized by that lock
(R-WSIG-30). A signal's state changes are guarded UPDATEs (``AND state =
:expected``); the count of rows written tells whether it applied (R-DM-40).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db.optional_columns import cached_statement
from flask_geneva.db.optional_columns import undefer_options
from flask_geneva.db.queries.models import hero_criteria
from flask_geneva.db.queries.models import rows_of_workflow
from flask_geneva.db.sqlite import write_transaction
from flask_geneva.db.states import SIGNAL_KEY_INDEX
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowSignalState
from flask_geneva.db.states import WorkflowState

__all__ = [
    "WORKFLOW_STATE_INDEX",
    "claim_signal",
    "claimed_signal_for_step",
    "consume_claimed_signals",
    "count_pending_signals",
    "end_signals_of_workflows",
    "ended_workflow_id_with_key",
    "insert_signal",
    "lock_waiting_execution",
    "lost_wake_ids",
    "pending_signals",
    "signal_by_key",
    "signal_wait_counts",
    "signal_wait_counts_by_type",
    "signals_of_workflow",
    "timed_out_waiting_ids",
]

_PENDING = WorkflowSignalState.PENDING.value
_CLAIMED = WorkflowSignalState.CLAIMED.value
_CONSUMED = WorkflowSignalState.CONSUMED.value
_EXPIRED = WorkflowSignalState.EXPIRED.value
#: The step executions index a sender's locking read scans on MySQL/MariaDB.
WORKFLOW_STATE_INDEX = "index_geneva_drive_step_executions_on_workflow_id_and_state"


def signal_by_key(
    session: orm.Session,
    signal_cls: Any,
    workflow_id: Any,
    key: str,
    *,
    lock: bool = False,
) -> Any:
    """The workflow's signal with idempotency key ``key``, or None (R-WSIG-22).

    Args:
        lock: A locking read, which sees the newest committed row even in a
            REPEATABLE READ snapshot taken earlier (MariaDB/MySQL): after the
            unique index refused a duplicate, the row is there. The first check
            is a plain read, which takes no gap lock for a key not there yet.
    """
    statement = (
        sa.select(signal_cls)
        .where(signal_cls.workflow_id == workflow_id)
        .where(signal_cls.idempotency_key == key)
        .execution_options(populate_existing=True)
    )
    if lock:
        statement = statement.with_for_update()
    return session.scalars(statement).first()


def ended_workflow_id_with_key(
    session: orm.Session,
    workflow_cls: Any,
    signal_cls: Any,
    workflow_type: str,
    hero_type: Any,
    hero_id: Any,
    key: str,
) -> Any:
    """The id of the hero's ended workflow that received ``key``, or None (R-WSIG-71).

    Among the hero's finished or canceled workflows of ``workflow_type`` not
    created with ``allow_multiple`` (those ``signal_hero`` signals), the newest
    one holding a signal with idempotency key ``key``. A plain read: the caller
    then locks that workflow and checks again (R-WSIG-24).

    Args:
        session: The session to read with.
        workflow_cls: The ``Workflow`` base class.
        signal_cls: The ``WorkflowSignal`` class.
        workflow_type: The stored ``type`` value.
        hero_type: The stored hero type, or None.
        hero_id: The stored hero id, or None.
        key: The idempotency key.
    """
    return session.scalar(
        sa.select(workflow_cls.id)
        .join(signal_cls, signal_cls.workflow_id == workflow_cls.id)
        .where(workflow_cls.type == workflow_type)
        .where(*hero_criteria(workflow_cls, hero_type, hero_id))
        .where(workflow_cls.state.in_(TERMINAL_WORKFLOW_STATES))
        .where(workflow_cls.allow_multiple.is_(False))
        .where(signal_cls.idempotency_key == key)
        .order_by(workflow_cls.created_at.desc(), workflow_cls.id.desc())
        .limit(1)
    )


def count_pending_signals(
    session: orm.Session, signal_cls: Any, workflow_id: Any
) -> int:
    """How many ``pending`` signals the workflow buffers (R-WSIG-23)."""
    return int(
        session.scalar(
            sa.select(sa.func.count())
            .select_from(signal_cls)
            .where(signal_cls.workflow_id == workflow_id)
            .where(signal_cls.state == _PENDING)
        )
        or 0
    )


def insert_signal(session: orm.Session, signal: Any) -> bool:
    """INSERT ``signal`` in a savepoint; False if its idempotency key exists.

    The unique index on ``(workflow_id, idempotency_key)`` is the last word on
    duplicates (R-WSIG-22): a concurrent delivery that committed the same key
    after the caller's check makes this INSERT fail, and the savepoint leaves the
    caller's transaction usable.

    Raises:
        sqlalchemy.exc.IntegrityError: Any other constraint failed.
    """
    try:
        with session.begin_nested():
            session.add(signal)
            session.flush()
    except sa_exc.IntegrityError as error:
        text = str(error.orig)
        if SIGNAL_KEY_INDEX in text or (
            "UNIQUE constraint failed" in text and "idempotency_key" in text
        ):
            return False
        raise
    return True


def pending_signals(
    session: orm.Session,
    signal_cls: Any,
    workflow_id: Any,
    names: Sequence[str] | None,
    *,
    limit: int,
) -> list[Any]:
    """The workflow's ``pending`` signals, oldest first (R-WSIG-13).

    Args:
        names: Only these names, or None for every name (a custom matcher).
        limit: At most this many (the pending cap, R-WSIG-23).

    The caller holds the workflow's row lock, which every sender takes before
    inserting, so no signal of this workflow commits meanwhile. A locking read
    nevertheless: it sees the newest committed rows even in a REPEATABLE READ
    snapshot taken before the workflow lock (MariaDB/MySQL), so a signal
    committed just before can never be missed and the step parked in vain
    (R-WSIG-30).
    """
    statement = (
        sa.select(signal_cls)
        .where(signal_cls.workflow_id == workflow_id)
        .where(signal_cls.state == _PENDING)
        .order_by(signal_cls.created_at, signal_cls.id)
        .limit(limit)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if names is not None:
        statement = statement.where(signal_cls.name.in_(list(names)))
    return list(session.scalars(statement))


def claimed_signal_for_step(
    session: orm.Session, signal_cls: Any, workflow_id: Any, step_name: str
) -> Any:
    """The signal the step claimed and has not consumed yet, or None (R-WSIG-14).

    A reattempt, ``resume()``, recovery or a resumable successor of a
    ``wait_for`` step re-reads it here instead of claiming another.
    """
    return session.scalars(
        sa.select(signal_cls)
        .where(signal_cls.workflow_id == workflow_id)
        .where(signal_cls.state == _CLAIMED)
        .where(signal_cls.step_name == step_name)
        .order_by(signal_cls.claimed_at, signal_cls.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).first()


def claim_signal(
    session: orm.Session, signal: Any, step_name: str, now: datetime
) -> bool:
    """Move ``signal`` from ``pending`` to ``claimed`` for ``step_name``, guarded.

    Returns:
        True if it was pending and is claimed now; False (nothing written) when
        it is no longer pending.
    """
    signal_cls = type(signal)
    result = session.execute(
        sa.update(signal_cls)
        .where(signal_cls.id == signal.id)
        .where(signal_cls.state == _PENDING)
        .values(state=_CLAIMED, step_name=step_name, claimed_at=now, updated_at=now)
        .execution_options(synchronize_session="evaluate")
    )
    return int(result.rowcount or 0) == 1  # type: ignore[attr-defined]


def consume_claimed_signals(
    session: orm.Session,
    signal_cls: Any,
    workflow_id: Any,
    now: datetime,
    *,
    step_name: str | None = None,
) -> int:
    """Move the workflow's ``claimed`` signals to ``consumed``, guarded (R-WSIG-15).

    Args:
        step_name: Only those the step claimed; None for every one (the
            workflow ended).

    Returns:
        The number of signals consumed.
    """
    statement = (
        sa.update(signal_cls)
        .where(signal_cls.workflow_id == workflow_id)
        .where(signal_cls.state == _CLAIMED)
        .values(state=_CONSUMED, consumed_at=now, updated_at=now)
        .execution_options(synchronize_session="evaluate")
    )
    if step_name is not None:
        statement = statement.where(signal_cls.step_name == step_name)
    return int(session.execute(statement).rowcount or 0)  # type: ignore[attr-defined]


def end_signals_of_workflows(
    session: orm.Session, signal_cls: Any, workflow_ids: Sequence[Any], now: datetime
) -> int:
    """End the signals of workflows that just ended (R-WSIG-15, R-WSIG-34).

    One guarded UPDATE: ``claimed`` signals become ``consumed`` (``consumed_at``
    = now), ``pending`` ones ``expired`` (no step will ever claim them);
    ``updated_at`` = now. The caller holds the workflows' row locks, which every
    sender takes before inserting, so no signal of theirs commits meanwhile.
    Loaded instances of the affected signals are expired in the session (the
    ORM cannot evaluate the CASE in memory).

    Returns:
        The number of signals ended.
    """
    table = signal_cls.__table__
    # Core on the session's connection, as geneva writes its other rows
    # (R-DM-41): no ORM execution around a statement on a table.
    result = session_sync.connection_of(session).execute(
        cached_statement(("end-signals", table), lambda: _end_signals_statement(table)),
        {"geneva_workflow_ids": list(workflow_ids), "geneva_now": now},
    )
    ended = int(result.rowcount or 0)
    if ended:
        ids = set(workflow_ids)
        for instance in list(session.identity_map.values()):
            if isinstance(instance, signal_cls) and instance.workflow_id in ids:
                session.expire(instance)
    return ended


def _end_signals_statement(table: sa.Table) -> Any:
    """The UPDATE of :func:`end_signals_of_workflows`, built once per table.

    Its values are bound parameters (``geneva_workflow_ids``, expanding, and
    ``geneva_now``), so a workflow's end builds no statement of its own.
    """
    columns = table.c
    claimed = columns.state == _CLAIMED
    now = sa.bindparam("geneva_now", type_=columns.updated_at.type)
    return (
        sa.update(table)
        .where(
            columns.workflow_id.in_(sa.bindparam("geneva_workflow_ids", expanding=True))
        )
        .where(columns.state.in_((_PENDING, _CLAIMED)))
        # consumed_at first: MySQL/MariaDB evaluate SET assignments left to
        # right, so a CASE after the state assignment would see the new state.
        .ordered_values(
            (columns.consumed_at, sa.case((claimed, now), else_=columns.consumed_at)),
            (columns.updated_at, now),
            (columns.state, sa.case((claimed, _CONSUMED), else_=_EXPIRED)),
        )
    )


def lock_waiting_execution(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> Any:
    """Lock and return the workflow's ``waiting`` execution, or None (R-WSIG-11).

    The caller holds the workflow lock (taken first, SPEC §7). On MySQL/MariaDB
    the locking read is made to scan the ``(workflow_id, state)`` index: with
    few parked rows the optimizer picks the ``state`` index instead, whose
    next-key locks cover every ``waiting`` entry of every workflow, so each
    concurrent park (an insert into that range) waited for this sender and
    two of them deadlocked with a gate's gap lock on the signals index (the
    1,000-round race, R-WSIG-30). On the workflow's own index range the locks
    stay within this workflow's entries.
    """
    write_transaction(session)
    statement = (
        sa.select(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.state == StepExecutionState.WAITING.value)
        .options(*undefer_options(session, None, execution_cls))
        .order_by(execution_cls.created_at, execution_cls.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    for dialect in ("mysql", "mariadb"):
        statement = statement.with_hint(
            execution_cls, f"FORCE INDEX ({WORKFLOW_STATE_INDEX})", dialect
        )
    return session.scalars(statement).first()


def timed_out_waiting_ids(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    now: datetime,
    *,
    limit: int,
) -> list[Any]:
    """Ids of ``waiting`` executions past their ``wait_deadline`` (R-WSIG-40).

    Only those of ``ready`` workflows: a paused workflow's parked step waits for
    ``resume()``. Oldest deadline first; served by the ``(state,
    wait_deadline)`` index.
    """
    return list(
        session.scalars(
            sa.select(execution_cls.id)
            .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
            .where(execution_cls.state == StepExecutionState.WAITING.value)
            .where(execution_cls.wait_deadline <= now)
            .where(workflow_cls.state == WorkflowState.READY.value)
            .order_by(execution_cls.wait_deadline, execution_cls.id)
            .limit(limit)
        )
    )


def lost_wake_ids(
    session: orm.Session,
    execution_cls: Any,
    before: datetime,
    deferred_job_id: str,
    *,
    since: datetime,
    limit: int,
) -> list[Any]:
    """Ids of woken executions still ``scheduled`` since before ``before`` (R-WSIG-31).

    A woken execution keeps its ``waiting_since``; one that no worker claimed
    since ``before`` may have lost its publication (the sender died between
    its commit and the broker). Deferred rows are the dispatcher's own. Only
    rows due at or after ``since`` are read (each re-publication moves the due
    time to now; older rows are housekeeping's stuck-scheduled recovery's,
    R-HK-20), so that the read is a bounded range of the ``(state,
    scheduled_for)`` index however many paused workflows keep an overdue
    execution (issue 40).
    """
    return list(
        session.scalars(
            sa.select(execution_cls.id)
            .where(execution_cls.state == StepExecutionState.SCHEDULED.value)
            .where(execution_cls.waiting_since.is_not(None))
            .where(execution_cls.scheduled_for <= before)
            .where(execution_cls.scheduled_for >= since)
            .where(execution_cls.job_id != deferred_job_id)
            .order_by(execution_cls.scheduled_for, execution_cls.id)
            .limit(limit)
        )
    )


#: Every signal of the workflow, oldest first (tests, operators).
signals_of_workflow = rows_of_workflow


def signal_wait_counts(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    signal_cls: Any,
    *,
    long_before: datetime,
) -> tuple[int, int, int, datetime | None]:
    """What the signal gauges and ``flask geneva status`` show (R-WSIG-65).

    Returns:
        ``(waiting executions, those waiting since before long_before,
        pending signals of ongoing workflows, the oldest such signal's
        created_at or None)``: the sums over
        :func:`signal_wait_counts_by_type`.
    """
    per_type = signal_wait_counts_by_type(
        session, workflow_cls, execution_cls, signal_cls, long_before=long_before
    )
    oldest = [counts[3] for counts in per_type.values() if counts[3] is not None]
    return (
        sum(counts[0] for counts in per_type.values()),
        sum(counts[1] for counts in per_type.values()),
        sum(counts[2] for counts in per_type.values()),
        min(oldest) if oldest else None,
    )


def signal_wait_counts_by_type(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    signal_cls: Any,
    *,
    long_before: datetime,
) -> dict[str, tuple[int, int, int, datetime | None]]:
    """The counts of :func:`signal_wait_counts` per type (R-WSIG-65, R-OMET-20).

    Two grouped statements (parked executions, pending signals), each joined to
    the workflows for their ``type``.

    Returns:
        ``{type: (waiting, waiting long, pending signals, oldest pending
        created_at or None)}`` for every type with a parked execution or a
        pending signal of an ongoing workflow; others are absent.
    """
    waiting = execution_cls.state == StepExecutionState.WAITING.value
    long_wait = sa.case((execution_cls.waiting_since < long_before, 1), else_=0)
    waits = session.execute(
        sa.select(
            workflow_cls.type,
            sa.func.count(),
            sa.func.coalesce(sa.func.sum(long_wait), 0),
        )
        .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
        .where(waiting)
        .group_by(workflow_cls.type)
    ).all()
    pending = session.execute(
        sa.select(
            workflow_cls.type, sa.func.count(), sa.func.min(signal_cls.created_at)
        )
        .join(workflow_cls, workflow_cls.id == signal_cls.workflow_id)
        .where(signal_cls.state == _PENDING)
        .where(
            workflow_cls.state.not_in(
                (WorkflowState.FINISHED.value, WorkflowState.CANCELED.value)
            )
        )
        .group_by(workflow_cls.type)
    ).all()
    counts: dict[str, tuple[int, int, int, datetime | None]] = {}
    for workflow_type, count, long_count in waits:
        counts[str(workflow_type)] = (int(count), int(long_count), 0, None)
    for workflow_type, count, oldest in pending:
        parked, parked_long, _, _ = counts.get(str(workflow_type), (0, 0, 0, None))
        counts[str(workflow_type)] = (parked, parked_long, int(count), oldest)
    return counts
