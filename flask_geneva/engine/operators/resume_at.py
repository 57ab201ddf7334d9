"""``workflow.resume_at(step_name)``: continue a paused workflow elsewhere (R-EVO-06).

After a deploy removed or renamed a step without a declaration, or when an
operator decides a workflow must redo (or jump over) some steps, ``resume_at``
continues a paused workflow from a named, defined step, in one transaction under
the workflow's row lock, audited like the other operator actions (R-PDR-05).
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core import clock
from flask_geneva.engine import flow_control
from flask_geneva.engine import scheduling
from flask_geneva.engine.operator_transaction import allowed_from
from flask_geneva.engine.operator_transaction import operator_action
from flask_geneva.engine.operator_transaction import refuse_while_running
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import StepNotDefinedError

__all__ = ["allowed_steps", "resume_at"]


def allowed_steps(workflow: Any) -> list[str]:
    """The step names ``resume_at`` accepts for ``workflow``, in execution order."""
    return list(workflow.steps.names)


def _allowed(workflow: Any) -> str:
    """The allowed steps for a message; for a type no class defines, says so."""
    names = ", ".join(repr(name) for name in allowed_steps(workflow)) or "(none)"
    return names + scheduling.unregistered_type_hint(workflow)


def _target_step(workflow: Any, step_name: object) -> Any:
    steps = workflow.steps
    if not isinstance(step_name, str) or not step_name:
        raise ValueError(
            f"resume_at needs a step name (str); got {step_name!r}; allowed steps: "
            f"{_allowed(workflow)}"
        )
    if steps.is_removed(step_name):
        raise StepNotDefinedError(
            f"Cannot resume workflow {workflow.id} at step {step_name!r}: it was "
            f"removed from {workflow.type} (step.removed); allowed steps: "
            f"{_allowed(workflow)}",
            workflow_id=workflow.id,
            step_name=step_name,
        )
    step = steps.named(step_name)
    if step is None:
        raise StepNotDefinedError(
            f"Cannot resume workflow {workflow.id} at step {step_name!r}: "
            f"{workflow.type} defines no such step; allowed steps: "
            f"{_allowed(workflow)}",
            workflow_id=workflow.id,
            step_name=step_name,
        )
    return step


def resume_at(
    workflow: Any, step_name: str, *, actor: str | None, via: str, commit: bool
) -> Any:
    """Continue a paused workflow from ``step_name`` (R-EVO-06).

    In one transaction under the workflow's row lock: the workflow becomes
    ``ready`` (entry ``operator_resume_at``), a preserved scheduled execution is
    canceled (R-SCH-03) and a new execution of the named step is scheduled due
    now. The operator action ``resume_at`` is recorded with the step (R-PDR-05).
    A renamed (old) name runs its new step.

    Args:
        workflow: A paused workflow.
        step_name: A step the class defines.
        actor, via, commit: As
            :func:`~flask_geneva.engine.operator_transaction.operator_action`
            takes them.

    Returns:
        The new execution.

    Raises:
        InvalidStateError: The workflow is not paused (checked again under the
            lock), an execution is still in progress (R-EXT-26), or the call is
            made from inside the workflow's own step.
        StepNotDefinedError: ``step_name`` is removed or not defined; the message
            names the allowed steps. Nothing changes.
        ValueError: ``step_name`` is not a non-empty str, or ``via`` is unknown.
    """
    flow_control.refuse_in_own_step(workflow, "resume")
    step = _target_step(workflow, step_name)
    with operator_action(
        workflow, "resume_at", actor=actor, via=via, commit=commit, refuse=_refuse
    ) as action:
        session, locked = action.session, action.workflow
        refuse_while_running(session, locked, "resume")
        transitions.apply(
            transitions.OPERATOR_RESUME_AT,
            clock.now(),
            workflow=locked,
            refuse=_refuse,
        )
        execution = scheduling.create_step_execution(session, locked, step, wait=None)
        action.record(execution)
        _note_step(locked, step.name)
        locked.logger.info("resumed at step %r via %s", step.name, via)
    return execution


def _refuse(state: str) -> InvalidStateError:
    article = "an" if state[:1] in "aeiou" else "a"
    allowed = " or ".join(allowed_from("resume_at"))
    return InvalidStateError(
        f"Cannot resume {article} {state} workflow at a step; only a {allowed} "
        f"workflow can be resumed at a step"
    )


def _note_step(workflow: Any, step_name: str) -> None:
    """Add the step to the operator action just recorded (R-PDR-05)."""
    actions = workflow.read_metadata("operator_actions")
    if isinstance(actions, list) and actions:
        entries = [dict(entry) for entry in actions]
        entries[-1]["step"] = step_name
        workflow.write_metadata("operator_actions", entries)
