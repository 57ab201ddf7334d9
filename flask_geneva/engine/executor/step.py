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
   says (R-EXE-40..51, :mod:`flask_geneva.policies.task_failures`). On PostgreSQL a
   Celery task's finalize of a completed body may instead send one guarded
   statement without the lock, falling back to the locked path when the guard
   fails (R-EXE-81).

This module imports neither Flask nor Celery: it runs with the
:class:`~flask_geneva.db.context.EngineContext` its caller passes in.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any
from typing import TypeVar

from sqlalchemy import orm

from flask_geneva import signals
from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core import transactions
from flask_geneva.db import locks as store
from flask_geneva.db import row_updates
from flask_geneva.db import session_transactions
from flask_geneva.db import write_path as core_rows
from flask_geneva.db.context import EngineContext
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.executor.continuation import ClaimedStep
from flask_geneva.engine.executor.continuation import ContinuationSteps
from flask_geneva.engine.executor.continuation import InlineBudget
from flask_geneva.engine.executor.continuation import InlineCheckFailed
from flask_geneva.engine.executor.run import BodyResult
from flask_geneva.engine.flow_control import step_context
from flask_geneva.engine.operators import finalize as operator_finalize
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.models.workflow import WorkflowMixin
from flask_geneva.policies import task_failures
from flask_geneva.policies.resolution import PolicyResult

__all__ = ["execute_step"]

_log = logging.getLogger("flask_geneva")
_T = TypeVar("_T")


