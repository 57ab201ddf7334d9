"""Applying a step's outcome through the transition table (R-EXE-44/45, §8.1).

The functions here take the run (:class:`~flask_geneva.engine.executor.run.
StepRun`) and its locked rows: they turn a policy result (R-EXE-45) or an
in-step signal (R-FC-10..15) into one :mod:`flask_geneva.engine.transitions.table`
entry, apply it to the locked rows and schedule what the entry says (the next
step, the same step again, a resumable successor). They also write the
``flow_control`` and ``interrupt`` records (R-PDR-03). The claim
(:mod:`~flask_geneva.engine.executor.prepare`) and finalize
(:mod:`~flask_geneva.engine.executor.finalize`) call them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_geneva.core import clock
from flask_geneva.db import error_recording
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import session_transactions
from flask_geneva.engine import limits as flow_limits
from flask_geneva.engine import policy_decisions
from flask_geneva.engine import scheduling
from flask_geneva.engine.executor.run import BodyResult
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.operators import finalize as operator_finalize
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.policies import task_failures
from flask_geneva.policies.resolution import PolicyResult
from flask_geneva.policies.resolution import should_report

__all__ = [
    "apply_flow_control",
    "apply_policy",
    "commit_resolved",
    "perform",
    "record_flow_control",
    "record_interrupt",
    "resolve",
    "transition",
    "transition_and_commit",
]

_SIGNAL_TRANSITIONS = {
    "cancel": transitions.CANCEL_SIGNAL,
    "skip": transitions.SKIP,
    "finish": transitions.FINISH,
}


# -- policies (R-EXE-23/45, R-POL) -----------------------------------------------------


def resolve(
    run: StepRun, workflow: Any, execution: Any, step: Any, error: Exception
) -> PolicyResult:
    """Resolve, decide and record the policy for ``error`` (R-PDR-01).

    Args:
        run: The run; an imperative handler marks it (R-EXE-80).
        workflow: The locked workflow.
        execution: The locked execution; gets the decision record.
        step: The step definition whose policy applies.
        error: What the body, a condition or the claim raised.

    Returns:
        The decided result (:func:`~flask_geneva.engine.executor.
        policy_decisions.resolve`).
    """
    return policy_decisions.resolve(
        run.session,
        run.logger,
        run.reports,
        workflow,
        execution,
        step,
        error,
        reporter=run.settings.error_reporter,
        before_handler=run.note_user_code,
    )


def apply_policy(
    run: StepRun,
    workflow: Any,
    execution: Any,
    step: Any,
    result: PolicyResult,
    error: Exception,
    reason: str,
) -> None:
    """Apply a policy result to the execution and workflow (R-EXE-23/45).

    Args:
        run: The run, in its locked transaction.
        workflow: The locked workflow.
        execution: The locked execution.
        step: Its step definition.
        result: The policy result of :func:`resolve`.
        error: The exception the policy handled; recorded on the execution.
        reason: ``"precondition"`` or ``"exception_policy"``: the reattempt
            reason (R-CNT-03).

    Raises:
        InvalidStateTransition: A row is not in a from-state of the entry.
    """
    now = clock.now()
    action = result.action
    what = "condition raised" if reason == "precondition" else "encountered"
    task_failures.log_captured(run.logger, error, result, what)
    if action == "reattempt":
        error_recording.record_exception_metadata(execution, error)
        execution.write_metadata("reattempt_reason", reason)
    elif action != "finish":
        error_recording.record_error(execution, error)
    entry = policy_decisions.policy_transition(action)
    transition(run, entry, now, workflow, execution, step, wait=result.wait)
    if should_report(result):
        run.reports.append((error, {}, execution.id))


# -- transitions (R-EXE-44/45, R-FC-10..15) --------------------------------------------


def transition(
    run: StepRun,
    entry: transitions.Transition,
    now: Any,
    workflow: Any,
    execution: Any,
    step: Any,
    *,
    wait: timedelta | None = None,
    **workflow_attributes: Any,
) -> None:
    """Apply the table ``entry`` to the locked rows and schedule what it says.

    Args:
        entry: The table entry (R-EXE-44/45, R-FC-10..15).
        now: The transition time.
        **workflow_attributes: Extra workflow attributes to set.
        run, workflow, execution, step, wait: As :func:`perform` takes them.

    Raises:
        InvalidStateTransition: A row is not in a from-state of the entry.
    """
    schedules = transitions.apply(
        entry,
        now,
        workflow=workflow,
        execution=execution,
        **workflow_attributes,
    )
    perform(run, schedules, workflow, execution, step, wait=wait)


def perform(
    run: StepRun,
    schedules: transitions.Schedules,
    workflow: Any,
    execution: Any,
    step: Any,
    *,
    wait: timedelta | None = None,
) -> None:
    """Schedule what a transition entry says (its ``schedules``, R-SCH-01/06).

    Args:
        run: The run; while it is ``finalizing`` no stray execution is
            canceled (its execution is the workflow's one active execution).
        schedules: What the applied entry schedules.
        workflow: The locked workflow.
        execution: The locked execution the entry was applied to.
        step: Its step definition.
        wait: The wait of a reattempt or continuation.
    """
    kind = transitions.Schedules
    if schedules is kind.NEXT_STEP:
        _schedule_next(run, workflow, step)
    elif schedules is kind.SAME_STEP:
        _create_reattempt(run, workflow, execution, step, wait)
    elif schedules is kind.SUCCESSOR:
        scheduling.create_successor_execution(
            run.session,
            workflow,
            execution,
            wait=wait,
            cancel_stray=False,
            # The slots of hold_across_chain limits go on with the chain (R-LIM-26).
            limit_holds=flow_limits.pass_on_chain_holds(run.session, execution),
        )
    elif schedules is not kind.NOTHING:  # pragma: no cover - not an engine entry
        raise AssertionError(f"the executor does not schedule {schedules!r}")


def transition_and_commit(
    run: StepRun,
    entry: transitions.Transition,
    now: Any,
    workflow: Any,
    execution: Any,
    step: Any,
) -> None:
    """Apply ``entry``, schedule what it says, settle signals, commit.

    One transaction: :func:`transition`, then :func:`commit_resolved`.

    Args:
        run: The run, in its locked transaction.
        entry: The table entry.
        now: The transition time.
        workflow: The locked workflow.
        execution: The locked execution.
        step: Its step definition, or None (no step definition: nothing is
            scheduled after the entry, no signal is settled).

    Raises:
        InvalidStateTransition: A row is not in a from-state of the entry.
    """
    transition(run, entry, now, workflow, execution, step)
    commit_resolved(run, workflow, execution, step)


def commit_resolved(
    run: StepRun, workflow: Any, execution: Any, step: Any, *, keep_state: bool = False
) -> None:
    """Settle the workflow signals the step resolved, then commit (R-WSIG-15).

    The end of every transaction in which a run writes its execution's
    outcome (the claim's skip, cancel, wait timeout or failure; finalize).
    Signals are settled only for ``wait_for`` steps, so other steps pay one
    attribute check.

    Args:
        run: The run, in its locked transaction.
        workflow: The locked workflow.
        execution: The locked execution just written.
        step: Its step definition, or None.
        keep_state: Commit without expiring the loaded rows
            (:func:`~flask_geneva.db.session_transactions.commit_keeping_state`).
    """
    session = run.session
    run.note_written(execution)  # R-OTEL-11
    if step is not None and step.wait_for is not None:
        workflow_signals.settle_claimed_signals(
            session, workflow, execution, clock.now()
        )
    if keep_state:
        session_transactions.commit_keeping_state(session)
    else:
        session.commit()


def _schedule_next(run: StepRun, workflow: Any, step: Any) -> None:
    """Schedule the step after ``step`` (R-SCH-06) from the claim or finalize."""
    if not run.finalizing:
        # The execution being ended is still `scheduled` in the database: flush
        # its new state so the stray-cancel UPDATE does not touch it.
        run.session.flush()
    scheduling.schedule_next_step(
        run.session, workflow, after=step.name, cancel_stray=not run.finalizing
    )


def _create_reattempt(
    run: StepRun, workflow: Any, execution: Any, step: Any, wait: timedelta | None
) -> None:
    """Schedule ``step`` again: a successor if resumable, else a new execution."""
    session = run.session
    if not run.finalizing:
        session.flush()
    cancel_stray = not run.finalizing
    if step.is_resumable and column_detection.optional_columns(session).resumable:
        scheduling.create_successor_execution(
            session, workflow, execution, wait=wait, cancel_stray=cancel_stray
        )
    else:
        scheduling.create_step_execution(
            session, workflow, step, wait=wait, cancel_stray=cancel_stray
        )


# -- signals and interrupts (R-FC-10..15, R-PDR-03) ------------------------------------


def apply_flow_control(
    run: StepRun,
    workflow: Any,
    execution: Any,
    step: Any,
    flow_control: FlowControlSignal,
) -> None:
    """Apply an in-step flow-control signal (R-FC-10..15).

    Args:
        run: The run, in finalize's locked transaction.
        workflow: The locked workflow.
        execution: The locked execution.
        step: Its step definition.
        flow_control: What the body raised.

    Raises:
        InvalidStateTransition: A row is not in a from-state of the entry.
    """
    now = clock.now()
    action = flow_control.action
    record_flow_control(execution, flow_control)
    resumable = step.is_resumable
    wait = None
    if action == "pause":
        entry = (
            transitions.PAUSE_RESUMABLE_SIGNAL
            if resumable
            else transitions.PAUSE_SIGNAL
        )
    elif action == "reattempt":
        assert isinstance(flow_control, ReattemptSignal)  # noqa: S101 - action implies it
        operator_finalize.prepare_in_step_reattempt(
            execution, flow_control, resumable=resumable
        )
        entry, wait = transitions.REATTEMPT, flow_control.wait
    elif action == "suspend":
        assert isinstance(flow_control, SuspendSignal)  # noqa: S101 - action implies it
        record_interrupt(run, execution, None, reason="suspend")
        entry, wait = transitions.CONTINUE, flow_control.wait
        now = clock.now()
    elif action in _SIGNAL_TRANSITIONS:
        entry = _SIGNAL_TRANSITIONS[action]
    else:  # pragma: no cover - every FlowControlSignal subclass is handled above
        raise AssertionError(f"unknown flow control action {action!r}")
    transition(run, entry, now, workflow, execution, step, wait=wait)


def record_flow_control(execution: Any, flow_control: FlowControlSignal) -> None:
    """Write the ``flow_control`` record of R-PDR-03 on ``execution``.

    Args:
        execution: The locked execution.
        flow_control: The flow-control signal the body raised.
    """
    wait = getattr(flow_control, "wait", None)
    execution.write_metadata(
        "flow_control",
        {
            "action": flow_control.action,
            "wait_seconds": wait.total_seconds() if wait is not None else None,
            "rewind": bool(getattr(flow_control, "rewind", False)),
        },
    )


def record_interrupt(
    run: StepRun,
    execution: Any,
    body: BodyResult | None,
    *,
    reason: str | None = None,
) -> None:
    """Write the ``interrupt`` record of R-PDR-03 on ``execution``.

    Args:
        run: The run; its ``iterable_step`` gives the iterations and runtime.
        execution: The locked execution.
        body: How the body ended; its interrupt gives the default reason.
        reason: The reason to record instead (``"suspend"``, an operator's).
    """
    iterable_step = run.iterable_step
    if reason is None and body is not None and body.interrupt is not None:
        reason = body.interrupt.reason
    execution.write_metadata(
        "interrupt",
        {
            "reason": reason,
            "iterations": iterable_step.iterations if iterable_step else 0,
            "runtime_seconds": round(iterable_step.runtime_seconds, 6)
            if iterable_step
            else 0.0,
        },
    )
