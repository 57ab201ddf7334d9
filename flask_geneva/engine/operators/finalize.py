"""Finalizing a step whose workflow an operator paused, canceled or finished (R-EXE-42).

An operator may pause or cancel a ``performing`` workflow while its step runs
(R-EXT-02/03); the executor learns of it only in Phase 3, under the row locks. The
execution row then records what the body actually did, and the operator's workflow
state decides what comes next:

- a body that returned normally is ``completed``/``success``: its writes were
  committed (R-EXE-38), so it must never run again. On a paused workflow the next
  step waits as a preserved execution, unpublished until ``resume()`` (R-EXT-01,
  R-EXT-21); without a next step ``resume()`` finishes the workflow;
- a captured exception is recorded as ``failed``/``failed`` and the workflow stays
  as the operator left it, so ``resume()`` retries the step;
- an interrupted resumable step keeps its cursor (``workflow_paused``) on a paused
  workflow and is ``canceled`` otherwise;
- an in-step flow-control signal is recorded as that signal records it, its
  follow-up execution preserved for ``resume()``; cancel and finish end the
  workflow.

Nothing is scheduled for a canceled or finished workflow, and nothing created here
is published. ``current_step_name`` is cleared as in R-EXE-46.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.db import error_recording
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.engine import scheduling
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.models import WorkflowState

__all__ = ["finalize_under_operator_state", "prepare_in_step_reattempt"]


def finalize_under_operator_state(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    step: Any,
    *,
    kind: str,
    flow_control: FlowControlSignal | None,
    error: Exception | None,
    record_interrupt: Callable[[str | None], None],
    now: Any,
) -> None:
    """Record the body's outcome on a workflow that is no longer performing (R-EXE-42).

    Runs inside the executor's locked Phase 3 transaction, which the caller commits;
    the workflow's state (paused, canceled or finished) is left as the operator set
    it, except that an in-step cancel or finish ends a paused workflow.

    Args:
        session: The executor's session, holding the workflow and execution locks.
        workflow: The locked workflow; its state is not ``performing``.
        execution: The locked execution, still ``in_progress``.
        step: The step definition the body ran.
        kind: How the body ended: ``"completed"``, ``"exception"``,
            ``"interrupted"`` or ``"flow_control"`` (R-EXE-35).
        flow_control: The flow-control signal when ``kind`` is ``"flow_control"``.
        error: The captured exception when ``kind`` is ``"exception"``; recorded
            on the execution, not re-raised (the caller reports it, R-EXE-43).
        record_interrupt: Writes the interrupt record (R-PDR-03); called with
            None for the interrupt's own reason or with ``"suspend"``.
        now: The finalization time (aware UTC).
    """
    paused = workflow.state == WorkflowState.PAUSED
    workflow.current_step_name = None
    if kind == "completed":
        transition = transitions.SETTLE_COMPLETED
    elif kind == "exception":
        assert error is not None  # noqa: S101 - kind implies it
        error_recording.record_error(execution, error)
        transition = transitions.SETTLE_FAILED
    elif kind == "interrupted":
        record_interrupt(None)
        # On a paused workflow the cursor stays on the row; resume() continues it
        # (R-EXT-22a).
        transition = (
            transitions.SETTLE_KEPT_FOR_RESUME
            if paused
            else transitions.SETTLE_CANCELED
        )
    else:
        assert flow_control is not None  # noqa: S101 - kind implies it
        transition = _flow_control_transition(
            session, execution, step, flow_control, paused
        )
        if flow_control.action == "suspend":
            record_interrupt("suspend")
    schedules = transitions.apply(
        transition, now, workflow=workflow, execution=execution
    )
    wait = (
        flow_control.wait
        if isinstance(flow_control, ReattemptSignal | SuspendSignal)
        else None
    )
    if schedules is transitions.Schedules.PRESERVED_NEXT_STEP and paused:
        _preserve_next_step(session, workflow, step)
    elif schedules is transitions.Schedules.PRESERVED_SAME_STEP and paused:
        _preserve_same_step(session, workflow, execution, step, wait)


def _flow_control_transition(
    session: orm.Session,
    execution: Any,
    step: Any,
    flow_control: FlowControlSignal,
    paused: bool,
) -> transitions.Transition:
    """The entry recording an in-step flow-control signal as §8.1 does (R-EXE-42)."""
    action = flow_control.action
    resumable = (
        step.is_resumable and column_detection.optional_columns(session).resumable
    )
    if action == "cancel":
        return (
            transitions.SETTLE_CANCEL_SIGNAL_WHILE_PAUSED
            if paused
            else transitions.SETTLE_CANCELED
        )
    if action == "finish":
        return (
            transitions.SETTLE_FINISH_SIGNAL_WHILE_PAUSED
            if paused
            else transitions.SETTLE_COMPLETED
        )
    if action == "pause":
        return (
            transitions.SETTLE_KEPT_FOR_RESUME
            if resumable
            else transitions.SETTLE_CANCELED
        )
    if action == "skip":
        return transitions.SETTLE_SKIPPED
    if action == "reattempt":
        assert isinstance(flow_control, ReattemptSignal)  # noqa: S101 - action implies it
        prepare_in_step_reattempt(execution, flow_control, resumable=resumable)
        return transitions.SETTLE_REATTEMPTED
    if action == "suspend":
        # As an interrupt on a canceled/finished workflow (R-EXE-42c).
        return transitions.SETTLE_CONTINUED if paused else transitions.SETTLE_CANCELED
    # pragma: no cover - every FlowControlSignal subclass is handled above
    raise AssertionError(f"unknown flow control action {action!r}")


def prepare_in_step_reattempt(
    execution: Any, flow_control: ReattemptSignal, *, resumable: bool
) -> None:
    """Mark ``execution`` as reattempted by an in-step ``reattempt()`` (R-FC-13).

    A resumable step's cursor is cleared when the reattempt rewinds; the
    ``reattempt_reason`` metadata says ``flow_control``. Shared by the executor's
    own outcome and the one under an operator's state.
    """
    if resumable and flow_control.rewind:
        execution.cursor = None
    execution.write_metadata("reattempt_reason", "flow_control")


def _preserve_next_step(session: orm.Session, workflow: Any, step: Any) -> None:
    """Leave the step after ``step`` scheduled and unpublished for ``resume()``.

    Without a next step ``next_step_name`` is cleared, and ``resume()`` finishes
    the workflow instead of running anything again (R-EXE-42a).
    """
    following = workflow.steps.next_after(step.name)
    if following is None:
        workflow.next_step_name = None
        return
    scheduling.create_step_execution(
        session,
        workflow,
        following,
        wait=following.wait,
        cancel_stray=False,
        publish=False,
    )


def _preserve_same_step(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    step: Any,
    wait: timedelta | None,
) -> None:
    """Leave the retry (or the resumable successor) of ``step`` for ``resume()``."""
    if step.is_resumable and column_detection.optional_columns(session).resumable:
        scheduling.create_successor_execution(
            session, workflow, execution, wait=wait, cancel_stray=False, publish=False
        )
    else:
        scheduling.create_step_execution(
            session, workflow, step, wait=wait, cancel_stray=False, publish=False
        )
