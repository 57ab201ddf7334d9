"""``workflow.resume()``: continue a paused workflow where it stopped (R-EXT-20..27).

One transaction under the workflow's row lock, audited like the other operator
actions (R-PDR-05): withdraw the pause of a step still running, re-publish a
preserved execution, wake a parked one, continue a resumable chain from its
cursor, schedule the next step, or finish a workflow whose last step completed
while it was paused. Split from :mod:`flask_geneva.engine.flow_control`, whose locked,
audited transaction it shares.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine import flow_control
from flask_geneva.engine import scheduling
from flask_geneva.engine import step_evolution
from flask_geneva.engine.operator_transaction import operator_action
from flask_geneva.engine.operator_transaction import refuse_running
from flask_geneva.engine.operator_transaction import refuse_state
from flask_geneva.engine.operator_transaction import running_execution
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.models import StepExecutionState

__all__ = ["resume"]


def resume(
    workflow: Any, *, rewind: bool, actor: str | None, via: str, commit: bool
) -> Any:
    """Resume a paused workflow in one locked transaction (R-EXT-20..27).

    While an execution is still ``in_progress`` (the workflow was paused during
    its step) resume withdraws the pause: the workflow is ``performing`` again and
    the executor finalizes the step normally (R-EXT-26). Otherwise: re-publish a
    preserved scheduled execution (R-EXT-21); else continue a resumable step from
    its cursor (R-EXT-22); else create a new execution of ``next_step_name`` due
    now (R-EXT-23); with no next step (the last step completed while paused,
    R-EXE-42) the workflow finishes. ``rewind`` empties the cursor of a resumable
    continuation (R-EXT-26).

    Returns:
        The execution that will run (the running one when the pause was
        withdrawn), or None when the workflow finished.

    Raises:
        InvalidStateError: Not paused ("Cannot resume a <state> workflow"), or
            ``rewind`` while an execution is in progress (the message names it).
        StepNotDefinedError: ``next_step_name`` is unknown to the code; nothing
            changes; the message says to use ``resume_at`` (R-EXT-24, R-EVO-07).
    """
    flow_control.refuse_in_own_step(workflow, "resume")
    name = "resume_rewind" if rewind else "resume"
    with operator_action(
        workflow,
        name,
        actor=actor,
        via=via,
        commit=commit,
        refuse=lambda state: refuse_state("resume", state),
    ) as action:
        session, locked = action.session, action.workflow
        now = clock.now()
        running = running_execution(session, locked)
        if running is not None and rewind:
            raise refuse_running(locked, running, "resume from the beginning")
        if running is not None:
            # R-EXT-26: withdraw the pause; the executor finalizes normally.
            transitions.apply(
                transitions.OPERATOR_RESUME_RUNNING,
                now,
                workflow=locked,
                refuse=lambda state: refuse_state("resume", state),
            )
            execution = running
        else:
            transitions.apply(
                transitions.OPERATOR_RESUME,
                now,
                workflow=locked,
                refuse=lambda state: refuse_state("resume", state),
            )
            execution = _resume_execution(session, locked, rewind=rewind)
        action.record(execution)
        locked.logger.info(
            "resumed (now %s) via %s at %s", locked.state, via, now.isoformat()
        )
    return execution


def _resume_execution(session: orm.Session, workflow: Any, *, rewind: bool) -> Any:
    active = row_locks.lock_active_executions(session, workflow.id)
    parked = [e for e in active if e.state == StepExecutionState.WAITING]
    if parked:
        # Its gate claims what arrived while paused, or parks again (R-WSIG-32).
        return workflow_signals.wake_for_resume(session, workflow, parked[-1])
    scheduled = [e for e in active if e.state == StepExecutionState.SCHEDULED]
    if scheduled:
        execution = scheduled[-1]
        if not workflow.steps.is_known(execution.step_name):
            raise step_evolution.stranded_error(workflow, execution.step_name)
        if rewind and column_detection.optional_columns(session).resumable:
            step = workflow.steps.named(execution.step_name)
            if step is not None and step.is_resumable:
                execution.cursor = None
        scheduling.enqueue_scheduled_execution(session, workflow, execution)
        return execution

    if column_detection.optional_columns(session).resumable:
        successor = _resumable_continuation(session, workflow, rewind=rewind)
        if successor is not None:
            return successor

    name = workflow.next_step_name
    if name is None and workflow.current_step_name is None:
        # The last step completed while the workflow was paused (R-EXE-42a).
        transitions.apply(
            transitions.FINISH_AFTER_LAST_STEP, clock.now(), workflow=workflow
        )
        return None
    return step_evolution.resume_step(session, workflow, name)


def _resumable_continuation(
    session: orm.Session, workflow: Any, *, rewind: bool
) -> Any:
    """R-EXT-22 (a)/(b)/(c): continue a paused, failed or canceled resumable chain."""
    execution_cls = workflow.__geneva__.StepExecution
    paused_marker = engine_queries.latest_pause_marker(
        session, execution_cls, workflow.id
    )
    if paused_marker is not None and paused_marker.successor is None:
        return scheduling.create_successor_execution(
            session, workflow, paused_marker, clear_cursor=rewind
        )
    for find in (
        engine_queries.latest_failed_execution_of_step,  # (b)
        engine_queries.canceled_latest_execution_of_step,  # (c), R-EXE-12
    ):
        found = find(session, execution_cls, workflow.id, workflow.next_step_name)
        cursor = None if found is None else found.cursor
        if cursor not in (None, "", [], {}) and found.successor is None:
            return scheduling.create_successor_execution(
                session, workflow, found, clear_cursor=rewind
            )
    return None
