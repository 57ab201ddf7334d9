"""The statements behind the models' read API and the hero properties (issue 15).

The ORM classes stay the user-facing objects (``Workflow.ongoing()``,
``workflow.execution_history``, ``hero.onboarding_workflow``); the statements
they run are built here, in the store layer, like every other statement on
geneva's two tables (``tests/test_sql_ownership.py``). Plain reads: nothing is
locked. This module imports only SQLAlchemy and :mod:`flask_geneva.db.states`,
so the model modules can use it without reaching the engine (``test_layers``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.states import ACTIVE_EXECUTION_STATES
from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState

__all__ = [
    "current_execution",
    "execution_history",
    "hero_criteria",
    "latest_hero_workflow",
    "ongoing_workflows",
    "ready_to_execute",
    "rows_of_workflow",
    "successor_of",
    "workflows_for_hero",
    "workflows_in_state",
]


def hero_criteria(workflow_cls: Any, hero_type: Any, hero_id: Any) -> list[Any]:
    """WHERE criteria of a workflow for one hero; a None hero matches NULL (R-HERO-04).

    Args:
        workflow_cls: The ``Workflow`` class (or a subclass).
        hero_type: The stored hero type, or None.
        hero_id: The stored hero id, or None.
    """
    return [
        workflow_cls.hero_type.is_(None)
        if hero_type is None
        else workflow_cls.hero_type == hero_type,
        workflow_cls.hero_id.is_(None)
        if hero_id is None
        else workflow_cls.hero_id == hero_id,
    ]


def ongoing_workflows(workflow_cls: Any) -> sa.Select[Any]:
    """A select of the class's workflows, neither finished nor canceled (R-WF-06)."""
    return sa.select(workflow_cls).where(
        workflow_cls.state.not_in(TERMINAL_WORKFLOW_STATES)
    )


def workflows_in_state(workflow_cls: Any, state: WorkflowState) -> sa.Select[Any]:
    """A select of ``workflow_cls``'s workflows in ``state`` (R-WF-24)."""
    return sa.select(workflow_cls).where(workflow_cls.state == state)


def workflows_for_hero(
    workflow_cls: Any, hero_type: Any, hero_id: Any, *, workflow_type: str | None = None
) -> sa.Select[Any]:
    """A select of the hero's workflows, optionally of one stored type (R-HERO-04).

    Args:
        workflow_cls: The ``Workflow`` class (or a subclass).
        hero_type: The stored hero type, or None.
        hero_id: The stored hero id, or None.
        workflow_type: Only workflows whose ``type`` column is this value.
    """
    query = sa.select(workflow_cls)
    if workflow_type is not None:
        query = query.where(workflow_cls.type == workflow_type)
    return query.where(*hero_criteria(workflow_cls, hero_type, hero_id))


def ongoing_workflow_for_hero(
    session: orm.Session, workflow_cls: Any, hero_type: Any, hero_id: Any
) -> Any:
    """The ongoing workflow of the hero with the lowest id, or None (SPEC §15.5)."""
    return session.scalars(
        ongoing_workflows(workflow_cls)
        .where(*hero_criteria(workflow_cls, hero_type, hero_id))
        .order_by(workflow_cls.id)
    ).first()


def latest_hero_workflow(
    session: orm.Session,
    workflow_cls: Any,
    workflow_type: str,
    hero_type: Any,
    hero_id: Any,
    *,
    ongoing: bool,
) -> Any:
    """The hero's newest workflow of one type, by ``(created_at, id)``, or None.

    Args:
        session: The session to read with.
        workflow_cls: The ``Workflow`` class.
        workflow_type: The stored ``type`` value.
        hero_type: The stored hero type, or None.
        hero_id: The stored hero id, or None.
        ongoing: Only consider workflows neither finished nor canceled.
    """
    query = workflows_for_hero(
        workflow_cls, hero_type, hero_id, workflow_type=workflow_type
    ).order_by(workflow_cls.created_at.desc(), workflow_cls.id.desc())
    if ongoing:
        query = query.where(workflow_cls.state.not_in(TERMINAL_WORKFLOW_STATES))
    return session.scalars(query).first()


def current_execution(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> Any:
    """The newest ``scheduled``/``in_progress`` execution, or None (R-WF-21)."""
    return session.scalars(
        sa.select(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.state.in_(ACTIVE_EXECUTION_STATES))
        .order_by(execution_cls.created_at.desc(), execution_cls.id.desc())
    ).first()


def rows_of_workflow(session: orm.Session, row_cls: Any, workflow_id: Any) -> list[Any]:
    """The workflow's rows of ``row_cls`` by ``created_at``, ties by id.

    Args:
        session: The session to read with.
        row_cls: ``StepExecution`` (the execution history, R-WF-22) or
            ``WorkflowSignal`` (its signals, oldest first).
        workflow_id: The workflow's id.
    """
    return list(
        session.scalars(
            sa.select(row_cls)
            .where(row_cls.workflow_id == workflow_id)
            .order_by(row_cls.created_at, row_cls.id)
        )
    )


#: The workflow's executions by ``created_at``, ties by id (R-WF-22).
execution_history = rows_of_workflow


def successor_of(session: orm.Session, execution_cls: Any, execution_id: Any) -> Any:
    """The execution continuing ``execution_id`` (lowest id), or None (R-SE-40)."""
    return session.scalars(
        sa.select(execution_cls)
        .where(execution_cls.continues_from_id == execution_id)
        .order_by(execution_cls.id)
    ).first()


def ready_to_execute(execution_cls: Any, now: datetime) -> sa.Select[Any]:
    """A select of executions ``scheduled`` and due at ``now`` (R-SE-46)."""
    return (
        sa.select(execution_cls)
        .where(execution_cls.state == StepExecutionState.SCHEDULED)
        .where(execution_cls.scheduled_for <= now)
    )
