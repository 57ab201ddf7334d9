"""``workflow.run_now()``: run a waiting step now instead of later (R-ADM-51).

A ready workflow's scheduled execution may wait: a step ``wait``, a reattempt's
backoff, a ``suspend``. An operator who knows the wait is no longer needed
(the gateway is back, the data has arrived) runs it now: in one transaction
under the workflow's row lock, the waiting execution is canceled and the same
step is scheduled again, due now, continuing the waiting execution's cursor;
audited like the other operator actions (R-PDR-05).
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core import clock
from flask_geneva.db import locks as row_locks
from flask_geneva.engine import scheduling
from flask_geneva.engine.operator_transaction import allowed_from
from flask_geneva.engine.operator_transaction import check_operator
from flask_geneva.engine.operator_transaction import operator_action
from flask_geneva.engine.operator_transaction import refuse_unless_allowed
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = ["parked_execution", "parked_refusal", "run_now", "waiting_execution"]


def waiting_execution(executions: list[Any], now: Any) -> Any:
    """The scheduled execution among ``executions`` due after ``now``, or None."""
    for execution in executions:
        if (
            execution.state == StepExecutionState.SCHEDULED
            and execution.scheduled_for is not None
            and execution.scheduled_for > now
        ):
            return execution
    return None


def parked_execution(executions: list[Any]) -> Any:
    """The execution among ``executions`` parked (``waiting``), or None.

    Such a step waits for a signal or for its children, not for its time: run
    now cannot help it (R-ADM-51, R-WSIG-10, R-CHD-21).
    """
    for execution in executions:
        if execution.state == StepExecutionState.WAITING:
            return execution
    return None


def parked_refusal(execution: Any, step: Any = None, *, workflow_id: Any = None) -> str:
    """Why a parked step cannot be run now, and what to do instead: it waits
    for its children (R-CHD-21) or for a signal (R-WSIG-10), not for its time.

    Args:
        execution: The parked execution.
        step: Its step definition, or None (unknown step: a signal wait).
        workflow_id: Given, a signal wait names the calls that deliver one.
    """
    if step is not None and step.wait_for_children is not None:
        return (
            f"step {execution.step_name!r} waits for its workflow's children to "
            "settle, not for its time: it runs when they have"
        )
    how = (
        ""
        if workflow_id is None
        else f" (workflow.signal(...), `flask geneva signal {workflow_id} NAME`)"
    )
    return (
        f"step {execution.step_name!r} waits for a signal, not for its time: "
        f"deliver the signal instead{how}"
    )


def run_now(workflow: Any, *, actor: str | None, via: str, commit: bool) -> Any:
    """Run the ready workflow's waiting step now (R-ADM-51).

    In one transaction under the workflow's row lock (state re-checked): the
    transition ``operator_run_now`` cancels the waiting execution and a new
    execution of the same step is scheduled due now, with the waiting one's
    cursor and predecessor for a resumable step; its task is published after
    the commit. The operator action ``run_now`` is recorded (R-PDR-05).

    Args:
        workflow: A ready workflow whose scheduled execution is due later.
        actor, via, commit: As
            :func:`~flask_geneva.engine.operator_transaction.operator_action`
            takes them.

    Returns:
        The new execution.

    Raises:
        InvalidStateError: The workflow is not ready, or it has no scheduled
            execution that waits (already due, running, or none); the message
            says which. Nothing changes.
        ValueError: ``via`` is unknown.
    """
    check_operator(via, actor)
    # Refused before the lock too: the caller's copy says it already.
    refuse_unless_allowed(workflow, "run_now", _not_ready)
    with operator_action(
        workflow, "run_now", actor=actor, via=via, commit=commit, refuse=_not_ready
    ) as action:
        session, locked = action.session, action.workflow
        now = clock.now()
        active = row_locks.lock_active_executions(session, locked.id)
        waiting = waiting_execution(active, now)
        parked = parked_execution(active) if waiting is None else None
        if parked is not None:
            step = locked.steps.named(parked.step_name)
            raise InvalidStateError(
                f"Cannot run workflow {locked.id} now: "
                f"{parked_refusal(parked, step, workflow_id=locked.id)}"
            )
        if waiting is None:
            raise InvalidStateError(
                f"Cannot run workflow {locked.id} now: its step is not waiting "
                "(it is due already, running, or not scheduled)"
            )
        step = locked.steps.named(waiting.step_name)
        if step is None:
            raise scheduling.step_not_defined(locked, waiting.step_name)
        transitions.apply(
            transitions.OPERATOR_RUN_NOW,
            now,
            workflow=locked,
            execution=waiting,
            refuse=_not_ready,
        )
        session.flush()
        if waiting.continues_from_id is not None or waiting.cursor is not None:
            # A resumable step's walk goes on from the waiting one's cursor.
            execution = scheduling.create_successor_execution(
                session, locked, waiting, wait=None
            )
        else:
            execution = scheduling.create_step_execution(
                session, locked, step, wait=None
            )
        action.record(execution)
        locked.logger.info(
            "step %r run now (was due %s) via %s",
            step.name,
            waiting.scheduled_for.isoformat(),
            via,
        )
    return execution


def _not_ready(state: str) -> InvalidStateError:
    article = "an" if state[:1] in "aeiou" else "a"
    hint = " (resume it instead)" if state == WorkflowState.PAUSED else ""
    allowed = " or ".join(allowed_from("run_now"))
    return InvalidStateError(
        f"Cannot run {article} {state} workflow now{hint}; only a {allowed} "
        "workflow whose step waits can run now"
    )
