"""Counters and histograms per workflow class and step, sent after commit (SPEC §28.2).

The facts are recorded where they happen, in the transaction that makes them:
:func:`execution_ended` and :func:`workflow_state_written` by the transition
table's :func:`~flask_geneva.engine.transitions.apply.apply` (the only code that
writes a state, so every path is counted: the executor, conditions, a missing
hero, exception policies, recovery, timeouts, deadlines, operators),
:func:`workflow_created` by scheduling, :func:`operator_action_recorded` by the
operator's transaction and :func:`signal_delivered` by a workflow signal's
delivery. They are kept with the innermost transaction
(:class:`~flask_geneva.core.transaction_scoped.TransactionScoped`) and sent
through ``GENEVA_METRICS`` when the root transaction commits: a rolled-back
transition, or a lost race, counts nothing (R-OMET-03). Nothing is kept when
the hook has no ``increment`` (R-OMET-02). Tags are the stored workflow type,
the step name and fixed vocabularies, never an id (R-OMET-04).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.transaction_scoped import TransactionScoped
from flask_geneva.core.transaction_scoped import innermost_transaction
from flask_geneva.db.context import bound_context
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.telemetry import metric_hooks

__all__ = [
    "OPERATOR_ACTIONS",
    "SIGNALS_DELIVERED",
    "STEP_DURATION",
    "STEP_EXECUTIONS",
    "UNAWAITED_SIGNAL",
    "WORKFLOWS_CREATED",
    "WORKFLOWS_ENDED",
    "WORKFLOWS_PAUSED",
    "delivery_result",
    "execution_ended",
    "operator_action_recorded",
    "signal_delivered",
    "signal_tag",
    "workflow_created",
    "workflow_state_written",
]

#: Step executions that ended: tags workflow, step, outcome, transition (R-OMET-10).
STEP_EXECUTIONS = "geneva_drive.step_executions"
#: Seconds from claim to end of an execution that ran: tags workflow, step (R-OMET-11).
STEP_DURATION = "geneva_drive.step_duration_seconds"
#: Workflows created: tag workflow (R-OMET-12).
WORKFLOWS_CREATED = "geneva_drive.workflows_created"
#: Workflows that ended: tags workflow, state (finished/canceled) (R-OMET-12).
WORKFLOWS_ENDED = "geneva_drive.workflows_ended"
#: Workflows that became paused: tags workflow, transition (R-OMET-12).
WORKFLOWS_PAUSED = "geneva_drive.workflows_paused"
#: Operator actions: tags workflow, action, via (R-OMET-13).
OPERATOR_ACTIONS = "geneva_drive.operator_actions"
#: Workflow signals delivered: tags workflow, signal, result (R-OMET-14).
SIGNALS_DELIVERED = "geneva_drive.signals_delivered"
#: The ``signal`` tag of a name no step of the class awaits (R-OMET-14).
UNAWAITED_SIGNAL = "(unawaited)"

_TERMINAL = frozenset(
    {
        StepExecutionState.COMPLETED,
        StepExecutionState.FAILED,
        StepExecutionState.SKIPPED,
        StepExecutionState.CANCELED,
    }
)
_ENDED = frozenset({WorkflowState.FINISHED, WorkflowState.CANCELED})

#: ``(settings, kind, name, value, tags)``: "count" or "observe".
_Pending = tuple[GenevaConfig, str, str, float, dict[str, str]]
_pending: TransactionScoped[_Pending] = TransactionScoped("geneva_metric_events")


def _counting(row: Any) -> tuple[orm.Session, GenevaConfig] | None:
    """The row's session and settings when its hook counts, else None."""
    # A row outside any session (a new one, or a test's plain object) counts
    # nothing: there is no transaction whose commit would send it.
    state = sa.inspect(row, raiseerr=False)
    session = state.session if state is not None else None
    if session is None:
        return None
    context = bound_context(session)
    if context is None or not metric_hooks.counts(context.settings):
        return None
    return session, context.settings


def execution_ended(
    transition: str,
    *,
    ran: bool,
    workflow: Any,
    execution: Any,
    previous: Any,
    now: datetime,
) -> None:
    """Count an execution that a transition wrote into a terminal state (R-OMET-10/11).

    Counts ``geneva_drive.step_executions`` with ``{"workflow": type, "step":
    step_name, "outcome": outcome, "transition": transition}``, and, when the
    execution was ``in_progress`` and ``ran`` (not a recovery after a lost
    worker), observes ``geneva_drive.step_duration_seconds`` = ``now`` -
    ``started_at`` with ``{"workflow", "step"}``. An execution already terminal
    (the row API's ``mark_*`` again) is not counted twice.

    Args:
        transition: The transition table entry's name.
        ran: False for a recovery (the run's end is unknown).
        workflow: The workflow row, or None (then the execution's).
        execution: The execution row, its new state and outcome set.
        previous: Its state before the transition.
        now: The transition's time (aware UTC).
    """
    if _state(previous, StepExecutionState) in _TERMINAL:
        return
    found = _counting(execution)
    if found is None:
        return
    session, settings = found
    if workflow is None:
        workflow = execution.workflow
    workflow_type = str(workflow.type)
    step_name = str(execution.step_name)
    tags = {
        "workflow": workflow_type,
        "step": step_name,
        "outcome": str(execution.outcome),
        "transition": transition,
    }
    _pending.add(session, (settings, "count", STEP_EXECUTIONS, 1, tags))
    started_at = execution.started_at
    if ran and previous == StepExecutionState.IN_PROGRESS and started_at is not None:
        if started_at.tzinfo is None:  # SQLite and MySQL read back naive UTC
            started_at = started_at.replace(tzinfo=UTC)
        seconds = max(0.0, (now - started_at).total_seconds())
        duration_tags = {"workflow": workflow_type, "step": step_name}
        _pending.add(
            session, (settings, "observe", STEP_DURATION, seconds, duration_tags)
        )


