"""Step evolution across deploys: resume_at, stranded steps, gravestones in flight.

Issue 19. The class body declares what became of old step names
(``step.removed``, ``step.renamed``, :mod:`flask_geneva.dsl.evolution`); this
module holds the engine side that needs the database:

- :func:`resume_step`: what ``resume()`` schedules for ``next_step_name``: the
  step (a renamed name runs its new step), the step after a gravestone, or an
  error that says to use ``resume_at`` (R-EVO-07);
- :func:`stranded_steps`: ongoing workflows whose current or next step (or an
  active execution's step) the running code does not know, for the
  ``flask geneva check-steps`` deploy gate (R-EVO-08);
- :func:`history_in_flight`: which gravestones and renames still have rows
  carrying their old name (``removed_steps_in_flight()``, R-EVO-09).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine import scheduling
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import StepNotDefinedError

__all__ = [
    "StrandedSteps",
    "history_in_flight",
    "recover_removed",
    "resume_step",
    "stranded_error",
    "stranded_steps",
]


def stranded_error(workflow: Any, name: str | None) -> StepNotDefinedError:
    """The error for a stored step name the code does not know (R-EVO-07).

    The message names the defined steps and says to continue with
    ``resume_at`` (or ``flask geneva resume ID --at STEP``).
    """
    defined = ", ".join(workflow.steps.names) or "(none)"
    error = StepNotDefinedError(
        f"Step '{name}' is not defined in {workflow.type}; defined steps: {defined}"
        + scheduling.unregistered_type_hint(workflow)
        + f". Continue the workflow from a defined step with "
        f"workflow.resume_at(step_name) (CLI: flask geneva resume {workflow.id} "
        f"--at STEP), or declare step.removed({name!r}) / "
        f"step.renamed({name!r}, to=...) in {workflow.type}",
        workflow_id=workflow.id,
        step_name=name,
    )
    error.workflow = workflow
    return error


def resume_step(session: orm.Session, workflow: Any, name: str | None) -> Any:
    """Create what ``resume()`` runs for ``next_step_name`` ``name`` (R-EVO-07).

    A defined (or renamed) step gets an execution due now; after a gravestone the
    next defined step is scheduled, or the workflow finishes when none follows.

    Returns:
        The new execution, or None when the workflow finished.

    Raises:
        StepNotDefinedError: ``name`` is neither a step, a rename nor a
            gravestone; the message says to use ``resume_at``.
    """
    step = workflow.steps.named(name) if name else None
    if step is not None:
        return scheduling.create_step_execution(session, workflow, step, wait=None)
    if workflow.steps.is_removed(name):
        return scheduling.schedule_next_step(session, workflow, after=name)
    raise stranded_error(workflow, name)


def recover_removed(session: orm.Session, workflow: Any, execution: Any) -> bool:
    """Recover a stuck execution of a removed step: move on, never rerun (R-EVO-03).

    Housekeeping's and the operator's reattempt-recovery (R-HK-24, R-HK-28) of an
    execution whose step is a gravestone: the execution ends ``recovered``
    (entry ``recover_removed_step``) and the step after the gravestone is
    scheduled, or the workflow finishes. The caller holds both row locks.

    Returns:
        True (the execution was recovered).
    """
    name = execution.step_name
    transitions.apply(
        transitions.RECOVER_REMOVED_STEP,
        clock.now(),
        workflow=workflow,
        execution=execution,
    )
    session.flush()  # the recovered row leaves the one-active index first
    scheduling.schedule_next_step(session, workflow, after=name)
    workflow.logger.warning(
        "stuck execution %s of the removed step %r recovered: moved on",
        execution.id,
        name,
    )
    return True


# -- reading which names are in flight ------------------------------------------------


@dataclass(frozen=True)
class StrandedSteps:
    """Ongoing workflows of one type carrying a step name the code does not know.

    Attributes:
        type: The workflow type (``__geneva_type__``).
        step_name: The unknown step name.
        workflows: How many ongoing workflows carry it.
        registered: Whether a class is registered for ``type`` at all.
        workflow_ids: The ids of those workflows, ascending; the first ones only
            when :func:`stranded_steps` was given an ``id_limit``.

    .. versionadded:: 0.3
    """

    type: str
    step_name: str
    workflows: int
    registered: bool
    workflow_ids: tuple[Any, ...] = ()


def stranded_steps(
    session: orm.Session, geneva: Any, *, id_limit: int | None = 10
) -> list[StrandedSteps]:
    """Group ongoing workflows the running code would strand (R-EVO-08).

    A name counts when the workflow's class defines it neither as a step, a
    ``step.renamed`` old name nor a ``step.removed`` gravestone, or when no class
    is registered for the workflow's type.

    Args:
        session: The session to read with.
        geneva: The ``Geneva`` extension (models, workflow classes).
        id_limit: How many workflow ids each entry names (the lowest first,
            R-CLI-05); None names them all.

    Returns:
        One entry per (type, step name), sorted; empty when the deploy is safe.
    """
    stranded = []
    for type_name, name, count in engine_queries.step_names_in_flight(
        session, geneva, None
    ):
        cls = geneva.workflow_classes.get(type_name)
        if cls is not None and cls.step_collection().is_known(name):
            continue
        ids = engine_queries.workflow_ids_carrying(
            session, geneva, type_name, name, id_limit
        )
        stranded.append(
            StrandedSteps(type_name, name, int(count), cls is not None, tuple(ids))
        )
    return stranded


def history_in_flight(workflow_cls: Any) -> dict[str, int]:
    """Gravestones and renamed names still carried by ongoing workflows (R-EVO-09).

    Args:
        workflow_cls: A workflow class; its own type only (subclasses declare their
            own history).

    Returns:
        ``{old name: number of ongoing workflows carrying it}`` for each
        ``step.removed`` and ``step.renamed`` old name still in flight (as
        ``current_step_name``, ``next_step_name`` or an active execution's step).
        A name missing from it can be deleted from the class body.
    """
    steps = workflow_cls.step_collection()
    history = set(steps.removed_names) | set(steps.renames)
    if not history:
        return {}
    session = workflow_cls.__geneva__.session
    rows = engine_queries.step_names_in_flight(
        session, workflow_cls.__geneva__, workflow_cls.__geneva_type__
    )
    return {name: int(count) for _, name, count in rows if name in history}
