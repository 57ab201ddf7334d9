"""A child settles for its parent, once, in O(1) (SPEC §25, R-CHD-20..24, R-CHD-40).

Every workflow state change goes through
:func:`flask_geneva.engine.transitions.apply.apply`; its listener here sees a
child workflow enter ``finished``, ``canceled`` or ``paused`` by an error and

* assigns the child's ``child_settled`` (written by the child's own guarded
  ``UPDATE``, so exactly once: the row is locked and its state guarded);
* notes the change of the parent's counts (``settled``, ``failed``) for the
  transaction.

A ``before_commit`` hook then applies the noted changes, one ``UPDATE`` of the
parent's child counts row each (:func:`flask_geneva.db.child_counts.apply_settlement`),
after everything else the transaction wrote: that row is the leaf of the lock
order (R-CHD-40), never locked before a workflow, execution or limit key row.
When the update makes the parent's parked execution due, its task is requested
for after the commit: the parent wakes once.

Notes belong to the innermost transaction open when they were made
(:class:`~flask_geneva.core.transaction_scoped.TransactionScoped`): a savepoint
that rolls back drops its notes, one that is released hands them to its parent.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.core.transaction_scoped import TransactionScoped
from flask_geneva.db import child_counts
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.context import bound_context
from flask_geneva.db.states import ChildSettlement
from flask_geneva.db.states import WorkflowState
from flask_geneva.engine import publishing
from flask_geneva.engine.transitions import apply as transition_apply
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.transitions.types import Transition

__all__ = [
    "ERROR_PAUSES",
    "installed",
    "is_child",
    "note_canceled_during_step",
    "note_started",
    "note_wait_over",
    "publish_wake",
]

_log = module_logger("flask_geneva")

#: The transitions that pause a workflow because of an error: the step's
#: exception policy paused it, its prepare phase failed into a pause, or the
#: step cannot run (R-CHD-20). An operator's pause, ``pause!`` in a step and a
#: wait's ``on_wait_timeout="pause"`` are no failure.
ERROR_PAUSES = frozenset(
    {
        transitions.FAIL_AND_PAUSE.name,
        transitions.PREPARE_POLICY_PAUSE.name,
        transitions.FAIL_UNRUNNABLE.name,
    }
)

_SETTLEMENT_OF = {
    WorkflowState.FINISHED: ChildSettlement.FINISHED,
    WorkflowState.CANCELED: ChildSettlement.CANCELED,
    WorkflowState.PAUSED: ChildSettlement.FAILED,
}

#: ``(old child_settled, new) -> (settled +, failed +, value to store)``: a
#: child is counted settled once; a child paused by an error that ends later
#: stays settled and stops counting as failed when it finishes (R-CHD-20).
_CHANGES: dict[tuple[str | None, str], tuple[int, int, str]] = {
    (None, ChildSettlement.FINISHED): (1, 0, ChildSettlement.FINISHED),
    (None, ChildSettlement.CANCELED): (1, 1, ChildSettlement.CANCELED),
    (None, ChildSettlement.FAILED): (1, 1, ChildSettlement.FAILED),
    (ChildSettlement.FAILED, ChildSettlement.FINISHED): (
        0,
        -1,
        ChildSettlement.FINISHED,
    ),
    (ChildSettlement.FAILED, ChildSettlement.CANCELED): (
        0,
        0,
        ChildSettlement.CANCELED,
    ),
}

#: The changes of parents' counts noted in each session's open transactions.
_notes: TransactionScoped[_Note] = TransactionScoped("geneva_child_count_notes")


@dataclasses.dataclass
class _Note:
    parent_workflow_id: Any
    started: int = 0
    settled: int = 0
    failed: int = 0
    parent_canceled: bool = False
    wait_over_execution_id: Any = None


def installed(session: orm.Session) -> bool:
    """Whether the ``add_child_workflows`` unit is installed (R-CHD-50)."""
    return column_detection.optional_columns(session).child_workflows


def is_child(session: orm.Session, workflow: Any) -> bool:
    """Whether ``workflow`` is a child workflow (it has a parent, R-CHD-10)."""
    if not installed(session):
        return False
    with session.no_autoflush:
        return workflow.parent_workflow_id is not None


def note_started(session: orm.Session, parent_workflow_id: Any, count: int) -> None:
    """Count ``count`` children inserted in this transaction when it commits (R-CHD-11).

    The parent's counts row is upserted last in the transaction, as every
    other write to it (R-CHD-40): a step body that starts children and then
    writes its own workflow row (``set_result``) must not hold the counts row
    while it waits for the workflow row, which an operator's cancel holds
    while it waits for the counts row.
    """
    if count > 0:
        _add(session, _Note(parent_workflow_id, started=count))


def note_canceled_during_step(session: orm.Session, workflow: Any) -> None:
    """A step of ``workflow`` finalizes after its workflow was canceled (R-CHD-31).

    The cancel marked the children to cancel when it committed; children the
    step's body inserted after that commit were not counted then. Finalize
    locks the workflow row after the body committed, so marking again here
    (last in its transaction, R-CHD-40) leaves none of them running.
    """
    if workflow.id is not None and installed(session):
        _add(session, _Note(workflow.id, parent_canceled=True))


def note_wait_over(session: orm.Session, workflow: Any, execution_id: Any) -> None:
    """Forget the parent's parked execution when this transaction commits (R-CHD-24).

    Called by the gate when ``execution_id`` passes it; the registration is
    cleared last in the transaction (the counts row is the leaf, R-CHD-40).
    """
    _add(session, _Note(workflow.id, wait_over_execution_id=execution_id))


def publish_wake(session: orm.Session, wake: child_counts.SettlementWake) -> bool:
    """Request the task of a parked parent execution made due (R-CHD-22).

    The task is the parent's ``perform_step`` for that execution; its claim
    wakes and runs it (R-CHD-22), with the parked step's time limits
    (R-STO-03). Sent after the commit of the current
    transaction (at once outside one). Without an engine context bound to the
    session nothing is sent: the dispatcher publishes it (R-CHD-24).

    Returns:
        Whether a publication was requested.
    """
    context = bound_context(session)
    if context is None:
        return False
    publication = publishing.step_publication(
        context.settings,
        step_execution_id=wake.execution_id,
        task_id=str(uuid.uuid4()),
        queue=wake.queue,
        priority=wake.priority,
        eta=None,
        # Read with the wake: no statement of its own (R-STO-03).
        timeout=publishing.step_timeout(
            context.models.workflow_classes, wake.workflow_type, wake.step_name
        ),
    )
    publishing.request_publication(
        session,
        publication,
        backend=context.publisher,
        defer=publishing.deferral_active(context.settings.enqueue_after_commit),
    )
    return True


@transition_apply.on_workflow_state_written
def _workflow_state_written(
    transition: Transition, workflow: Any, state: WorkflowState, now: datetime
) -> None:
    """Record how a child settled; note a canceled parent (R-CHD-20, R-CHD-31)."""
    settlement = _SETTLEMENT_OF.get(state)
    if settlement is None:
        return
    if state == WorkflowState.PAUSED and transition.name not in ERROR_PAUSES:
        return
    instance_state = sa.inspect(workflow, raiseerr=False)
    session = None if instance_state is None else instance_state.session
    if session is None or workflow.id is None or not installed(session):
        return  # not a mapped row of a session (a new row, a test's stand-in)
    if state == WorkflowState.CANCELED:
        _add(session, _Note(workflow.id, parent_canceled=True))
    with session.no_autoflush:
        parent_id = workflow.parent_workflow_id
        if parent_id is None:
            return
        old = workflow.child_settled
    change = _CHANGES.get((old, settlement))
    if change is None:
        return
    settled, failed, value = change
    if old != value:
        workflow.child_settled = str(value)
    if settled or failed:
        _add(session, _Note(parent_id, settled=settled, failed=failed))


def _add(session: orm.Session, note: _Note) -> None:
    _notes.add(session, note)


@event.listens_for(orm.Session, "before_commit")
def _before_commit(session: orm.Session) -> None:
    if session not in _notes or session.get_nested_transaction() is not None:
        return  # nothing noted, or a savepoint is released: its parent takes them
    notes = _notes.take(session)
    # Everything else first: the counts rows are the leaf of the lock order.
    session.flush()
    now = clock.now()
    by_parent: dict[Any, _Note] = {}
    for note in notes:
        total = by_parent.setdefault(
            note.parent_workflow_id, _Note(note.parent_workflow_id)
        )
        total.started += note.started
        total.settled += note.settled
        total.failed += note.failed
        total.parent_canceled = total.parent_canceled or note.parent_canceled
        if note.wait_over_execution_id is not None:
            total.wait_over_execution_id = note.wait_over_execution_id
    for parent_id in sorted(by_parent, key=str):
        _apply(session, by_parent[parent_id], now)


def _apply(session: orm.Session, note: _Note, now: datetime) -> None:
    parent_id = note.parent_workflow_id
    if note.started:
        child_counts.add_started(session, parent_id, note.started, now)
    if note.wait_over_execution_id is not None:
        child_counts.clear_wait(session, parent_id, note.wait_over_execution_id, now)
    if note.parent_canceled:
        child_counts.mark_cancel_due(session, parent_id, now)
    if note.settled or note.failed:
        wake = child_counts.apply_settlement(
            session, parent_id, settled=note.settled, failed=note.failed, now=now
        )
        if wake is not None:
            # About the parent, whichever workflow's commit settled it (R-OLOG-02).
            with log_fields.logging_about(
                log_fields.id_fields(parent_id, execution_id=wake.execution_id)
            ):
                _log.info(
                    "children of workflow %s settled: waking its step execution %s",
                    parent_id,
                    wake.execution_id,
                )
                publish_wake(session, wake)
