"""The ``wait_for_children`` gate of the executor's prepare phase (R-CHD-21..24).

A step declared with ``wait_for_children`` reads its workflow's child counts
(one row, :mod:`flask_geneva.db.child_counts`) after the preconditions (and
after a ``wait_for`` signal gate). When fewer children have settled than it
waits for, the count check and the registration of the execution are one
guarded ``UPDATE`` and the execution parks (``park``: ``waiting``, no broker
message, no worker). The child settlement that reaches the count requests
the execution's task (:mod:`flask_geneva.engine.children.settle`); that
delivery finds it ``waiting``, wakes it here (:func:`wake_if_due`) and
claims it in the same transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.db import child_counts
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import children as child_queries
from flask_geneva.dsl.children import wait_threshold
from flask_geneva.engine.children.settle import installed
from flask_geneva.engine.children.settle import note_wait_over
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import ChildWorkflowFailed
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "NOT_INSTALLED_MESSAGE",
    "applies",
    "pass_gate",
    "wake_if_due",
]

#: How a ``wait_for_children`` step fails without its install units (R-CHD-50).
NOT_INSTALLED_MESSAGE = (
    "Step '{step}' of {type} waits for child workflows, but the database lacks "
    "their tables and columns: run `flask geneva install` and `flask db upgrade` "
    "(install units add_workflow_signals and add_child_workflows)"
)


def units_installed(session: orm.Session) -> bool:
    """Whether a children wait can park here: both install units (R-CHD-50)."""
    columns = column_detection.optional_columns(session)
    return columns.child_workflows and columns.workflow_signals


def applies(session: orm.Session, step: Any, execution: Any) -> bool:
    """Whether ``execution`` passes a children gate: its step waits for children
    and it does not continue a resumable chain (the first execution waited,
    R-CHD-21)."""
    if step is None or step.wait_for_children is None:
        return False
    if column_detection.optional_columns(session).resumable:
        return execution.continues_from_id is None
    return True


def pass_gate(
    session: orm.Session, workflow: Any, execution: Any, step: Any, now: datetime
) -> str:
    """Run the step, or park it until enough children settled (R-CHD-21..23).

    Called with the workflow and the execution locked, after the
    preconditions passed.

    Returns:
        ``"run"`` or ``"parked"`` (``park`` applied; the caller commits).

    Raises:
        StepConfigurationError: The install units are missing (R-CHD-50).
        ChildWorkflowFailed: The wait is settled, some children failed and the
            step's ``on_child_failure`` is ``"fail"`` (R-CHD-23); the caller
            hands it to the step's exception policies.
    """
    if not units_installed(session):
        raise StepConfigurationError(
            NOT_INSTALLED_MESSAGE.format(step=step.name, type=workflow.type)
        )
    counts = child_counts.counts_of(session, workflow.id)
    started = counts.started if counts is not None else 0
    needed = wait_threshold(step.wait_for_children, started)
    if counts is not None and counts.settled < needed:
        options = workflow.job_options_for(step)
        if child_counts.register_wait(
            session,
            workflow.id,
            execution.id,
            wake_at_settled=needed,
            queue=options.get("queue"),
            priority=options.get("priority"),
            now=now,
        ):
            transitions.apply(
                transitions.PARK,
                now,
                workflow=workflow,
                execution=execution,
                execution_attributes={"waiting_since": execution.waiting_since or now},
            )
            return "parked"
        # A child settled since the read: the wait is over.
        counts = child_counts.counts_of(session, workflow.id)
    if counts is not None and counts.waiting_execution_id is not None:
        note_wait_over(session, workflow, counts.waiting_execution_id)
    if counts is not None and counts.failed > 0 and step.on_child_failure == "fail":
        raise _failed(session, workflow, counts)
    return "run"


def wake_if_due(
    session: orm.Session, workflow: Any, execution: Any, now: datetime
) -> bool:
    """Wake a parked execution whose children wait is over (R-CHD-22).

    A delivery of a ``waiting`` execution (the task a settlement requested, or
    the dispatcher's re-publication) applies ``wake`` when the workflow is
    ``ready``, the step waits for children, and enough of them settled; the
    caller then prepares it like any ``scheduled`` execution, in the same
    transaction. Any other delivery changes nothing (R-EXE-11).

    Returns:
        Whether the execution was woken.
    """
    if (
        execution.state != StepExecutionState.WAITING
        or workflow.state != WorkflowState.READY
        or not installed(session)
    ):
        return False
    step = workflow.steps.named(execution.step_name)
    if not applies(session, step, execution):
        return False
    counts = child_counts.counts_of(session, workflow.id)
    if counts is not None:
        needed = wait_threshold(step.wait_for_children, counts.started)
        if counts.settled < needed:
            return False
    transitions.apply(
        transitions.WAKE,
        now,
        workflow=workflow,
        execution=execution,
        execution_attributes={"scheduled_for": now},
    )
    workflow.logger.info(
        "woke step %r (execution %s): its children settled",
        execution.step_name,
        execution.id,
    )
    return True


def _failed(
    session: orm.Session, workflow: Any, counts: child_counts.ChildCounts
) -> ChildWorkflowFailed:
    workflow_cls = workflow.__geneva__.Workflow
    ids = tuple(child_queries.failed_child_ids(session, workflow_cls, workflow.id))
    shown = ", ".join(str(child_id) for child_id in ids)
    more = f" (first: {shown})" if ids else ""
    return ChildWorkflowFailed(
        f"{counts.failed} of the {counts.started} child workflows of workflow "
        f"{workflow.id} failed (canceled or paused by an error){more}; resume "
        "or cancel them, or declare the step with on_child_failure='ignore'",
        failed_count=counts.failed,
        failed_child_ids=ids,
    )
