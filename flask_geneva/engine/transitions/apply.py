"""Applying a transition table entry to locked rows: check, then write.

:func:`apply` checks the rows' current states (read under the caller's locks)
against the entry's from-states and refuses otherwise, before writing anything;
then it writes the execution (state, outcome, timestamps of R-SE-02/03) and the
workflow (state, ``transitioned_at`` per R-WF-03, cleared fields) through the
two setters below, the only code in the package that assigns a row's state or
outcome. The entries themselves are in :mod:`flask_geneva.engine.transitions.table`,
which
re-exports :func:`apply`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from flask_geneva.engine import metric_events
from flask_geneva.engine.transitions.types import Actor
from flask_geneva.engine.transitions.types import ExecutionWrite
from flask_geneva.engine.transitions.types import Schedules
from flask_geneva.engine.transitions.types import Transition
from flask_geneva.engine.transitions.types import WorkflowWrite
from flask_geneva.exceptions import InvalidStateTransition
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "Refusal",
    "WorkflowStateWritten",
    "apply",
    "can_apply",
    "on_workflow_state_written",
    "set_execution_state",
    "set_workflow_state",
]

Refusal = Callable[[str], Exception]
"""Builds the caller's own error from the current state it refused."""

WorkflowStateWritten = Callable[[Transition, Any, WorkflowState, datetime], None]
"""``(transition, workflow, new state, now)``: :func:`apply` changed a
workflow's state in memory (written with the row when the caller flushes)."""

_state_listeners: list[WorkflowStateWritten] = []


def on_workflow_state_written(listener: WorkflowStateWritten) -> WorkflowStateWritten:
    """Call ``listener`` after every workflow state change :func:`apply` makes.

    The listener runs with the rows still locked and unflushed, so a column
    it assigns is written by the same guarded ``UPDATE`` (R-DM-40); child
    workflows use it to record how a child settled (R-CHD-20).

    Returns:
        ``listener`` (usable as a decorator).
    """
    _state_listeners.append(listener)
    return listener


def apply(
    transition: Transition,
    now: datetime,
    *,
    workflow: Any = None,
    execution: Any = None,
    outcome: Outcome | None = None,
    to: WorkflowState | None = None,
    refuse: Refusal | None = None,
    read_state: StepExecutionState | None = None,
    execution_attributes: dict[str, Any] | None = None,
    **workflow_attributes: Any,
) -> Schedules:
    """Apply ``transition`` to the locked rows given, or refuse without a change.

    Both rows' current states are checked before anything is written. The writes
    are in memory; they reach the database when the caller's transaction flushes.

    Args:
        transition: The table entry.
        now: The transition time (aware UTC), for every timestamp written.
        workflow: The workflow row, locked by the caller; None to leave it out
            (its part of the entry is then not applied).
        execution: The step execution row, locked by the caller; None when the
            entry's execution part is optional or not wanted.
        outcome: One of the entry's outcomes; defaults to its first.
        to: One of the entry's workflow target states; defaults to its first.
        refuse: Builds the caller's error from the refused current state; the
            default raises :class:`InvalidStateTransition`.
        read_state: The execution's state as the caller read it under the lock,
            checked instead of ``execution.state`` when an earlier write of the
            same transaction failed halfway (the executor's prepare phase: a
            precondition's skip that raised is still a prepare failure of the
            ``scheduled`` row, R-EXE-30).
        execution_attributes: Further execution attributes written with the
            state (e.g. the claiming ``worker_id``, R-WRK-05).
        **workflow_attributes: Further workflow attributes to set (e.g.
            ``current_step_name``); set whenever the transition applies.

    Returns:
        What the caller schedules next (the entry's ``schedules``).

    Raises:
        InvalidStateTransition: A row is in a state the entry does not start
            from (or the error ``refuse`` builds).
        ValueError: ``outcome`` or ``to`` is not one the entry allows.
    """
    refused = _refused_row(transition, workflow, execution, read_state)
    if refused is not None:
        raise _refusal(transition, *refused, refuse=refuse)
    if transition.execution is not None and execution is not None:
        previous = execution.state
        _write_execution(transition, transition.execution, execution, now, outcome)
        for name, value in (execution_attributes or {}).items():
            setattr(execution, name, value)
        if transition.execution.to in _TERMINAL_EXECUTION_STATES:
            # Counted once here, for every path that ends an execution (R-OMET-10).
            metric_events.execution_ended(
                transition.name,
                ran=transition.actor is not Actor.HOUSEKEEPING,
                workflow=workflow,
                execution=execution,
                previous=previous,
                now=now,
            )
    if transition.workflow is not None and workflow is not None:
        _write_workflow(
            transition, transition.workflow, workflow, now, to, workflow_attributes
        )
    return transition.schedules


_TERMINAL_EXECUTION_STATES = frozenset(
    {
        StepExecutionState.COMPLETED,
        StepExecutionState.FAILED,
        StepExecutionState.SKIPPED,
        StepExecutionState.CANCELED,
    }
)


def can_apply(
    transition: Transition, *, workflow: Any = None, execution: Any = None
) -> bool:
    """Tell whether :func:`apply` would accept the given rows' current states.

    Args:
        transition: The table entry.
        workflow: The workflow row, or None to leave its part out.
        execution: The step execution row, or None to leave its part out.

    Returns:
        True if every given row is in one of the entry's from-states.
    """
    return _refused_row(transition, workflow, execution, None) is None


