"""Plain reads of geneva's two tables for the engine and the test helpers (issue 15).

Every statement on ``geneva_drive_workflows`` and ``geneva_drive_step_executions``
is built in the store layer (``tests/test_sql_ownership.py``); this module holds
the engine's unlocked reads: the uniqueness pre-check of a new workflow, the
iteration's pause/cancel poll, the resumable continuation of ``resume()``, the
reattempt counter of the exception policies, and the lookups of
:mod:`flask_geneva.testing`. Nothing here takes a row lock; locking reads are
in :mod:`flask_geneva.db.locks`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.optional_columns import undefer_options
from flask_geneva.db.states import ACTIVE_EXECUTION_STATES
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import Outcome
from flask_geneva.db.states import StepExecutionState

__all__ = [
    "canceled_latest_execution_of_step",
    "executed_step_id",
    "latest_completed_execution",
    "latest_failed_execution_of_step",
    "latest_pause_marker",
    "ongoing_duplicate_id",
    "step_attempt",
    "step_history",
    "step_names_in_flight",
    "workflow_ids_carrying",
    "workflow_state",
]


def ongoing_duplicate_id(
    session: orm.Session,
    workflow_cls: Any,
    workflow_type: str,
    hero_type: Any,
    hero_id: Any,
) -> Any:
    """The id of an ongoing workflow the unique index would refuse, or None (R-UNQ-06).

    Mirrors the partial unique index: same type and hero (NULL heroes compare
    equal here), not finished or canceled, ``allow_multiple`` false. Runs without
    autoflush, so the pending new workflow does not find itself.

    Args:
        session: The session creating the workflow.
        workflow_cls: The ``Workflow`` base class.
        workflow_type: The new workflow's stored ``type``.
        hero_type: The stored hero type, or None.
        hero_id: The stored hero id, or None.
    """
    query = (
        sa.select(workflow_cls.id)
        .where(workflow_cls.type == workflow_type)
        .where(
            workflow_cls.hero_type.is_(None)
            if hero_type is None
            else workflow_cls.hero_type == hero_type
        )
        .where(
            workflow_cls.hero_id.is_(None)
            if hero_id is None
            else workflow_cls.hero_id == hero_id
        )
        .where(workflow_cls.state.not_in(TERMINAL_WORKFLOW_STATES))
        .where(workflow_cls.allow_multiple.is_(False))
        .limit(1)
    )
    with session.no_autoflush:
        return session.scalar(query)


def workflow_state(session: orm.Session, workflow_cls: Any, workflow_id: Any) -> Any:
    """The workflow's stored state, read as a column (R-INT-05).

    A column query, so the instance the step body uses is never refreshed.
    Returns None when the row is gone.
    """
    return session.scalar(
        sa.select(workflow_cls.state).where(workflow_cls.id == workflow_id)
    )


def _latest_execution(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> sa.Select[Any]:
    return (
        sa.select(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .options(*undefer_options(session, None, execution_cls))
        .order_by(execution_cls.created_at.desc(), execution_cls.id.desc())
        .limit(1)
        # A locking read: under MySQL/MariaDB's REPEATABLE READ a plain SELECT
        # reads the snapshot the caller's transaction took before the workflow
        # lock, which can predate the marker a finalize committed meanwhile.
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def latest_pause_marker(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> Any:
    """The newest execution completed with outcome ``workflow_paused``, or None.

    The marker a paused resumable chain continues from (R-EXT-22 a).
    """
    return session.scalars(
        _latest_execution(session, execution_cls, workflow_id)
        .where(execution_cls.state == StepExecutionState.COMPLETED)
        .where(execution_cls.outcome == Outcome.WORKFLOW_PAUSED)
    ).first()


def latest_failed_execution_of_step(
    session: orm.Session, execution_cls: Any, workflow_id: Any, step_name: Any
) -> Any:
    """The newest ``failed`` execution of ``step_name``, or None (R-EXT-22 b)."""
    return session.scalars(
        _latest_execution(session, execution_cls, workflow_id)
        .where(execution_cls.state == StepExecutionState.FAILED)
        .where(execution_cls.step_name == step_name)
    ).first()


def canceled_latest_execution_of_step(
    session: orm.Session, execution_cls: Any, workflow_id: Any, step_name: Any
) -> Any:
    """The newest execution of ``step_name`` if it is ``canceled``, else None.

    A resumable step's successor delivered while its workflow was paused is
    canceled (R-EXE-12) with the cursor it was to continue from (R-EXT-22 c).
    """
    latest = session.scalars(
        _latest_execution(session, execution_cls, workflow_id).where(
            execution_cls.step_name == step_name
        )
    ).first()
    if latest is None or latest.state != StepExecutionState.CANCELED:
        return None
    return latest


def step_history(
    session: orm.Session,
    execution_cls: Any,
    workflow_id: Any,
    step_name: str,
    *,
    with_metadata: bool,
) -> list[Any]:
    """``(state, outcome[, meta])`` rows of one step's executions (R-CNT-02).

    Ordered by ``(created_at, id)``, the order the reattempt counter walks.

    Args:
        session: The session to read with.
        execution_cls: The ``StepExecution`` class.
        workflow_id: The workflow.
        step_name: The step.
        with_metadata: Also read ``meta`` (the column exists, R-DM-32).
    """
    return list(
        session.execute(
            sa.select(
                execution_cls.state,
                execution_cls.outcome,
                *([execution_cls.meta] if with_metadata else []),
            )
            .where(execution_cls.workflow_id == workflow_id)
            .where(execution_cls.step_name == step_name)
            .order_by(execution_cls.created_at, execution_cls.id)
        ).all()
    )


def step_attempt(session: orm.Session, execution_cls: Any, execution: Any) -> int:
    """How many executions of ``execution``'s step its workflow has had, this one
    included: those created before it or with it, in ``(created_at, id)`` order
    (R-CNT-02's order). The step span's ``geneva.step.attempt`` (R-OTEL-11).

    Args:
        session: The session to read with (in the caller's transaction).
        execution_cls: The ``StepExecution`` class.
        execution: The loaded execution (its ``workflow_id``, ``step_name``,
            ``created_at`` and ``id`` are read).
    """
    created_at, execution_id = execution.created_at, execution.id
    count = session.scalar(
        sa.select(sa.func.count())
        .select_from(execution_cls)
        .where(execution_cls.workflow_id == execution.workflow_id)
        .where(execution_cls.step_name == execution.step_name)
        .where(
            sa.or_(
                execution_cls.created_at < created_at,
                sa.and_(
                    execution_cls.created_at == created_at,
                    execution_cls.id <= execution_id,
                ),
            )
        )
    )
    return int(count or 0)


def executed_step_id(
    session: orm.Session,
    execution_cls: Any,
    workflow_id: Any,
    step_name: str,
    state: str,
) -> Any:
    """The id of one execution of ``step_name`` in ``state``, or None (R-TH-06)."""
    return session.scalar(
        sa.select(execution_cls.id)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.step_name == step_name)
        .where(execution_cls.state == state)
        .limit(1)
    )


def latest_completed_execution(
    session: orm.Session, execution_cls: Any, workflow_id: Any, step_name: str
) -> Any:
    """The newest ``completed`` execution of ``step_name``, or None (R-TH-09)."""
    return session.scalars(
        sa.select(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.step_name == step_name)
        .where(execution_cls.state == StepExecutionState.COMPLETED)
        .order_by(execution_cls.created_at.desc(), execution_cls.id.desc())
        .limit(1)
    ).first()


def _carried_step_names(geneva: Any, type_name: str | None) -> Any:
    """(id, type, name) of each step name an ongoing workflow carries.

    As ``current_step_name``, ``next_step_name`` or an active execution's step;
    a workflow appears once per name (a UNION). Only ``type_name``'s workflows
    when given.
    """
    workflows = geneva.Workflow.__table__
    executions = geneva.StepExecution.__table__
    ongoing = workflows.c.state.not_in([str(s) for s in TERMINAL_WORKFLOW_STATES])
    if type_name is not None:
        ongoing = sa.and_(ongoing, workflows.c.type == type_name)
    return sa.union(
        sa.select(
            workflows.c.id,
            workflows.c.type,
            workflows.c.current_step_name.label("name"),
        ).where(ongoing),
        sa.select(workflows.c.id, workflows.c.type, workflows.c.next_step_name).where(
            ongoing
        ),
        sa.select(workflows.c.id, workflows.c.type, executions.c.step_name)
        .join(executions, executions.c.workflow_id == workflows.c.id)
        .where(ongoing)
        .where(executions.c.state.in_([str(s) for s in ACTIVE_EXECUTION_STATES])),
    ).subquery()


def step_names_in_flight(
    session: orm.Session, geneva: Any, type_name: str | None
) -> Any:
    """(type, step name, workflows) for each name ongoing workflows carry (R-EVO-08).

    A workflow counts once per name, whether it carries the name as
    ``current_step_name``, ``next_step_name`` or an active execution's step.
    """
    carried = _carried_step_names(geneva, type_name)
    query = (
        sa.select(carried.c.type, carried.c.name, sa.func.count())
        .where(carried.c.name.is_not(None))
        .group_by(carried.c.type, carried.c.name)
        .order_by(carried.c.type, carried.c.name)
    )
    return session.execute(query).all()


def workflow_ids_carrying(
    session: orm.Session,
    geneva: Any,
    type_name: str,
    step_name: str,
    limit: int | None,
) -> list[Any]:
    """Ids of the ongoing ``type_name`` workflows carrying ``step_name`` (R-CLI-05).

    Carrying as :func:`step_names_in_flight` counts it; ascending, at most
    ``limit`` (None: all).
    """
    carried = _carried_step_names(geneva, type_name)
    query = (
        sa.select(carried.c.id)
        .where(carried.c.name == step_name)
        .distinct()
        .order_by(carried.c.id)
    )
    if limit is not None:
        query = query.limit(limit)
    return list(session.scalars(query))
