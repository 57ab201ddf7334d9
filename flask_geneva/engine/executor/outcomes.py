"""Applying a step's outcome through the transition table (R-EXE-44/45, §8.1).

:class:`OutcomeSteps` turns a policy result (R-EXE-45) or an in-step signal
(R-FC-10..15) into one :mod:`flask_geneva.engine.transitions.table` entry, applies it to
the
locked rows and schedules what the entry says (the next step, the same step
again, a resumable successor). It also writes the ``flow_control`` and
``interrupt`` records (R-PDR-03).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_geneva.core import clock
from flask_geneva.db import error_recording
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import session_transactions
from flask_geneva.engine import scheduling
from flask_geneva.engine.executor import policy_decisions
from flask_geneva.engine.executor.run import BodyResult
from flask_geneva.engine.executor.run import RunBase
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.policies import task_failures
from flask_geneva.policies.resolution import PolicyResult
from flask_geneva.policies.resolution import should_report

__all__ = ["OutcomeSteps"]

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


class OutcomeSteps(RunBase):
    """Apply policy results and signals of a run (SPEC §8.1, §9)."""

    # -- policies (R-EXE-23/45, R-POL) -------------------------------------------------

    def _resolve(
        self, workflow: Any, execution: Any, step: Any, error: Exception, *, reason: str
    ) -> PolicyResult:
        """Resolve, decide and record the policy for ``error`` (R-PDR-01)."""
        return policy_decisions.resolve(
            self.session,
            self.logger,
            self.reports,
            workflow,
            execution,
            step,
            error,
            reporter=self.settings.error_reporter,
            before_handler=self._note_user_code,
        )

    def _note_user_code(self) -> None:
        """User code runs in the open locked transaction: no retry of it (R-EXE-80)."""
        self._user_code_ran = True

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
            error_recording.record_exception_metadata(execution, error)
            execution.write_metadata("reattempt_reason", reason)
        elif action != "finish":
            error_recording.record_error(execution, error)
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

    def _transition_and_commit(
        self,
        transition: transitions.Transition,
        now: Any,
        workflow: Any,
        execution: Any,
        step: Any,
    ) -> None:
        """Apply ``transition``, schedule what it says, settle signals, commit.

        One transaction: :meth:`_transition`, then :meth:`_commit_resolved`.
        ``step`` may be None (no step definition: nothing is scheduled after
        the entry, no signal is settled).

        Raises:
            InvalidStateTransition: A row is not in a from-state of the entry.
        """
        self._transition(transition, now, workflow, execution, step)
        self._commit_resolved(workflow, execution, step)

    def _commit_resolved(
        self, workflow: Any, execution: Any, step: Any, *, keep_state: bool = False
    ) -> None:
        """Settle the workflow signals the step resolved, then commit (R-WSIG-15).

        The end of every transaction in which a run writes its execution's
        outcome (prepare's skip, cancel, wait timeout or failure; finalize).
        Signals are settled only for ``wait_for`` steps, so other steps pay one
        attribute check.

        Args:
            workflow: The locked workflow.
            execution: The locked execution just written.
            step: Its step definition, or None.
            keep_state: Commit without expiring the loaded rows
                (:func:`~flask_geneva.db.session_transactions.commit_keeping_state`).
        """
        session = self.session
        if step is not None and step.wait_for is not None:
            workflow_signals.settle_claimed_signals(
                session, workflow, execution, clock.now()
            )
        if keep_state:
            session_transactions.commit_keeping_state(session)
        else:
            session.commit()

    def _create_reattempt(
        self, workflow: Any, execution: Any, step: Any, wait: timedelta | None
    ) -> None:
        if not self._finalizing:
            self.session.flush()
        cancel_stray = not self._finalizing
        if (
            step.is_resumable
            and column_detection.optional_columns(self.session).resumable
        ):
            scheduling.create_successor_execution(
                self.session, workflow, execution, wait=wait, cancel_stray=cancel_stray
            )
        else:
            scheduling.create_step_execution(
                self.session, workflow, step, wait=wait, cancel_stray=cancel_stray
            )

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
        self, execution: Any, body: BodyResult | None, *, reason: str | None = None
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