def _refused_row(
    transition: Transition, workflow: Any, execution: Any, read_state: Any
) -> tuple[str, Any, Any, frozenset[Any]] | None:
    """The first given row whose state the entry does not start from, or None.

    Returns:
        ``(what, row, its state, allowed from-states)`` of the refused row.
    """
    exec_write = transition.execution
    if exec_write is not None and execution is not None:
        current = execution.state if read_state is None else read_state
        if current not in exec_write.from_states:
            return "step execution", execution, current, exec_write.from_states
    wf_write = transition.workflow
    if wf_write is not None and workflow is not None:
        allowed = wf_write.from_states
        accepted = workflow.state in allowed if allowed else workflow.state is None
        if not accepted:
            return "workflow", workflow, workflow.state, allowed
    return None


def _refusal(
    transition: Transition,
    what: str,
    row: Any,
    current: Any,
    allowed_states: frozenset[Any],
    *,
    refuse: Refusal | None,
) -> Exception:
    if refuse is not None:
        return refuse(str(current))
    allowed = " or ".join(repr(str(state)) for state in _ordered(allowed_states))
    return InvalidStateTransition(
        f"cannot apply {transition.name!r} to {what} {row.id}: it is "
        f"{None if current is None else str(current)!r}; "
        f"allowed only from {allowed or 'a new row'}"
    )


def _ordered(states: frozenset[Any]) -> list[Any]:
    """The states in their enum's order (execution and workflow states share
    spellings, so each set is ordered by its own enum)."""
    if not states:
        return []
    order = list(type(next(iter(states))).__members__.values())
    return sorted(states, key=order.index)


def _write_execution(
    transition: Transition,
    write: ExecutionWrite,
    execution: Any,
    now: datetime,
    outcome: Outcome | None,
) -> None:
    if outcome is not None and outcome not in write.outcomes:
        allowed = ", ".join(repr(str(value)) for value in write.outcomes) or "none"
        raise ValueError(
            f"outcome {str(outcome)!r} is not one of {transition.name}'s: {allowed}"
        )
    chosen = outcome if outcome is not None else next(iter(write.outcomes), None)
    # The from-states were checked above; the setter writes state, outcome and the
    # timestamps of R-SE-02/03.
    set_execution_state(execution, write.to, now, outcome=chosen)


def _write_workflow(
    transition: Transition,
    write: WorkflowWrite,
    workflow: Any,
    now: datetime,
    to: WorkflowState | None,
    attributes: dict[str, Any],
) -> None:
    if to is not None and to not in write.to:
        allowed = ", ".join(repr(str(value)) for value in write.to) or "none"
        raise ValueError(
            f"state {str(to)!r} is not one of {transition.name}'s targets: {allowed}"
        )
    values = dict.fromkeys(write.clears)
    values.update(attributes)
    target = to if to is not None else next(iter(write.to), None)
    if target is None or (workflow.state == target and write.unchanged_is_noop):
        # No state change (R-WF-02: the current state again is a no-op).
        for name, value in values.items():
            setattr(workflow, name, value)
        return
    previous = workflow.state
    # Sets transitioned_at per R-WF-03 and started_at on first performing.
    set_workflow_state(workflow, target, now, **values)
    metric_events.workflow_state_written(transition.name, workflow, previous, target)
    for listener in _state_listeners:
        listener(transition, workflow, target, now)


#: The timestamp column each terminal execution state sets (R-SE-03).
_STATE_TIMESTAMP = {
    StepExecutionState.COMPLETED: "completed_at",
    StepExecutionState.FAILED: "failed_at",
    StepExecutionState.SKIPPED: "skipped_at",
    StepExecutionState.CANCELED: "canceled_at",
}


def set_workflow_state(
    workflow: Any, state: WorkflowState, now: datetime, **attributes: Any
) -> None:
    """Set the workflow's state and ``attributes`` in memory (flushed on commit).

    No check: :func:`apply` checks the from-states first, and nothing else in the
    package calls this (``tests/engine/transitions/test_transitions.py`` checks).

    Args:
        workflow: The workflow instance, locked by the caller.
        state: The new state.
        now: The time of the transition (UTC).
        **attributes: Other columns to set, e.g. cleared fields.

    Entering finished/canceled/paused sets ``transitioned_at`` (R-WF-03); the
    first entry into performing sets ``started_at``.
    """
    for name, value in attributes.items():
        setattr(workflow, name, value)
    workflow.state = state.value
    if state in (WorkflowState.FINISHED, WorkflowState.CANCELED, WorkflowState.PAUSED):
        workflow.transitioned_at = now
    if state == WorkflowState.PERFORMING and workflow.started_at is None:
        workflow.started_at = now


def set_execution_state(
    execution: Any,
    state: StepExecutionState,
    now: datetime,
    *,
    outcome: Outcome | None = None,
) -> None:
    """Set the execution state, outcome and timestamps in memory (R-SE-02, R-SE-03).

    No check: :func:`apply` checks the from-states first (R-SE-01), and nothing
    else in the package calls this
    (``tests/engine/transitions/test_transitions.py`` checks).

    Args:
        execution: The step execution instance, locked by the caller.
        state: The new state.
        now: The time of the transition (UTC).
        outcome: The outcome to set; None leaves it as it is.

    ``in_progress`` sets ``started_at``; every terminal state sets its own
    timestamp and ``finished_at`` to the same ``now``.
    """
    execution.state = state.value
    if outcome is not None:
        execution.outcome = outcome.value
    if state == StepExecutionState.IN_PROGRESS:
        execution.started_at = now
    timestamp = _STATE_TIMESTAMP.get(state)
    if timestamp is not None:
        setattr(execution, timestamp, now)
        execution.finished_at = now