def execute_step(
    context: EngineContext,
    execution_or_id: Any,
    *,
    logger: Any = None,
    interruptible: bool = True,
    max_iterations: int | None = None,
    lookup_attempts: int = 1,
    lookup_delay_seconds: float = 0.0,
    reraise: str = task_failures.RERAISE_ALWAYS,
    run_early: bool = False,
    continue_inline: bool = False,
) -> None:
    """Run the step execution ``execution_or_id`` (an instance or its id).

    The engine's entry point for one step (SPEC §7). The public
    :meth:`flask_geneva.Executor.execute` and the Celery task call it with the
    app's :class:`~flask_geneva.db.context.EngineContext`. The executor owns
    the context's session for the call: an open transaction is committed first,
    the claim is committed before the body runs, and the outcome is committed in
    a fresh transaction (R-EXE-38). No row lock is held while the body runs. The
    whole run uses ``context.settings`` as they were when it started.

    Args:
        context: The settings, publisher and models to run with.
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
        continue_inline: When the step completes and the next one is due now on
            the same queue and priority, claim it in the same transaction and run
            it in this call, up to ``GENEVA_INLINE_CONTINUATION_BUDGET`` and
            ``GENEVA_INLINE_CONTINUATION_MAX_STEPS`` (R-EXE-70..77). The Celery
            task passes True; the default False runs exactly one step.

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
    session = context.session
    execution_id = getattr(execution_or_id, "id", execution_or_id)
    budget = InlineBudget.from_settings(context.settings) if continue_inline else None
    # R-EXE-80: nothing asks whether the executor's own transactions were
    # written in on their connection: they skip that tracking.
    with transactions.executor_transactions(session):
        claimed: ClaimedStep | None = None
        while True:
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
                context=context,
            )
            run.inline_budget = budget
            try:
                claimed = run.execute(claimed)
            finally:
                try:
                    context.run_queued_tasks()
                except BaseException:
                    run.drop_handed_over()  # no next run will hold it (R-WRK-18)
                    raise
            if claimed is None:
                return
            # R-EXE-70: the next step was claimed with this one's outcome; run it here.
            execution_id = claimed.execution.id


class _Run(ContinuationSteps):
    """One step of :func:`execute_step`: the driver, Phase 2 and Phase 3."""

    # -- driver ------------------------------------------------------------------------

    def execute(self, claimed: ClaimedStep | None = None) -> ClaimedStep | None:
        """Run one step; return the next step's execution if it was claimed inline.

        Args:
            claimed: The execution the previous step's finalize claimed inline
                (R-EXE-70); None runs Phase 1 on ``self.execution_id``.
        """
        session = self.session
        if session.in_transaction():
            session.commit()
        handed_over = None
        try:
            prepared = (
                self._adopt_claim(claimed)
                if claimed is not None
                else self._prepare_retrying()
            )
            if prepared is None:
                return None
            workflow, execution, step = prepared
            self._claimed_rows = (workflow, execution)
            self._note_hero(workflow)  # R-EXE-78: probed with finalize's lock
            try:
                body = self._run_body(workflow, execution, step)
            except BaseException as escaped:
                # R-EXE-35: no flow-control signal (those are caught): it
                # propagates, and must not vanish unlogged (R-WRK-18).
                self.logger.error(
                    "step execution %s: %s escaped the step and propagates; the "
                    "execution stays in_progress until recovered (R-EXE-35)",
                    execution.id,
                    type(escaped).__name__,
                    exc_info=escaped,
                )
                raise
            self._finalize(step, body)
            if self.continuation is not None:
                handed_over = self.continuation.execution.id
            return self.continuation
        finally:
            # Committed or not, this run is over (R-WRK-18).
            self._unmark_running(keep=handed_over)
            self._restore_loggers()
            if self._error_context_token is not None:
                error_reporting.reset_error_context(self._error_context_token)
                self._error_context_token = None

    #: The workflow and execution as the claim committed them (R-EXE-81).
    _claimed_rows: tuple[Any, Any] | None = None

    def _prepare_retrying(self) -> tuple[Any, Any, Any] | None:
        """Phase 1, started over when the database chose it as a deadlock victim.

        Nothing of an aborted attempt was committed and no body ran: a retry
        locks, re-reads and re-checks the execution as a redelivery would
        (R-EXE-11, R-EXE-80). Not after an imperative handler ran in it.
        """
        reports, running = len(self.reports), len(self._running)
        return self._retrying(self._prepare, "claim", self.session, reports, running)

    def _retrying(
        self,
        attempt: Callable[[], _T],
        what: str,
        session: orm.Session,
        reports: int,
        running: int,
        **options: Any,
    ) -> _T:
        """R-EXE-80's retry loop (:func:`transactions.retry_on_conflict`) for
        this run's ``what`` ("claim", "finalize"): retried while no user code
        ran in it, rolled back on ``session``, each retry forgetting what the
        aborted attempt left (:meth:`_forget_attempt` of ``reports``,
        ``running``); ``options`` go to the loop."""
        return transactions.retry_on_conflict(
            attempt,
            allowed=lambda: not self._user_code_ran,
            what=f"{what} of step execution {self.execution_id}",
            rollback=functools.partial(
                session_transactions.rollback_after_error, session
            ),
            logger=lambda: self.logger,
            on_retry=lambda: self._forget_attempt(reports, running),
            **options,
        )

    # -- phase 2 -----------------------------------------------------------------------

    def _run_body(self, workflow: Any, execution: Any, step: Any) -> BodyResult:
        session = self.session
        # End the read transaction those loads opened, keeping the loaded state: the
        # body starts without a database snapshot. On SQLite (WAL) a snapshot taken
        # here, before the body, could not be upgraded to a write once another
        # connection committed meanwhile (e.g. an operator pausing the workflow),
        # so the body's own writes would fail to commit.
        if session.in_transaction():
            session_transactions.commit_keeping_state(session)
        self._install_loggers(workflow, execution)
        result = BodyResult("completed")
        before, around, after = _overridden_hooks(workflow)
        started_at, started = clock.now(), time.monotonic()
        with step_context(workflow.id, "body", resumable=step.is_resumable):
            try:
                if before:
                    workflow.before_step_execution(execution)
                if around:
                    with workflow.around_step_execution(execution):
                        result = self._invoke(workflow, execution, step)
                else:
                    result = self._invoke(workflow, execution, step)
            except FlowControlSignal as signal:
                result = BodyResult("signal", signal=signal)
            except StepInterrupt as interrupt:
                result = BodyResult("interrupted", interrupt=interrupt)
            except Exception as error:  # noqa: BLE001 - R-EXE-37: hook errors count as body errors
                self.logger.error("hook raised %s: %s", type(error).__name__, error)
                result = BodyResult("exception", error=error)

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
                result = BodyResult("exception", error=commit_error)
        # Without receivers and without an after hook nothing can write to the
        # session from here on: nothing is left to commit (R-EXE-36, R-SIG-03).
        received = bool(signals.step.receivers)
        if received:
            self.events.emit_step_signal(
                result, executor_events.timing(started_at, started)
            )

        try:
            if after:
                with step_context(workflow.id, "body", resumable=step.is_resumable):
                    workflow.after_step_execution(execution)
            if after or received:
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

    def _invoke(self, workflow: Any, execution: Any, step: Any) -> BodyResult:
        try:
            if step.is_resumable:
                from flask_geneva.engine import iteration

                iterable_step = iteration.build_iterable_step(
                    self, workflow, execution, step
                )
                self.iterable_step = iterable_step
                step.invoke(workflow, iterable_step)
            else:
                step.invoke(workflow)
        except FlowControlSignal as signal:
            return BodyResult("signal", signal=signal)
        except StepInterrupt as interrupt:
            return BodyResult("interrupted", interrupt=interrupt)
        except Exception as error:  # noqa: BLE001 - R-EXE-35: captured for the policy
            # Logged with its policy decision (task_failures.log_captured) or, if
            # the state changed under the step, when it is dropped (_drop_error).
            return BodyResult("exception", error=error)
        return BodyResult("completed")

    # -- phase 3 -----------------------------------------------------------------------

    def _finalize(self, step: Any, body: BodyResult) -> None:
        # The body may have bound a newer context (a geneva call of its own):
        # the outcome is written with the one this run started with (R-CFG-02).
        session = self.context.bind(self.session)
        self.events.finalize_started = (
            clock.now(),
            time.monotonic(),
        )  # R-SIG-01 timing
        error = body.error
        reports, running = len(self.reports), len(self._running)

        def give_up(_: BaseException) -> None:
            if error is not None:
                task_failures.log_unrecorded(self.logger, error, "encountered")

        optimistic = [body.kind == "completed"]

        def attempt() -> tuple[tuple[Any, Any], PolicyResult | None, bool] | None:
            if optimistic[0]:
                # R-EXE-81: once per finalize; a retry (R-EXE-80) takes the lock.
                optimistic[0] = False
                done = self._finalize_optimistically(session, step, reports, running)
                if done is not None:
                    return done
            try:
                return self._finalize_once(session, step, body)
            except InlineCheckFailed as failed:
                # R-EXE-73: the check left the transaction unusable; finalize
                # again without continuing inline (once per run).
                session_transactions.rollback_after_error(session, failed)
                self.logger.warning(
                    "%s; finalizing step execution %s again without continuing inline",
                    failed,
                    self.execution_id,
                )
                self._forget_attempt(reports, running)
                return self._finalize_once(session, step, body)

        # R-EXE-80: a deadlock victim starts over in a fresh transaction that
        # locks, re-reads and re-checks the rows; the body is done. Any error
        # (BaseException) is rolled back, retried or not.
        finalized = self._retrying(
            attempt,
            "finalize",
            session,
            reports,
            running,
            rollback_always=True,
            on_give_up=give_up,
        )
        if finalized is None:
            return
        states, result, left = finalized
        if left:
            self.events.emit_finalize(states, None)
            self.events.drop_error(self.logger, error)
            return
        self.events.emit_finalize(states, error)
        self.events.report_pending()
        if error is not None and task_failures.should_reraise(self.reraise, result):
            raise error

    def _forget_attempt(self, reports: int, running: int) -> None:
        """Undo what a rolled-back claim or finalize attempt left on the run
        (R-EXE-80, R-EXE-73).

        Args:
            reports: How many reports were pending before the attempt.
            running: How many running-set entries the run held before the
                attempt (an inline claim adds one, R-EXE-70).
        """
        del self.reports[reports:]
        for held, execution_id in self._running[running:]:
            held.discard(execution_id)
        del self._running[running:]
        if self.continuation is not None and self.inline_budget is not None:
            self.inline_budget.steps_run -= 1
        self.continuation = None
        self._hero_present = None
        self._finalizing = False

    def _finalize_optimistically(
        self, session: orm.Session, step: Any, reports: int, running: int
    ) -> tuple[tuple[Any, Any], None, bool] | None:
        """Finalize a completed body without the locking read (R-EXE-81).

        ``complete`` and the inline claim (or the next step's scheduling) are
        applied to the rows as the claim committed them, and the one merged
        statement (R-EXE-79) carries the guard that stands in for the lock:
        both rows unchanged since the claim (state and ``updated_at``), and
        the hero present when the next step is claimed inline. The
        execution's attributes the lock would not have read are expired, as
        after the lock (R-EXE-48).

        Returns:
            As :meth:`_finalize_once` for a body that completed; None when the
            rows do not qualify or the guard failed (rolled back, the
            attempt's traces forgotten): the caller takes the locked path.
        """
        claimed = self._claimed_rows
        if claimed is None:
            return None
        workflow, execution = claimed
        guards = self._optimistic_guards(workflow, execution, step)
        if guards is None:
            return None
        session.expire(execution, store.finalize_unread_execution_keys(session))
        core_rows.expect_unchanged_since_claim(session, guards)
        try:
            self._finalizing = True
            workflow.current_step_name = None
            schedules = transitions.apply(
                transitions.COMPLETE,
                clock.now(),
                workflow=workflow,
                execution=execution,
            )
            if guards.hero is not None:
                self._hero_present = True  # the statement's guard checks it
            if not self._continue_inline(workflow, step):
                guards.hero = None  # nothing claimed: the hero is not checked
                self._perform(schedules, workflow, execution, step)
            self._commit_resolved(workflow, execution, step, keep_state=True)
        except row_updates.OptimisticWriteRefused as refused:
            session_transactions.rollback_after_error(session, refused)
            # Refused before any statement, no transaction was rolled back:
            # drop what this attempt applied to the instances all the same.
            session.expire(workflow)
            session.expire(execution)
            self.logger.debug(
                "finalizing step execution %s under lock: %s",
                self.execution_id,
                refused,
            )
            self._forget_attempt(reports, running)
            return None
        finally:
            core_rows.expect_unchanged_since_claim(session, None)
        return (workflow.state, execution.state), None, False

    def _finalize_once(
        self, session: orm.Session, step: Any, body: BodyResult
    ) -> tuple[tuple[Any, Any], PolicyResult | None, bool] | None:
        """One attempt at Phase 3: lock, re-check, apply the outcome, commit.

        Returns:
            None when the execution vanished; else the committed
            ``(workflow state, execution state)``, the policy result, and
            whether the outcome was left to an operator's change (R-EXE-41/42).
        """
        workflow, execution = self._lock_for_finalize(body.kind == "completed")
        if execution is None:
            _log.warning(
                "step execution %s vanished during the step", self.execution_id
            )
            session.rollback()
            return None
        self._install_loggers(workflow, execution)
        now = clock.now()
        error = body.error
        result: PolicyResult | None = None
        if execution.state != StepExecutionState.IN_PROGRESS:
            self.logger.warning(
                "execution changed to %s during the step; leaving it (R-EXE-41)",
                execution.state,
            )
            states = (workflow.state, execution.state)
            session.rollback()
            return states, None, True
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
            self._commit_resolved(workflow, execution, step, keep_state=True)
            return (workflow.state, execution.state), None, True

        # From here on this execution is the workflow's one active execution,
        # so new executions need no stray-cancel UPDATE, and all changes go out
        # in one flush (UPDATEs before the INSERT). R-EXE-46 clears
        # current_step_name; the step just done is passed explicitly instead.
        self._finalizing = True
        workflow.current_step_name = None
        if body.kind == "completed":
            schedules = transitions.apply(
                transitions.COMPLETE, now, workflow=workflow, execution=execution
            )
            if not self._continue_inline(workflow, step):
                self._perform(schedules, workflow, execution, step)
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
        self._commit_resolved(workflow, execution, step, keep_state=True)
        return (workflow.state, execution.state), result, False


_DEFAULT_HOOKS = (
    WorkflowMixin.before_step_execution,
    WorkflowMixin.around_step_execution,
    WorkflowMixin.after_step_execution,
)


def _overridden_hooks(workflow: Any) -> tuple[bool, bool, bool]:
    """Whether ``before``/``around``/``after_step_execution`` are overridden.

    The defaults do nothing (``around`` returns a ``nullcontext``): a hook left
    as it is need not be called (R-EXE-33/34/36). Looked up on every run, so a
    hook set on the class or the instance later is still called.
    """
    cls, own = type(workflow), workflow.__dict__
    before, around, after = _DEFAULT_HOOKS
    return (
        cls.before_step_execution is not before or "before_step_execution" in own,
        cls.around_step_execution is not around or "around_step_execution" in own,
        cls.after_step_execution is not after or "after_step_execution" in own,
    )


def _commit_if_pending(session: orm.Session) -> None:
    """Commit only if the session has a transaction or unflushed changes.

    A commit with nothing to do would still expire every loaded instance, and
    the next attribute access would reload it.
    """
    if session.in_transaction() or session.new or session.dirty or session.deleted:
        session.commit()
