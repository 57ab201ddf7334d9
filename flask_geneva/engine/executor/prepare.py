"""The executor's first stage: lock, check, evaluate preconditions, claim (§7.2-7.4).

:func:`prepare` takes the run (:class:`~flask_geneva.engine.executor.run.StepRun`),
locks the workflow and the execution, ends duplicate and early deliveries
without a change (R-EXE-11, R-EXE-18), cancels or fails what cannot run
(R-EXE-12..15), evaluates cancel conditions and ``skip_if`` (R-EXE-20..24), and
claims the execution (R-EXE-17), each as a transition entry; an unexpected
error fails the execution and applies its policy (R-EXE-30..32). It hands the
claimed ``(workflow, execution, step)`` to the body stage.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import exc as sa_exc

from flask_geneva import signals
from flask_geneva.core import clock
from flask_geneva.core import database_outages
from flask_geneva.core import transactions
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import error_recording
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import session_transactions
from flask_geneva.dsl.conditions import describe_condition
from flask_geneva.dsl.conditions import evaluate_cancel_conditions
from flask_geneva.engine import limits as flow_limits
from flask_geneva.engine import policy_decisions
from flask_geneva.engine import scheduling
from flask_geneva.engine.children import gate as children_gate
from flask_geneva.engine.executor import early_delivery
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.executor import hero_missing
from flask_geneva.engine.executor import hero_probes
from flask_geneva.engine.executor import outcomes
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.flow_control import step_context
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.exceptions import StepNotDefinedError
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.policies import task_failures
from flask_geneva.policies.resolution import PolicyResult
from flask_geneva.policies.resolution import should_report

__all__ = ["MISSING_COLUMNS_MESSAGE", "prepare"]

_log = module_logger("flask_geneva")

_RUNNABLE_WORKFLOW_STATES = (WorkflowState.READY, WorkflowState.PERFORMING)
_WAIT_TIMEOUT = {
    "skip": transitions.WAIT_TIMEOUT_SKIP,
    "cancel": transitions.WAIT_TIMEOUT_CANCEL,
    "pause": transitions.WAIT_TIMEOUT_PAUSE,
}
_PREPARE_POLICY = {
    "reattempt": transitions.PREPARE_POLICY_REATTEMPT,
    "cancel": transitions.PREPARE_POLICY_CANCEL,
    "skip": transitions.PREPARE_POLICY_SKIP,
}

MISSING_COLUMNS_MESSAGE = (
    "Step '{step}' of {type} is a resumable_step, but the step executions table lacks "
    "the 'cursor'/'continues_from_id' columns needed to store its cursor. Run "
    "`flask geneva install` and then `flask db upgrade` to add them."
)


class _AlreadyHandled(BaseException):
    """Carries a condition exception whose policy is already applied (R-EXE-24)."""

    def __init__(self, error: Exception, result: PolicyResult) -> None:
        super().__init__(error)
        self.error = error
        self.result = result


def prepare(run: StepRun) -> tuple[Any, Any, Any] | None:
    """Claim ``run.execution_id`` in one locked transaction (SPEC §7.2-7.4).

    Ends every transaction it opens: a claim is committed keeping the loaded
    rows (the body starts without a snapshot), and every other outcome is
    committed or rolled back here.

    Args:
        run: The run; gets the tagged loggers, the error context, the
            running-set entry (R-WRK-18) and the passed preconditions' timing.

    Returns:
        The claimed ``(workflow, execution, step)``, or None when nothing is
        to run: the execution is missing (R-JOB-20), not ``scheduled``
        (R-EXE-11), early (R-EXE-18), or ended here (R-EXE-12..24,
        R-EXE-30, R-EVO-02, R-WSIG-10..41).

    Raises:
        StepNotDefinedError: The step is not defined (R-EXE-14), after commit.
        StepConfigurationError: The step cannot run on this schema
            (R-EXE-15, R-WSIG-04), after commit.
        Exception: A condition's or the claim's exception after its policy
            was committed, when ``run.reraise`` asks (R-EXE-24, R-EXE-30).
        sqlalchemy.exc.SQLAlchemyError: A database error of the claim itself,
            rolled back (a deadlock is retried by the caller, R-EXE-80).
        Exception: A lost database connection anywhere in this stage (a
            condition's included), rolled back, no policy applied: the caller
            raises :class:`~flask_geneva.exceptions.ClaimFailedError` (R-FLT-01).
    """
    session = run.session
    workflow, execution, hero_present = _lock_with_lookup_retries(run)
    if execution is None:
        return None
    now = clock.now()
    run.install_loggers(workflow, execution)
    run.enter_error_context(workflow, execution)

    if execution.state == StepExecutionState.WAITING and children_gate.wake_if_due(
        session, workflow, execution, now
    ):
        pass  # its children settled: prepared now, in this transaction (R-CHD-22)
    elif execution.state != StepExecutionState.SCHEDULED:
        # Duplicate, stale or already handled delivery: change nothing (R-EXE-11).
        run.logger.info("already %s, skipping duplicate job", execution.state)
        session.rollback()
        return None

    if not run.run_early and early_delivery.defer_early_delivery(
        session,
        workflow,
        execution,
        now=now,
        tolerance=run.settings.clock_skew_tolerance,
        logger=run.logger,
    ):
        # Delivered before its time (R-EXE-18): published again, not run.
        session.commit()
        return None

    if workflow.state == WorkflowState.PAUSED and flow_limits.parked(
        session, execution
    ):
        # A limit's waiter keeps its place while paused (R-LIM-14): a grant
        # that reached it goes back, to the next waiter.
        flow_limits.return_grant_while_paused(session, execution, now)
        run.logger.info("workflow is paused: the waiter keeps its place (R-LIM-14)")
        session.commit()
        return None
    # The step's span: current from here to the end of the run (R-OTEL-12).
    run.start_trace(workflow, execution)
    if workflow.state not in _RUNNABLE_WORKFLOW_STATES:
        run.logger.info(
            "workflow is %s, canceling the execution (R-EXE-12)", workflow.state
        )
        outcomes.transition_and_commit(
            run, transitions.DROP_FOR_STOPPED_WORKFLOW, now, workflow, execution, None
        )
        return None

    raise_after_commit: BaseException | None = None
    step = None
    try:
        if hero_probes.hero_missing_at_claim(session, workflow, hero_present):
            hero_missing.cancel(run, workflow, execution, None, now)  # R-EXE-13
            return None

        step = workflow.steps.named(execution.step_name)
        if step is None and workflow.steps.is_removed(execution.step_name):
            _skip_removed(run, workflow, execution, now)
            return None
        if step is None:
            message = (
                f"Step '{execution.step_name}' is not defined in {workflow.type}"
                + scheduling.unregistered_type_hint(workflow)
            )
            _fail_unrunnable(workflow, execution, now, message)
            error = StepNotDefinedError(
                message,
                workflow_id=workflow.id,
                step_execution_id=execution.id,
                step_name=execution.step_name,
            )
            error.workflow, error.step_execution = workflow, execution
            raise_after_commit = error
        elif (
            step.is_resumable
            and not column_detection.optional_columns(session).resumable
        ):
            message = MISSING_COLUMNS_MESSAGE.format(step=step.name, type=workflow.type)
            _fail_unrunnable(workflow, execution, now, message)
            raise_after_commit = StepConfigurationError(message)
        elif step.limits and not flow_limits.installed(session):
            # R-LIM-50: a limit is never silently ignored.
            message = flow_limits.NOT_INSTALLED_MESSAGE.format(
                step=step.name, type=workflow.type
            )
            _fail_unrunnable(workflow, execution, now, message)
            raise_after_commit = StepConfigurationError(message)
        elif step.wait_for_children is not None and not children_gate.units_installed(
            session
        ):
            # R-CHD-50: a children wait is never silently skipped.
            message = children_gate.NOT_INSTALLED_MESSAGE.format(
                step=step.name, type=workflow.type
            )
            _fail_unrunnable(workflow, execution, now, message)
            raise_after_commit = StepConfigurationError(message)
        elif step.wait_for is not None and not workflow_signals.installed(session):
            # R-WSIG-04: fails loudly, as a resumable step without its columns.
            message = workflow_signals.NOT_INSTALLED_MESSAGE.format(
                what=f"Step '{step.name}' of {workflow.type} (wait_for)"
            )
            _fail_unrunnable(workflow, execution, now, message)
            raise_after_commit = StepConfigurationError(message)
        else:
            ended = _preconditions(run, workflow, execution, step)
            if ended:
                return None
            attributes = _claimed_by(run)
            if step.wait_for is not None:
                signal = _signal_gate(run, workflow, execution, step, now)
                if signal is None:
                    return None
                attributes = {**(attributes or {}), "signal_id": signal.id}
            if children_gate.applies(session, step, execution) and (
                children_gate.pass_gate(session, workflow, execution, step, now)
                == "parked"
            ):
                run.logger.info("waiting for child workflows (R-CHD-21)")
                run.note_outcome("waiting")
                session.commit()
                return None
            if step.limits or flow_limits.parked(session, execution):
                # A waiter whose step lost its limits in a deploy leaves its
                # queue here too (R-LIM-21).
                held = _limit_slots(run, workflow, execution, step, now)
                if held is None:
                    return None
                holds = held if held["held"] else None
                attributes = {**(attributes or {}), "limit_holds": holds}
            run.mark_running(execution.id)  # before the claim commits
            transitions.apply(
                transitions.CLAIM,
                now,
                workflow=workflow,
                execution=execution,
                execution_attributes=attributes,
                current_step_name=step.name,
            )
    except _AlreadyHandled as handled:
        # R-EXE-24: the condition's exception, after its policy was committed.
        if task_failures.should_reraise(run.reraise, handled.result):
            raise handled.error from None
        return None
    except sa_exc.SQLAlchemyError as error:
        session_transactions.rollback_after_error(session, error)
        raise
    except Exception as error:
        if database_outages.connection_lost(error) is not None:
            # R-FLT-01: the database went away, not the step: no policy
            # applies; the caller retries the delivery.
            session_transactions.rollback_after_error(session, error)
            raise
        result = _prepare_failed(run, workflow, execution, step, error)
        if task_failures.should_reraise(run.reraise, result):
            raise
        return None
    if raise_after_commit is not None:
        session.commit()
        raise raise_after_commit
    # The claimed rows stay loaded: the body gets them without reloading, and
    # no transaction (no snapshot) is open when the body starts.
    session_transactions.commit_keeping_state(session)
    run.events.emit(signals.precondition, run.passed_timing, outcome="passed")
    return workflow, execution, step


def _fail_unrunnable(workflow: Any, execution: Any, now: Any, message: str) -> None:
    """Fail an execution that cannot run, with ``message`` (R-EXE-14/15, R-WSIG-04).

    Applies ``fail_unrunnable`` (the workflow pauses); the caller commits and
    raises the matching error.
    """
    execution.error_message = message
    transitions.apply(
        transitions.FAIL_UNRUNNABLE, now, workflow=workflow, execution=execution
    )


def _claimed_by(run: StepRun) -> dict[str, Any] | None:
    """``{"worker_id": ...}`` of this registered worker process, or None.

    Written with the claim (R-WRK-05) when the database has the worker
    registry and this process registered itself.
    """
    return worker_registry.claim_attributes(run.session)


def _signal_gate(
    run: StepRun, workflow: Any, execution: Any, step: Any, now: Any
) -> Any:
    """Pass the ``wait_for`` gate: the signal to run with, or None (R-WSIG-10..41).

    None when the execution parked (committed here) or its wait timed out
    with an ``on_wait_timeout`` action (applied and committed here). A timeout
    without one raises :class:`SignalWaitTimeout` into the caller's prepare
    failure path, so the step's exception policies apply (R-WSIG-40).
    """
    session = run.session
    gate = workflow_signals.pass_gate(session, workflow, execution, step, now)
    if gate.kind == "run":
        workflow.__dict__["_geneva_received_signal"] = gate.signal
        return gate.signal
    if gate.kind == "parked":
        run.logger.info(
            "waiting for workflow signal %s (R-WSIG-10)", step.wait_for.description
        )
        run.note_outcome("waiting")
        session.commit()
        return None
    error = workflow_signals.timeout_error(step, execution)
    if step.on_wait_timeout is None:
        raise error
    run.logger.info("%s; on_wait_timeout=%s", error, step.on_wait_timeout)
    execution.error_message = str(error)
    outcomes.transition_and_commit(
        run, _WAIT_TIMEOUT[step.on_wait_timeout], now, workflow, execution, step
    )
    return None


def _limit_slots(
    run: StepRun, workflow: Any, execution: Any, step: Any, now: Any
) -> dict[str, Any] | None:
    """Take the step's limit slots: the claim's ``limit_holds``, or None when
    it parked.

    A parked execution is committed here (R-LIM-11). A key function that
    raises goes to the caller's prepare failure path, so the step's
    exception policies apply (R-LIM-05).
    """
    claimed = flow_limits.claim_slots(run.session, workflow, execution, step, now)
    if isinstance(claimed, flow_limits.Parked):
        counts = claimed.counts  # as they are with this waiter queued
        running = (
            f"{counts.running} running"
            if counts.concurrency is None
            else f"{counts.running} of {counts.concurrency} running"
        )
        run.logger.info(
            "waiting for limit %s (key %r, %s, %d waiting) (R-LIM-11)",
            claimed.limit_name,
            claimed.limit_key,
            running,
            counts.waiting,
        )
        run.note_outcome("waiting")
        run.session.commit()
        return None
    return claimed


def _skip_removed(run: StepRun, workflow: Any, execution: Any, now: Any) -> None:
    """Skip an execution of a removed step; schedule the next one (R-EVO-02)."""
    run.logger.info(
        "step %r was removed (step.removed), skipping it", execution.step_name
    )
    execution.write_metadata("skipped_because", "step removed")
    transitions.apply(
        transitions.SKIP_REMOVED_STEP, now, workflow=workflow, execution=execution
    )
    run.session.flush()
    scheduling.schedule_next_step(run.session, workflow, after=execution.step_name)
    run.note_written(execution)
    run.session.commit()


def _lock_with_lookup_retries(run: StepRun) -> tuple[Any, Any, bool | None]:
    """Lock (workflow, execution), retrying a missing row (R-EXE-10, R-JOB-20).

    Returns ``(workflow, execution, hero present)``, the last None when the
    hero was not probed (R-EXE-83); ``(None, None, None)`` after logging a
    warning when the execution is still missing after ``lookup_attempts``
    tries (or the id is None).
    """
    session = run.session
    attempts = run.lookup_attempts if run.execution_id is not None else 0
    heroes = hero_probes.claim_probes(session)
    for attempt in range(attempts):
        workflow, execution, present = (
            row_locks.lock_workflow_and_execution_probing_heroes(
                session, run.execution_id, heroes
            )
        )
        if execution is not None:
            return workflow, execution, present
        # End the transaction so that the next attempt sees new commits.
        session.rollback()
        if attempt + 1 < attempts:
            time.sleep(run.lookup_delay_seconds)
    as_tagged(run.base_logger or _log).warning(
        "step execution %r not found after %d attempt(s); nothing to do",
        run.execution_id,
        attempts,
    )
    return None, None, None


def _preconditions(run: StepRun, workflow: Any, execution: Any, step: Any) -> bool:
    """Evaluate cancel conditions and skip_if; return True if they ended it.

    Emits the ``precondition`` signal after the outcome is committed (R-SIG-02);
    a ``passed`` outcome is emitted once the claim commits.
    """
    session = run.session
    now = clock.now()
    definitions = type(workflow).__geneva_definitions__
    run.events.set_payload_base(workflow, execution, step)
    started_at, started = clock.now(), time.monotonic()
    skip = False
    condition = None
    evaluating = "cancel condition"
    try:
        with step_context(workflow.id, "conditions"):
            condition = evaluate_cancel_conditions(
                workflow, definitions.cancel_conditions
            )
            if condition is None:
                evaluating = "skip condition"
                skip = step.should_skip(workflow)
    except Exception as error:
        run.trace_error(error)  # R-OTEL-13
        if database_outages.connection_lost(error) is not None:
            raise  # R-FLT-01: a lost connection is no condition's failure
        if transactions.database_error(
            error
        ) is not None and not _relock_after_database_error(
            run, error, workflow, execution
        ):
            return True
        timing = executor_events.timing(started_at, started)
        if hero_missing.hero_gone(workflow):
            # The hero was deleted after the check above (R-HERO-07).
            hero_missing.cancel(
                run, workflow, execution, step, now, error=error, raised_by=evaluating
            )
            run.events.emit(signals.precondition, timing, outcome="canceled")
            return True
        # Logged with the policy decision by apply_policy (R-LOG-06).
        result = outcomes.resolve(run, workflow, execution, step, error)
        outcomes.apply_policy(
            run, workflow, execution, step, result, error, "precondition"
        )
        session.commit()
        run.events.emit(
            signals.precondition, timing, outcome="exception", exception=error
        )
        run.events.report_pending()
        raise _AlreadyHandled(error, result) from error
    timing = executor_events.timing(started_at, started)
    if condition is not None:
        run.logger.info("cancel condition %s is true", describe_condition(condition))
        outcomes.transition(
            run, transitions.CANCEL_BEFORE_STEP, now, workflow, execution, step
        )
        execution.write_metadata(
            "precondition",
            {"outcome": "canceled", "condition": describe_condition(condition)},
        )
        outcomes.commit_resolved(run, workflow, execution, step)
        run.events.emit(signals.precondition, timing, outcome="canceled")
        return True
    if skip:
        run.logger.info("skip condition holds, skipping step %r", step.name)
        execution.write_metadata(
            "precondition",
            {"outcome": "skipped", "condition": step.skip_condition_description()},
        )
        outcomes.transition_and_commit(
            run, transitions.SKIP_BEFORE_STEP, now, workflow, execution, step
        )
        run.events.emit(signals.precondition, timing, outcome="skipped")
        return True
    run.passed_timing = timing
    return False


def _relock_after_database_error(
    run: StepRun, error: Exception, workflow: Any, execution: Any
) -> bool:
    """Lock the rows again after a precondition failed in the database.

    The condition's statement may have left the transaction unusable
    (PostgreSQL aborts it; a MySQL/MariaDB deadlock rolls it back, releasing
    the locks), so its policy (R-EXE-23) is applied in a fresh transaction:
    rolled back, the workflow and execution are locked and re-read into the
    same instances, and the checks of R-EXE-11/12 applied again.

    Args:
        run: The run.
        error: What the condition raised.
        workflow: The workflow Phase 1 locked (re-read in place).
        execution: The execution Phase 1 locked (re-read in place).

    Returns:
        True when the execution is still ``scheduled`` and its workflow
        ``ready`` or ``performing``: apply the policy. False when it changed
        meanwhile (nothing is written; a redelivery would end the same way).
    """
    session = run.session
    session_transactions.rollback_after_error(session, error)
    locked_workflow, locked = row_locks.lock_workflow_and_execution(
        session, run.execution_id
    )
    if (
        locked is execution
        and locked_workflow is workflow
        and execution.state == StepExecutionState.SCHEDULED
        and workflow.state in _RUNNABLE_WORKFLOW_STATES
    ):
        return True
    run.logger.warning(
        "precondition raised %s; the execution changed meanwhile, leaving it",
        type(error).__name__,
    )
    session.rollback()
    return False


def _prepare_failed(
    run: StepRun, workflow: Any, execution: Any, step: Any, error: Exception
) -> PolicyResult:
    """Record, fail the execution, apply the policy (R-EXE-30..32).

    Returns:
        The applied policy result, for the re-raise decision (R-EXE-50).
    """
    session = run.session
    now = clock.now()
    run.trace_error(error)  # R-OTEL-13
    try:
        error_recording.record_error(execution, error)
        # Phase 1 read it `scheduled` under the lock; a precondition's skip or
        # cancel that raised halfway may have written it in memory since.
        transitions.apply(
            transitions.PREPARE_FAILED,
            now,
            execution=execution,
            read_state=StepExecutionState.SCHEDULED,
        )
        if step is None:
            step = type(workflow).step_collection().named(execution.step_name)
        if step is not None:
            result = outcomes.resolve(run, workflow, execution, step, error)
        else:
            result = PolicyResult(
                action="pause", wait=None, terminal=False, report="always"
            )
            policy_decisions.record_decision(
                execution,
                result,
                {"source": "default", "index": None, "matched_by": None},
                count=0,
                cap=None,
                handler=None,
                reporter=run.settings.error_reporter,
            )
        what = "prepare phase raised"
        task_failures.log_captured(run.logger, error, result, what)
        action = result.action
        if action == "reattempt":
            execution.write_metadata("reattempt_reason", "prepare")
        schedules = transitions.apply(
            _PREPARE_POLICY.get(action, transitions.PREPARE_POLICY_PAUSE),
            now,
            workflow=workflow,
        )
        if schedules is not transitions.Schedules.NOTHING:
            session.flush()
        if schedules is transitions.Schedules.SAME_STEP:
            assert step is not None  # noqa: S101 - a reattempt result needs a step
            if (
                step.is_resumable
                and column_detection.optional_columns(session).resumable
            ):
                scheduling.create_successor_execution(
                    session, workflow, execution, wait=result.wait
                )
            else:
                scheduling.create_step_execution(
                    session, workflow, step, wait=result.wait
                )
        elif schedules is transitions.Schedules.NEXT_STEP:
            scheduling.schedule_next_step(session, workflow)
        if should_report(result):
            run.reports.append((error, {}, execution.id))
        outcomes.commit_resolved(run, workflow, execution, step)
    except BaseException:
        session.rollback()
        task_failures.log_unrecorded(run.logger, error, "prepare phase raised")
        raise
    run.events.report_pending()
    return result