def workflow_state_written(
    transition: str, workflow: Any, previous: Any, target: WorkflowState
) -> None:
    """Count a workflow that ended or paused (R-OMET-12).

    ``geneva_drive.workflows_ended`` with ``{"workflow": type, "state":
    "finished"|"canceled"}`` when it enters an ended state from another one;
    ``geneva_drive.workflows_paused`` with ``{"workflow", "transition"}`` when it
    enters ``paused`` from another state. A new row (no previous state) is
    counted by :func:`workflow_created`, not here.

    Args:
        transition: The transition table entry's name.
        workflow: The workflow row, its new state set.
        previous: Its state before the transition (None for a new row).
        target: The state written.
    """
    before = _state(previous, WorkflowState)
    if before is None or before == target:
        return
    if target in _ENDED and before not in _ENDED:
        name, tags = WORKFLOWS_ENDED, {"state": target.value}
    elif target == WorkflowState.PAUSED:
        name, tags = WORKFLOWS_PAUSED, {"transition": transition}
    else:
        return
    found = _counting(workflow)
    if found is None:
        return
    session, settings = found
    tags = {"workflow": str(workflow.type), **tags}
    _pending.add(session, (settings, "count", name, 1, tags))


def workflow_created(workflow: Any) -> None:
    """Count a workflow inserted (``create()``, a child, a schedule) (R-OMET-12)."""
    found = _counting(workflow)
    if found is None:
        return
    session, settings = found
    tags = {"workflow": str(workflow.type)}
    _pending.add(session, (settings, "count", WORKFLOWS_CREATED, 1, tags))


def operator_action_recorded(workflow: Any, action: str, via: str) -> None:
    """Count an operator action recorded on ``workflow`` (R-OMET-13).

    Args:
        workflow: The locked workflow row.
        action: The recorded action (``pause``, ``resume``, ``cancel``,
            ``recover_forced``, ...; R-PDR-05).
        via: ``api``, ``admin``, ``cli``, ``parent`` or ``deadline``.
    """
    found = _counting(workflow)
    if found is None:
        return
    session, settings = found
    tags = {"workflow": str(workflow.type), "action": action, "via": via}
    _pending.add(session, (settings, "count", OPERATOR_ACTIONS, 1, tags))


def signal_delivered(workflow: Any, signal: str, result: str) -> None:
    """Count a workflow signal delivered to ``workflow`` (R-OMET-14).

    Args:
        workflow: The locked workflow row.
        signal: The signal's name when a step of the class awaits it, else
            :data:`UNAWAITED_SIGNAL` (a sender's free name could hold an id).
        result: ``woke`` (a parked step was woken), ``stored`` (kept for a step
            to claim) or ``duplicate`` (an idempotency key seen before).
    """
    found = _counting(workflow)
    if found is None:
        return
    session, settings = found
    tags = {"workflow": str(workflow.type), "signal": signal, "result": result}
    _pending.add(session, (settings, "count", SIGNALS_DELIVERED, 1, tags))


def signal_tag(workflow_cls: Any, name: str) -> str:
    """The ``signal`` tag of a delivery: ``name`` if a step of the class names it
    in ``wait_for``, else :data:`UNAWAITED_SIGNAL` (R-OMET-14).

    A custom matcher takes any name, so it does not make a name awaited here:
    the tag's values stay the names written in the class.
    """
    if workflow_cls is None:
        return UNAWAITED_SIGNAL
    for step in workflow_cls.step_collection().ordered:
        names = step.wait_for.names if step.wait_for is not None else None
        if names is not None and name in names:
            return name
    return UNAWAITED_SIGNAL


def delivery_result(duplicate: bool, woken: tuple[Any, ...]) -> str:
    """The ``result`` tag of a delivery: duplicate, woke or stored (R-OMET-14)."""
    if duplicate:
        return "duplicate"
    return "woke" if woken else "stored"


def _state(value: Any, enum: Any) -> Any:
    if value is None:
        return None
    try:
        return enum(str(value))
    except ValueError:
        return None


@event.listens_for(orm.Session, "after_commit")
def _send_after_commit(session: orm.Session) -> None:
    # Only the root transaction's commit sends (R-TXN-03, TransactionScoped): a
    # released savepoint hands its facts to its parent.
    if session not in _pending:
        return
    committed = innermost_transaction(session)
    if committed is not None and committed.nested:
        return
    for settings, kind, name, value, tags in _pending.take(session):
        if kind == "count":
            metric_hooks.send_count(settings, name, tags, value)
        else:
            metric_hooks.send_observation(settings, name, value, tags)
