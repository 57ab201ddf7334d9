"""The executor: claim a step execution, run its body, record the outcome (SPEC §7).

Three phases, each with its own transaction:

1. **prepare** (locked): duplicate/stale deliveries end here without any change
   (R-EXE-11), early ones are left for their time (R-EXE-18); then workflow
   state, hero, step definition and conditions are checked, and the execution
   moves to ``in_progress`` and is committed before any user code of the body
   runs (R-EXE-10..24).
2. **run** (no locks): hooks and body; the body's writes are committed (or rolled
   back after an exception) before finalization (R-EXE-33..39).
3. **finalize** (locked): the outcome is applied, the next execution is created,
   and after the commit a policy-handled exception is re-raised as ``reraise``
   says (R-EXE-40..51, :mod:`flask_geneva.task_failures`).

This module imports neither Celery nor Flask-Admin; it needs a Flask app context
for the session and settings.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva import clock
from flask_geneva import dispatch
from flask_geneva import early_delivery
from flask_geneva import executor_events
from flask_geneva import operator_finalize
from flask_geneva import policy_decisions
from flask_geneva import reporting
from flask_geneva import scheduling
from flask_geneva import signals
from flask_geneva import store
from flask_geneva import task_failures
from flask_geneva import transitions
from flask_geneva.dsl.conditions import describe_condition
from flask_geneva.dsl.conditions import evaluate_cancel_conditions
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.exceptions import StepNotDefinedError
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.flow_control import step_context
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.policy_resolution import PolicyResult
from flask_geneva.policy_resolution import should_report
from flask_geneva.runtime import current_state
from flask_geneva.tagged_logging import execution_logger

__all__ = ["Executor"]

_log = logging.getLogger("flask_geneva")

_RUNNABLE_WORKFLOW_STATES = (WorkflowState.READY, WorkflowState.PERFORMING)
_POLICY_TRANSITIONS = {
    "reattempt": transitions.REATTEMPT,
    "cancel": transitions.FAIL_AND_CANCEL,
    "skip": transitions.SKIP,
    "finish": transitions.FINISH,
}
_SIGNAL_TRANSITIONS = {
    "cancel": transitions.CANCEL_SIGNAL,
    "skip": transitions.SKIP,
    "finish": transitions.FINISH,
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


@dataclasses.dataclass
class _BodyResult:
    """How the body ended (R-EXE-35)."""

    kind: str  # "completed" | "signal" | "interrupted" | "exception"
    signal: FlowControlSignal | None = None
    interrupt: StepInterrupt | None = None
    error: Exception | None = None

    @property
    def label(self) -> str:
        if self.kind == "signal" and self.signal is not None:
            return "finished" if self.signal.action == "finish" else self.signal.action
        return self.kind


class _AlreadyHandled(BaseException):
    """Carries a condition exception whose policy is already applied (R-EXE-24)."""

    def __init__(self, error: Exception, result: PolicyResult) -> None:
        super().__init__(error)
        self.error = error
        self.result = result


class Executor:
    """Runs one step execution through prepare, body and finalize (SPEC §7)."""

    @classmethod
    def execute(
        cls,
        execution_or_id: Any,
        *,
        logger: Any = None,
        interruptible: bool = True,
        max_iterations: int | None = None,
        lookup_attempts: int = 1,
        lookup_delay_seconds: float = 0.0,
        reraise: str = task_failures.RERAISE_ALWAYS,
        run_early: bool = False,
    ) -> None:
        """Run the step execution ``execution_or_id`` (an instance or its id).

        The executor owns the session for the call: an open transaction is committed
        first, the claim is committed before the body runs, and the outcome is
        committed in a fresh transaction (R-EXE-38). No row lock is held while the
        body runs.

        Args:
            execution_or_id: A ``StepExecution`` or its primary key.
            logger: Base logger or adapter whose tags come first (R-LOG-03); default
                ``logging.getLogger("flask_geneva")``.
            interruptible: False makes resumable steps ignore interruption checks
                (test helpers, R-INT-01).
            max_iterations: Overrides a resumable step's ``max_iterations``.
            lookup_attempts: How many times phase 1 tries to find and lock the
                execution before giving up with a warning (R-JOB-20: a worker can
                receive a task before the row is committed). The lookup is the
                phase-1 lock itself, so a found row costs no extra statement.
            lookup_delay_seconds: Seconds slept between two lookup attempts (none
                after the last).
            reraise: Which policy-handled exceptions are re-raised after the
                commit (R-EXE-50 amended): ``"always"`` (the default here, so
                direct callers and the test helpers see every step exception) or
                ``"unhandled"`` (only those ending in a pause, a cancel or a
                terminal result; the Celery task passes ``GENEVA_TASK_RERAISE``).
            run_early: Run the execution even before its ``scheduled_for`` (the
                test helpers, R-TH-01). By default an execution delivered more than
                ``GENEVA_CLOCK_SKEW_TOLERANCE`` before its time does not run and is
                published again for its time (R-EXE-18).

        Raises:
            Exception: The step body's (or condition's or prepare phase's)
                exception, after its policy was applied and committed, when
                ``reraise`` asks for it (R-EXE-24, R-EXE-30, R-EXE-50).
            ValueError: ``reraise`` is not ``"always"`` or ``"unhandled"``.
            StepNotDefinedError: The execution's step is not defined in the class
                (R-EXE-14); the workflow is paused.
            StepConfigurationError: A resumable step without the resumable columns
                (R-EXE-15); the workflow is paused.
        """
        task_failures.validate_reraise_mode(reraise)
        state = current_state()
        session: orm.Session = state.geneva.session
        execution_id = getattr(execution_or_id, "id", execution_or_id)
        run = _Run(
            session=session,
            execution_id=execution_id,
            base_logger=logger,
            interruptible=interruptible,
            max_iterations=max_iterations,
            lookup_attempts=lookup_attempts,
            lookup_delay_seconds=lookup_delay_seconds,
            reraise=reraise,
            run_early=run_early,
        )
        try:
            run.execute()
        finally:
            dispatch.run_eager_queue()


class _Run:
    def __init__(
        self,
        *,
        session: orm.Session,
        execution_id: Any,
        base_logger: Any,
        interruptible: bool,
        max_iterations: int | None,
        lookup_attempts: int = 1,
        lookup_delay_seconds: float = 0.0,
        reraise: str = task_failures.RERAISE_ALWAYS,
        run_early: bool = False,
    ) -> None:
        self.session = session
        self.reraise = reraise
        self.run_early = run_early
        self.lookup_attempts = max(int(lookup_attempts), 1)
        self.lookup_delay_seconds = lookup_delay_seconds
        self.execution_id = execution_id
        self.base_logger = base_logger
        self.interruptible = interruptible
        self.max_iterations = max_iterations
        self.logger: Any = _log
        self._logger_targets: list[Any] = []
        #: The (workflow, execution) the current ``self.logger`` is tagged for.
        self._logger_for: tuple[Any, Any] | None = None
        # (error, extra context, execution id whose policy record gets report_error)
        self.events = executor_events.RunEvents(session)
        # (error, extra context, execution id whose policy record gets
        # report_error), reported after the commit (R-REP-02).
        self.reports = self.events.reports
        self._finalizing = False
        self._error_context_token: Any = None
        self._passed_timing: dict[str, Any] = {}
        self.iterable_step: Any = None

    # -- driver ------------------------------------------------------------------------

    def execute(self) -> None:
        session = self.session
        if session.in_transaction():
            session.commit()
        try:
            prepared = self._prepare()
            if prepared is None:
                return
            workflow, execution, step = prepared
            body = self._run_body(workflow, execution, step)
            self._finalize(step, body)
        finally:
            self._restore_loggers()
            if self._error_context_token is not None:
                reporting.reset_error_context(self._error_context_token)
                self._error_context_token = None

    # -- loggers (R-EXE-01) ------------------------------------------------------------

    def _install_loggers(self, workflow: Any, execution: Any) -> None:
        # Phases 1 and 3 hand back the same instances (the lock re-reads into
        # them), so the tagged adapter is built once per run.
        tagged_for = self._logger_for
        if tagged_for is None or not (
            tagged_for[0] is workflow and tagged_for[1] is execution
        ):
            self.logger = execution_logger(workflow, execution, self.base_logger)
            self._logger_for = (workflow, execution)
        adapter = self.logger
        for target in (workflow, execution):
            if target not in self._logger_targets:
                self._logger_targets.append(target)
            target.__dict__["_geneva_logger"] = adapter

    def _restore_loggers(self) -> None:
        for target in self._logger_targets:
            target.__dict__.pop("_geneva_logger", None)
        self._logger_targets.clear()

    # -- phase 1 -----------------------------------------------------------------------

    def _prepare(self) -> tuple[Any, Any, Any] | None:
        session = self.session
        workflow, execution = self._lock_with_lookup_retries()
        if execution is None:
            return None
        now = clock.now()
        self._install_loggers(workflow, execution)
        if self._error_context_token is None:
            self._error_context_token = reporting.set_error_context(workflow, execution)

        if execution.state != StepExecutionState.SCHEDULED:
            # Duplicate, stale or already handled delivery: change nothing (R-EXE-11).
            self.logger.info("already %s, skipping duplicate job", execution.state)
            session.rollback()
            return None

        if not self.run_early and early_delivery.defer_early_delivery(
            session,
            workflow,
            execution,
            now=now,
            tolerance=current_state().config.clock_skew_tolerance,
            logger=self.logger,
        ):
            # Delivered before its time (R-EXE-18): published again, not run.
            session.commit()
            return None

        if workflow.state not in _RUNNABLE_WORKFLOW_STATES:
            self.logger.info(
                "workflow is %s, canceling the execution (R-EXE-12)", workflow.state
            )
            transitions.apply(
                transitions.DROP_FOR_STOPPED_WORKFLOW,
                now,
                workflow=workflow,
                execution=execution,
            )
            session.commit()
            return None

        raise_after_commit: BaseException | None = None
        step = None
        try:
            if not type(workflow).may_proceed_without_hero and workflow.hero is None:
                self.logger.info("hero is gone, canceling the workflow (R-EXE-13)")
                transitions.apply(
                    transitions.CANCEL_BEFORE_STEP,
                    now,
                    workflow=workflow,
                    execution=execution,
                )
                session.commit()
                return None

            step = workflow.steps.named(execution.step_name)
            if step is None:
                message = (
                    f"Step '{execution.step_name}' is not defined in {workflow.type}"
                    + scheduling.unregistered_type_hint(workflow)
                )
                execution.error_message = message
                transitions.apply(
                    transitions.FAIL_UNRUNNABLE,
                    now,
                    workflow=workflow,
                    execution=execution,
                )
                error = StepNotDefinedError(
                    message,
                    workflow_id=workflow.id,
                    step_execution_id=execution.id,
                    step_name=execution.step_name,
                )
                error.workflow, error.step_execution = workflow, execution
                raise_after_commit = error
            elif step.is_resumable and not store.optional_columns(session).resumable:
                message = MISSING_COLUMNS_MESSAGE.format(
                    step=step.name, type=workflow.type
                )
                execution.error_message = message
                transitions.apply(
                    transitions.FAIL_UNRUNNABLE,
                    now,
                    workflow=workflow,
                    execution=execution,
                )
                raise_after_commit = StepConfigurationError(message)
            else:
                ended = self._preconditions(workflow, execution, step)
                if ended:
                    return None
                transitions.apply(
                    transitions.CLAIM,
                    now,
                    workflow=workflow,
                    execution=execution,
                    current_step_name=step.name,
                )
        except _AlreadyHandled as handled:
            # R-EXE-24: the condition's exception, after its policy was committed.
            if task_failures.should_reraise(self.reraise, handled.result):
                raise handled.error from None
            return None
        except sa_exc.SQLAlchemyError:
            session.rollback()
            raise
        except Exception as error:
            result = self._prepare_failed(workflow, execution, step, error)
            if task_failures.should_reraise(self.reraise, result):
                raise
            return None
        if raise_after_commit is not None:
            session.commit()
            raise raise_after_commit
        # The claimed rows stay loaded: the body gets them without reloading, and
        # no transaction (no snapshot) is open when the body starts.
        store.commit_keeping_state(session)
        self.events.emit(signals.precondition, self._passed_timing, outcome="passed")
        return workflow, execution, step

    def _lock_with_lookup_retries(self) -> tuple[Any, Any]:
        """Lock (workflow, execution), retrying a missing row (R-EXE-10, R-JOB-20).

        Returns ``(None, None)`` after logging a warning when the execution is
        still missing after ``lookup_attempts`` tries (or the id is None).
        """
        session = self.session
        attempts = self.lookup_attempts if self.execution_id is not None else 0
        for attempt in range(attempts):
            workflow, execution = store.lock_workflow_and_execution(
                session, self.execution_id
            )
            if execution is not None:
                return workflow, execution
            # End the transaction so that the next attempt sees new commits.
            session.rollback()
            if attempt + 1 < attempts:
                time.sleep(self.lookup_delay_seconds)
        (self.base_logger or _log).warning(
            "step execution %r not found after %d attempt(s); nothing to do",
            self.execution_id,
            attempts,
        )
        return None, None

    def _preconditions(self, workflow: Any, execution: Any, step: Any) -> bool:
        """Evaluate cancel conditions and skip_if; return True if they ended it.

        Emits the ``precondition`` signal after the outcome is committed (R-SIG-02);
        a ``passed`` outcome is emitted once the claim commits.
        """
        session = self.session
        now = clock.now()
        definitions = type(workflow).__geneva_definitions__
        self.events.set_payload_base(workflow, execution, step)
        started_at, started = clock.now(), time.monotonic()
        skip = False
        condition = None
        try:
            with step_context(workflow.id, "conditions"):
                condition = evaluate_cancel_conditions(
                    workflow, definitions.cancel_conditions
                )
                if condition is None:
                    skip = step.should_skip(workflow)
        except Exception as error:
            # Logged with the policy decision by _apply_policy (R-LOG-06).
            timing = executor_events.timing(started_at, started)
            result = self._resolve(
                workflow, execution, step, error, reason="precondition"
            )
            self._apply_policy(workflow, execution, step, result, error, "precondition")
            session.commit()
            self.events.emit(
                signals.precondition, timing, outcome="exception", exception=error
            )
            self.events.report_pending()
            raise _AlreadyHandled(error, result) from error
        timing = executor_events.timing(started_at, started)
        if condition is not None:
            self.logger.info(
                "cancel condition %s is true", describe_condition(condition)
            )
            transitions.apply(
                transitions.CANCEL_BEFORE_STEP,
                now,
                workflow=workflow,
                execution=execution,
            )
            execution.write_metadata(
                "precondition",
                {"outcome": "canceled", "condition": describe_condition(condition)},
            )
            session.commit()
            self.events.emit(signals.precondition, timing, outcome="canceled")
            return True
        if skip:
            self.logger.info("skip condition holds, skipping step %r", step.name)
            execution.write_metadata(
                "precondition",
                {"outcome": "skipped", "condition": step.skip_condition_description()},
            )
            self._perform(
                transitions.apply(
                    transitions.SKIP_BEFORE_STEP,
                    now,
                    workflow=workflow,
                    execution=execution,
                ),
                workflow,
                execution,
                step,
            )
            session.commit()
            self.events.emit(signals.precondition, timing, outcome="skipped")
            return True
        self._passed_timing = timing
        return False

    def _prepare_failed(
        self, workflow: Any, execution: Any, step: Any, error: Exception
    ) -> PolicyResult:
        """Record, fail the execution, apply the policy (R-EXE-30..32).

        Returns:
            The applied policy result, for the re-raise decision (R-EXE-50).
        """
        session = self.session
        now = clock.now()
        try:
            store.record_error(execution, error)
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
                result = self._resolve(
                    workflow, execution, step, error, reason="prepare"
                )
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
                )
            what = "prepare phase raised"
            task_failures.log_captured(self.logger, error, result, what)
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
                if step.is_resumable and store.optional_columns(session).resumable:
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
                self.reports.append((error, {}, execution.id))
            session.commit()
        except BaseException:
            session.rollback()
            task_failures.log_unrecorded(self.logger, error, "prepare phase raised")
            raise
        self.events.report_pending()
        return result

    # -- policies (R-EXE-23/45, R-POL) -------------------------------------------------

    def _resolve(
        self, workflow: Any, execution: Any, step: Any, error: Exception, *, reason: str
    ) -> PolicyResult:
        """Resolve, decide and record the policy for ``error`` (R-PDR-01)."""
        return policy_decisions.resolve(
            self.session, self.logger, self.reports, workflow, execution, step, error
        )

    def _apply_policy(
        self,
        workflow: Any,
        execution: Any,
        step: Any,
        result: PolicyResult,
        error: Exception,
        reason: str,
    ) -> None:
        """Apply a policy result to the execution and workflow (R-EXE-45)."""
        now = clock.now()
        action = result.action
        what = "condition raised" if reason == "precondition" else "encountered"
        task_failures.log_captured(self.logger, error, result, what)
        if action == "reattempt":
            store.record_exception_metadata(execution, error)
            execution.write_metadata("reattempt_reason", reason)
        elif action != "finish":
            store.record_error(execution, error)
        transition = _POLICY_TRANSITIONS.get(action, transitions.FAIL_AND_PAUSE)
        self._transition(transition, now, workflow, execution, step, wait=result.wait)
        if should_report(result):
            self.reports.append((error, {}, execution.id))

    def _schedule_next(self, workflow: Any, step: Any) -> None:
        """Schedule the step after ``step`` (R-SCH-06) from prepare or finalize."""
        if not self._finalizing:
            # The execution being ended is still `scheduled` in the database: flush
            # its new state so the stray-cancel UPDATE does not touch it.
            self.session.flush()
        scheduling.schedule_next_step(
            self.session, workflow, after=step.name, cancel_stray=not self._finalizing
        )

    def _transition(
        self,
        transition: transitions.Transition,
        now: Any,
        workflow: Any,
        execution: Any,
        step: Any,
        *,
        wait: timedelta | None = None,
        **workflow_attributes: Any,
    ) -> None:
        """Apply ``transition`` to the locked rows and schedule what it says.

        Args:
            transition: The table entry (R-EXE-44/45, R-FC-10..15).
            now: The transition time.
            workflow: The locked workflow.
            execution: The locked execution.
            step: The step definition of ``execution``.
            wait: The wait of a reattempt or continuation.
            **workflow_attributes: Extra workflow attributes to set.

        Raises:
            InvalidStateTransition: A row is not in a from-state of the entry.
        """
        schedules = transitions.apply(
            transition,
            now,
            workflow=workflow,
            execution=execution,
            **workflow_attributes,
        )
        self._perform(schedules, workflow, execution, step, wait=wait)

    def _perform(
        self,
        schedules: transitions.Schedules,
        workflow: Any,
        execution: Any,
        step: Any,
        *,
        wait: timedelta | None = None,
    ) -> None:
        """Schedule what a transition entry says (its ``schedules``)."""
        kind = transitions.Schedules
        if schedules is kind.NEXT_STEP:
            self._schedule_next(workflow, step)
        elif schedules is kind.SAME_STEP:
            self._create_reattempt(workflow, execution, step, wait)
        elif schedules is kind.SUCCESSOR:
            scheduling.create_successor_execution(
                self.session, workflow, execution, wait=wait, cancel_stray=False
            )
        elif schedules is not kind.NOTHING:  # pragma: no cover - not an engine entry
            raise AssertionError(f"the executor does not schedule {schedules!r}")

    def _create_reattempt(
        self, workflow: Any, execution: Any, step: Any, wait: timedelta | None
    ) -> None:
        if not self._finalizing:
            self.session.flush()
        cancel_stray = not self._finalizing
        if step.is_resumable and store.optional_columns(self.session).resumable:
            scheduling.create_successor_execution(
                self.session, workflow, execution, wait=wait, cancel_stray=cancel_stray
            )
        else:
            scheduling.create_step_execution(
                self.session, workflow, step, wait=wait, cancel_stray=cancel_stray
            )

    # -- phase 2 -----------------------------------------------------------------------

    def _run_body(self, workflow: Any, execution: Any, step: Any) -> _BodyResult:
        session = self.session
        # End the read transaction those loads opened, keeping the loaded state: the
        # body starts without a database snapshot. On SQLite (WAL) a snapshot taken
        # here, before the body, could not be upgraded to a write once another
        # connection committed meanwhile (e.g. an operator pausing the workflow),
        # so the body's own writes would fail to commit.
        if session.in_transaction():
            store.commit_keeping_state(session)
        self._install_loggers(workflow, execution)
        result = _BodyResult("completed")
        started_at, started = clock.now(), time.monotonic()
        with step_context(workflow.id, "body", resumable=step.is_resumable):
            try:
                workflow.before_step_execution(execution)
                with workflow.around_step_execution(execution):
                    result = self._invoke(workflow, execution, step)
            except FlowControlSignal as signal:
                result = _BodyResult("signal", signal=signal)
            except StepInterrupt as interrupt:
                result = _BodyResult("interrupted", interrupt=interrupt)
            except Exception as error:  # noqa: BLE001 - R-EXE-37: hook errors count as body errors
                self.logger.error("hook raised %s: %s", type(error).__name__, error)
                result = _BodyResult("exception", error=error)

        # R-EXE-38: persist the body's writes, or discard them after an exception.
        if result.kind == "exception":
            session.rollback()
        else:
            try:
                _commit_if_pending(session)
            except Exception as commit_error:  # noqa: BLE001 - becomes the captured error
                session.rollback()
                self.logger.error(
                    "committing the step's writes failed: %s", commit_error
                )
                result = _BodyResult("exception", error=commit_error)
        self.events.emit_step_signal(
            result, executor_events.timing(started_at, started)
        )

        try:
            with step_context(workflow.id, "body", resumable=step.is_resumable):
                workflow.after_step_execution(execution)
            _commit_if_pending(session)
        except Exception as hook_error:  # noqa: BLE001 - R-EXE-37: logged and reported
            session.rollback()
            self.logger.error(
                "after_step_execution raised %s: %s",
                type(hook_error).__name__,
                hook_error,
            )
            self.reports.append((hook_error, {"hook": "after_step_execution"}, None))
        except FlowControlSignal:
            session.rollback()
            self.logger.warning("flow control in after_step_execution is ignored")
        self.logger.info(
            "Finished step with outcome %s in %.3fs",
            result.label,
            time.monotonic() - started,
        )
        return result

    def _invoke(self, workflow: Any, execution: Any, step: Any) -> _BodyResult:
        try:
            if step.is_resumable:
                from flask_geneva import iteration

                iterable_step = iteration.build_iterable_step(
                    self, workflow, execution, step
                )
                self.iterable_step = iterable_step
                step.invoke(workflow, iterable_step)
            else:
                step.invoke(workflow)
        except FlowControlSignal as signal:
            return _BodyResult("signal", signal=signal)
        except StepInterrupt as interrupt:
            return _BodyResult("interrupted", interrupt=interrupt)
        except Exception as error:  # noqa: BLE001 - R-EXE-35: captured for the policy
            # Logged with its policy decision (task_failures.log_captured) or, if
            # the state changed under the step, when it is dropped (_drop_error).
            return _BodyResult("exception", error=error)
        return _BodyResult("completed")

    # -- phase 3 -----------------------------------------------------------------------

    def _finalize(self, step: Any, body: _BodyResult) -> None:
        session = self.session
        self.events.finalize_started = (
            clock.now(),
            time.monotonic(),
        )  # R-SIG-01 timing
        workflow, execution = store.lock_workflow_and_execution(
            session, self.execution_id
        )
        if execution is None:
            _log.warning(
                "step execution %s vanished during the step", self.execution_id
            )
            session.rollback()
            return
        self._install_loggers(workflow, execution)
        now = clock.now()
        error = body.error
        result: PolicyResult | None = None
        try:
            if execution.state != StepExecutionState.IN_PROGRESS:
                self.logger.warning(
                    "execution changed to %s during the step; leaving it (R-EXE-41)",
                    execution.state,
                )
                states = (workflow.state, execution.state)
                session.rollback()
                self.events.emit_finalize(states, None)
                self.events.drop_error(self.logger, error)
                return
            if workflow.state != WorkflowState.PERFORMING:
                # An operator paused, canceled or finished the workflow while the
                # body ran: record what the body did; their state wins (R-EXE-42).
                self.logger.warning(
                    "workflow changed to %s during the step (R-EXE-42)", workflow.state
                )
                if body.kind == "signal" and body.signal is not None:
                    self._record_signal(execution, body.signal)
                operator_finalize.finalize_under_operator_state(
                    session,
                    workflow,
                    execution,
                    step,
                    kind=body.kind,
                    signal=body.signal,
                    error=error,
                    record_interrupt=lambda reason: self._record_interrupt(
                        execution, body, reason=reason
                    ),
                    now=now,
                )
                store.commit_keeping_state(session)
                self.events.emit_finalize((workflow.state, execution.state), None)
                self.events.drop_error(self.logger, error)
                return

            # From here on this execution is the workflow's one active execution,
            # so new executions need no stray-cancel UPDATE, and all changes go out
            # in one flush (UPDATEs before the INSERT). R-EXE-46 clears
            # current_step_name; the step just done is passed explicitly instead.
            self._finalizing = True
            workflow.current_step_name = None
            if body.kind == "completed":
                self._transition(transitions.COMPLETE, now, workflow, execution, step)
            elif body.kind == "interrupted":
                assert body.interrupt is not None  # noqa: S101 - kind implies it
                self._record_interrupt(execution, body)
                self._transition(
                    transitions.CONTINUE,
                    clock.now(),
                    workflow,
                    execution,
                    step,
                    wait=body.interrupt.wait,
                )
            elif body.kind == "signal":
                assert body.signal is not None  # noqa: S101 - kind implies it
                self._apply_signal(workflow, execution, step, body.signal)
            else:
                assert error is not None  # noqa: S101 - kind implies it
                result = self._resolve(
                    workflow, execution, step, error, reason="exception_policy"
                )
                self._apply_policy(
                    workflow, execution, step, result, error, "exception_policy"
                )
            store.commit_keeping_state(session)
        except BaseException as finalize_error:
            store.rollback_after_error(session, finalize_error)
            if error is not None:
                task_failures.log_unrecorded(self.logger, error, "encountered")
            raise
        self.events.emit_finalize((workflow.state, execution.state), error)
        self.events.report_pending()
        if error is not None and task_failures.should_reraise(self.reraise, result):
            raise error

    def _apply_signal(
        self, workflow: Any, execution: Any, step: Any, signal: FlowControlSignal
    ) -> None:
        """Apply an in-step flow-control signal (R-FC-10..15)."""
        now = clock.now()
        action = signal.action
        self._record_signal(execution, signal)
        resumable = step.is_resumable
        wait = None
        if action == "pause":
            transition = (
                transitions.PAUSE_RESUMABLE_SIGNAL
                if resumable
                else transitions.PAUSE_SIGNAL
            )
        elif action == "reattempt":
            assert isinstance(signal, ReattemptSignal)  # noqa: S101 - action implies it
            if resumable and signal.rewind:
                execution.cursor = None
            execution.write_metadata("reattempt_reason", "flow_control")
            transition, wait = transitions.REATTEMPT, signal.wait
        elif action == "suspend":
            assert isinstance(signal, SuspendSignal)  # noqa: S101 - action implies it
            self._record_interrupt(execution, None, reason="suspend")
            transition, wait = transitions.CONTINUE, signal.wait
            now = clock.now()
        elif action in _SIGNAL_TRANSITIONS:
            transition = _SIGNAL_TRANSITIONS[action]
        else:  # pragma: no cover - every FlowControlSignal subclass is handled above
            raise AssertionError(f"unknown flow control action {action!r}")
        self._transition(transition, now, workflow, execution, step, wait=wait)

    @staticmethod
    def _record_signal(execution: Any, signal: FlowControlSignal) -> None:
        """Write the ``flow_control`` record of R-PDR-03."""
        wait = getattr(signal, "wait", None)
        execution.write_metadata(
            "flow_control",
            {
                "action": signal.action,
                "wait_seconds": wait.total_seconds() if wait is not None else None,
                "rewind": bool(getattr(signal, "rewind", False)),
            },
        )

    def _record_interrupt(
        self, execution: Any, body: _BodyResult | None, *, reason: str | None = None
    ) -> None:
        """Write the interrupt record of R-PDR-03."""
        iterable_step = self.iterable_step
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


def _commit_if_pending(session: orm.Session) -> None:
    """Commit only if the session has a transaction or unflushed changes.

    A commit with nothing to do would still expire every loaded instance, and
    the next attribute access would reload it.
    """
    if session.in_transaction() or session.new or session.dirty or session.deleted:
        session.commit()
