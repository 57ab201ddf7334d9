"""An operator starts a workflow: ``create()`` plus its audit record (R-ADM-201).

The admin's "Start a workflow" form (and any other operator tool) starts a
workflow through :func:`start_workflow`: the engine's own create path
(:func:`~flask_geneva.engine.workflow_creation.create_workflow`, with its checks,
the one-ongoing rule and the first step), and in the same transaction the
operator action ``start`` in the new workflow's ``operator_actions``
(R-PDR-05), so a workflow an operator started says who started it and how.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.db import locks as row_locks
from flask_geneva.db.context import context_of
from flask_geneva.dsl.job_options import fold_priority
from flask_geneva.engine import workflow_creation
from flask_geneva.engine.operator_transaction import check_operator
from flask_geneva.engine.operator_transaction import record_operator_action

__all__ = ["START_ACTION", "start_workflow"]

#: The name of the operator action recorded for a start (R-PDR-05, R-ADM-201).
START_ACTION = "start"


def start_workflow(
    session: orm.Session,
    workflow_cls: Any,
    *,
    hero: Any,
    priority: int | None = None,
    start_at: datetime | None = None,
    actor: str | None = None,
    via: str = "api",
) -> Any:
    """Create a workflow for ``hero`` as an operator and record who did (R-ADM-201).

    The workflow is created exactly as ``workflow_cls.create(hero=hero,
    priority=priority, step_job_options={"wait_until": start_at})`` creates it
    (R-WF-10..15, R-PRI-01, R-JOB-09: no step runs before ``start_at``), and the
    same transaction appends the operator action ``start`` (``from_state``
    null, ``to_state`` the new state, ``execution_id`` the first step's
    execution) to its metadata (R-PDR-05). Commits; tasks are published after
    the commit. Any error rolls the session back: nothing is left.

    Args:
        session: The session to write through, bound to an engine context.
        workflow_cls: A concrete workflow class.
        hero: A saved mapped instance, or None for a class with
            ``may_proceed_without_hero``.
        priority: The workflow's priority (an int, higher runs first), or None.
        start_at: An aware datetime before which no step runs, or None (now).
        actor: Who starts it (recorded), or None.
        via: ``"api"``, ``"admin"`` or ``"cli"``.

    Returns:
        The new workflow, committed.

    Raises:
        ValueError: ``via`` or ``actor`` is not allowed (nothing written).
        DuplicateWorkflowError: An ongoing workflow of the class exists for the
            hero (R-UNQ-02).
        StepConfigurationError: ``priority`` or ``start_at`` is not a valid job
            option (an int within range; an aware datetime), R-JOB-05.
        TypeError: As ``create()``: no hero for a class that needs one, or a
            hero that is no saved mapped instance (R-HERO-01, R-HERO-06).
        GenevaError: As ``create()`` (a declared deadline without its unit).
    """
    check_operator(via, actor)
    options = {"wait_until": start_at} if start_at is not None else None
    try:
        options = fold_priority(
            options,
            priority,
            context=f"{workflow_cls.__name__}.create()",
            keyword="priority=",
            options_name="step_job_options",
        )
        workflow = workflow_creation.create_workflow(
            session,
            workflow_cls,
            hero=hero,
            allow_multiple=False,
            step_job_options=options,
            commit=False,
        )
        active = row_locks.lock_active_executions(session, workflow.id)
        record_operator_action(
            workflow,
            action=START_ACTION,
            actor=actor,
            via=via,
            from_state=None,
            execution=active[0] if active else None,
        )
        session.commit()
    except BaseException:
        session.rollback()
        raise
    context_of(session).run_queued_tasks()
    return workflow
