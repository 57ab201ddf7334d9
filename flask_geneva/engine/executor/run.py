"""The state of one executor run, passed to each of its stages (SPEC §7).

:class:`StepRun` holds what one step's run carries from its claim to its
outcome: the options :func:`~flask_geneva.engine.executor.step.execute_step`
was called with, the session and settings, the tagged logger (R-EXE-01,
R-LOG-02), the run's events and pending reports, its running-set entries
(R-WRK-18) and the inline continuation's state (R-EXE-70..81). The stages are
functions that take it: :mod:`~flask_geneva.engine.executor.prepare` (claim),
:mod:`~flask_geneva.engine.executor.body` (run the body),
:mod:`~flask_geneva.engine.executor.finalize` (record the outcome, with
:mod:`~flask_geneva.engine.executor.outcomes`) and
:mod:`~flask_geneva.engine.executor.continuation` (continue inline).
:class:`BodyResult` says how the body ended (R-EXE-35); :func:`retrying` is the
deadlock retry of the claim and of finalize (R-EXE-80).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar

from sqlalchemy import orm

from flask_geneva.core import error_reporting
from flask_geneva.core import log_fields
from flask_geneva.core import transactions
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import execution_logger
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import session_transactions
from flask_geneva.db.context import EngineContext
from flask_geneva.engine import traces
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.policies import task_failures

if TYPE_CHECKING:
    from flask_geneva.engine.executor.continuation import ClaimedStep
    from flask_geneva.engine.executor.continuation import InlineBudget
    from flask_geneva.telemetry.tracing import StepTrace

__all__ = ["BodyResult", "StepRun", "retrying"]

_log = module_logger("flask_geneva")
_T = TypeVar("_T")


@dataclasses.dataclass
class BodyResult:
    """How the body ended (R-EXE-35).

    Attributes:
        kind: ``"completed"``, ``"flow_control"``, ``"interrupted"`` or ``"exception"``.
        flow_control: The flow-control signal the body raised (kind
            ``flow_control``).
        interrupt: The interrupt of a resumable step (kind ``interrupted``).
        error: The exception the body or a hook raised (kind ``exception``).
    """

    kind: str
    flow_control: FlowControlSignal | None = None
    interrupt: StepInterrupt | None = None
    error: Exception | None = None

    @property
    def label(self) -> str:
        """The outcome named in the log and the ``step`` signal (R-SIG-03)."""
        if self.kind == "flow_control" and self.flow_control is not None:
            action = self.flow_control.action
            return "finished" if action == "finish" else action
        return self.kind


@dataclasses.dataclass(eq=False, kw_only=True, slots=True)
class StepRun:
    """What one step's run holds across its stages (SPEC §7).

    One is made per step: a step continued inline (R-EXE-70) gets a new one,
    sharing the task's ``inline_budget``. The first group of attributes is
    given by :func:`~flask_geneva.engine.executor.step.execute_step`; the
    others start empty and are filled in by the stages.

    Attributes:
        session: The executor's session; it owns it for the run (R-EXE-38).
        context: The engine context the run started with, used for the whole
            run; ``settings`` are its settings (a change of ``app.config``
            applies from the next run, R-CFG-02).
        execution_id: The id of the execution this run claims or adopted.
        base_logger: The caller's logger whose tags come first (R-LOG-03).
        interruptible: Whether a resumable step honours interruptions (R-INT-01).
        max_iterations: Overrides a resumable step's ``max_iterations``.
        lookup_attempts: Tries of the claim's lookup (R-JOB-20), at least 1.
        lookup_delay_seconds: Sleep between two lookups.
        reraise: Which handled exceptions are re-raised (R-EXE-50).
        run_early: Run before ``scheduled_for`` (R-EXE-18, the test helpers).
        inline_budget: The task's inline continuation budget, shared by the
            runs of one task; None when this run may not continue inline
            (R-EXE-72).
        settings: ``context.settings``.
        events: The run's signals and pending reports (R-SIG, R-REP).
        reports: ``events.reports``: errors reported after the commit.
        logger: The logger tagged for the run's workflow and execution.
        finalizing: Finalize applies the outcome: the execution is the
            workflow's one active execution (no stray-cancel UPDATE).
        user_code_ran: An imperative handler ran in the open transaction: it
            is not retried (R-EXE-80).
        error_context_token: The error reporter's context, reset at the end.
        passed_timing: Timing of the passed preconditions (R-SIG-02).
        iterable_step: The resumable step's ``it`` object (R-PDR-03).
        running: ``(running set, execution id)`` this run added to its
            worker's running executions, removed when it ends (R-WRK-18).
        handed_over: Entries kept for the run that adopts an inline claim.
        claimed_rows: The workflow and execution as the claim committed
            them, for the optimistic finalize (R-EXE-81).
        continuation: The next step finalize claimed inline (R-EXE-70).
        hero_probe: ``(hero class, hero_type, hero_id)`` of the claimed
            step's workflow for finalize's hero probe (R-EXE-78); None: none.
        hero_present: Whether that hero existed when finalize locked the
            rows; None: unknown.
        inline_refused: An inline check failed in the database: this run
            claims nothing inline (R-EXE-73).
        trace: The step's span, current from the claim to the end of the
            run (R-OTEL-11/12); None when tracing is off.
        committing: The execution's ``finished_at`` the last finalize
            attempt was about to commit, or None (R-FLT-10: a retry that
            finds it stored knows that commit went through).
        joined: The body returned without committing the session itself and
            its writes were left uncommitted: finalize's first attempt runs in
            the body's transaction and commits them with the outcome (R-EXE-82).
    """

    session: orm.Session
    context: EngineContext
    execution_id: Any
    base_logger: Any
    interruptible: bool
    max_iterations: int | None
    lookup_attempts: int = 1
    lookup_delay_seconds: float = 0.0
    reraise: str = task_failures.RERAISE_ALWAYS
    run_early: bool = False
    inline_budget: InlineBudget | None = None

    settings: GenevaConfig = dataclasses.field(init=False)
    events: executor_events.RunEvents = dataclasses.field(init=False)
    reports: list[tuple[BaseException, dict[str, Any], Any]] = dataclasses.field(
        init=False
    )
    logger: Any = dataclasses.field(init=False, default=_log)
    finalizing: bool = dataclasses.field(init=False, default=False)
    user_code_ran: bool = dataclasses.field(init=False, default=False)
    error_context_token: Any = dataclasses.field(init=False, default=None)
    passed_timing: dict[str, Any] = dataclasses.field(init=False, default_factory=dict)
    iterable_step: Any = dataclasses.field(init=False, default=None)
    running: list[tuple[Any, Any]] = dataclasses.field(init=False, default_factory=list)
    handed_over: list[tuple[Any, Any]] = dataclasses.field(
        init=False, default_factory=list
    )
    claimed_rows: tuple[Any, Any] | None = dataclasses.field(init=False, default=None)
    continuation: ClaimedStep | None = dataclasses.field(init=False, default=None)
    hero_probe: tuple[Any, Any, Any] | None = dataclasses.field(
        init=False, default=None
    )
    hero_present: bool | None = dataclasses.field(init=False, default=None)
    inline_refused: bool = dataclasses.field(init=False, default=False)
    trace: StepTrace | None = dataclasses.field(init=False, default=None)
    committing: Any = dataclasses.field(init=False, default=None)
    joined: bool = dataclasses.field(init=False, default=False)
    _logger_targets: list[Any] = dataclasses.field(init=False, default_factory=list)
    #: The (workflow, execution) the current ``logger`` is tagged for.
    _logger_for: tuple[Any, Any] | None = dataclasses.field(init=False, default=None)
    #: Resets the log fields :meth:`install_loggers` made current (R-OLOG-02).
    _log_fields_token: Any = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        self.lookup_attempts = max(int(self.lookup_attempts), 1)
        settings = self.settings = self.context.settings
        self.events = executor_events.RunEvents(self.session, settings)
        self.reports = self.events.reports

    # -- running executions (R-WRK-18) -------------------------------------------------

    def mark_running(self, execution_id: Any, *, adopted: bool = False) -> None:
        """Hold ``execution_id`` in this worker's running set until the run ends.

        Called before the claim commits (R-WRK-18).

        Args:
            execution_id: The execution being claimed.
            adopted: The previous run of the task added it with its inline
                claim and hands it over.
        """
        running = worker_registry.running_executions(self.session)
        if running is None or execution_id is None:
            return
        if adopted or running.add(execution_id):
            self.running.append((running, execution_id))

    def unmark_running(self, keep: Any = None) -> None:
        """Remove what this run added, except ``keep`` (handed to the next run).

        Args:
            keep: The execution id claimed inline for the next run, or None.
        """
        for running, execution_id in self.running:
            if keep is None or execution_id != keep:
                running.discard(execution_id)
            else:
                self.handed_over.append((running, execution_id))
        self.running.clear()

    def drop_handed_over(self) -> None:
        """Remove the inline-claimed id when no next run will adopt it (R-WRK-18)."""
        for running, execution_id in self.handed_over:
            running.discard(execution_id)
        self.handed_over.clear()

    # -- loggers and the error context (R-EXE-01, R-REP) ------------------------------

    def install_loggers(self, workflow: Any, execution: Any) -> None:
        """Tag the run's logger for the rows and set it on them (R-EXE-01).

        The claim and finalize hand back the same instances (the lock re-reads
        into them), so the tagged adapter is built once per run. Its fields
        become the current log fields until :meth:`restore_loggers`, so the
        records of the package's other loggers during the run name the
        workflow and execution too (R-OLOG-02).

        Args:
            workflow: The run's workflow.
            execution: The run's execution.
        """
        tagged_for = self._logger_for
        if tagged_for is None or not (
            tagged_for[0] is workflow and tagged_for[1] is execution
        ):
            self.logger = execution_logger(workflow, execution, self.base_logger)
            self._logger_for = (workflow, execution)
            if self._log_fields_token is not None:
                log_fields.reset_fields(self._log_fields_token)
            self._log_fields_token = log_fields.set_fields(self.logger.fields)
        adapter = self.logger
        for target in (workflow, execution):
            if target not in self._logger_targets:
                self._logger_targets.append(target)
            target.__dict__["_geneva_logger"] = adapter

    def restore_loggers(self) -> None:
        """Take the run's logger (and a ``wait_for`` signal) off the rows.

        Also restores the log fields that were current before the run.
        """
        if self._log_fields_token is not None:
            log_fields.reset_fields(self._log_fields_token)
            self._log_fields_token = None
        for target in self._logger_targets:
            target.__dict__.pop("_geneva_logger", None)
            # The workflow signal a wait_for step ran with (R-WSIG-17).
            target.__dict__.pop("_geneva_received_signal", None)
        self._logger_targets.clear()

    def logging_about_run(self) -> contextlib.AbstractContextManager[None]:
        """Make the run's log fields current for a block after the run (R-OLOG-02).

        A no-op when the run tagged no logger (nothing was claimed).
        """
        fields = getattr(self.logger, "fields", None)
        if fields is None:
            return contextlib.nullcontext()
        return log_fields.logging_about(fields)

    def enter_error_context(self, workflow: Any, execution: Any) -> None:
        """Name the rows to the error reporter until the run ends (R-REP-10).

        Args:
            workflow: The run's workflow.
            execution: The run's execution.
        """
        if self.error_context_token is None:
            self.error_context_token = error_reporting.set_error_context(
                workflow, execution
            )

    def leave_error_context(self) -> None:
        """Reset what :meth:`enter_error_context` set, if it did."""
        if self.error_context_token is not None:
            error_reporting.reset_error_context(self.error_context_token)
            self.error_context_token = None

    # -- the step's span (R-OTEL-11..13) ---------------------------------------------

    def start_trace(
        self, workflow: Any, execution: Any, *, attempt: int | None = None
    ) -> None:
        """Start the step's span, once per run, with the rows locked and read.

        A claim retried after a deadlock (R-EXE-80) keeps the span it started.
        """
        if self.trace is None:
            self.trace = traces.start_step(
                self.session, workflow, execution, execution.step_name, attempt=attempt
            )

    def note_outcome(self, outcome: Any) -> None:
        """Name what this run wrote to its execution on the span (R-OTEL-11)."""
        if self.trace is not None:
            self.trace.note_outcome(None if outcome is None else str(outcome))

    def note_written(self, execution: Any) -> None:
        """Note the execution's outcome (or, without one, its state) as written."""
        if self.trace is not None:
            self.trace.note_outcome(str(execution.outcome or execution.state))

    def trace_error(self, error: BaseException) -> None:
        """Record ``error`` on the step's span, status ERROR (R-OTEL-13)."""
        if self.trace is not None:
            self.trace.record_error(error)

    def end_trace(self, unrecorded: str) -> None:
        """End the step's span; ``unrecorded`` is its outcome if none was noted."""
        trace, self.trace = self.trace, None
        if trace is not None:
            if trace.noted is None:
                trace.note_outcome(unrecorded)
            trace.end()

    # -- attempts (R-EXE-80) -----------------------------------------------------------

    def note_user_code(self) -> None:
        """User code runs in the open locked transaction: no retry of it (R-EXE-80)."""
        self.user_code_ran = True

    def forget_attempt(self, reports: int, running: int) -> None:
        """Undo what a rolled-back claim or finalize attempt left on the run.

        (R-EXE-80, R-EXE-73.)

        Args:
            reports: How many reports were pending before the attempt.
            running: How many running-set entries the run held before the
                attempt (an inline claim adds one, R-EXE-70).
        """
        del self.reports[reports:]
        for held, execution_id in self.running[running:]:
            held.discard(execution_id)
        del self.running[running:]
        if self.continuation is not None and self.inline_budget is not None:
            self.inline_budget.steps_run -= 1
        self.continuation = None
        self.hero_present = None
        self.finalizing = False


def retrying(
    run: StepRun,
    attempt: Callable[[], _T],
    what: str,
    reports: int,
    running: int,
    **options: Any,
) -> _T:
    """Run ``attempt`` under R-EXE-80's retry loop for ``run``'s ``what``.

    :func:`~flask_geneva.core.transactions.retry_on_conflict`: retried while
    no user code ran in it (:meth:`StepRun.note_user_code`), rolled back on the
    run's session, each retry forgetting what the aborted attempt left
    (:meth:`StepRun.forget_attempt`).

    Args:
        run: The run.
        attempt: One attempt, in a fresh transaction.
        what: ``"claim"`` or ``"finalize"``, for the log.
        reports: Pending reports before the first attempt.
        running: Running-set entries before the first attempt.
        **options: Passed to the loop (``rollback_always``, ``on_give_up``).

    Returns:
        What the successful attempt returned.

    Raises:
        Exception: The attempt's error when it is not retried, or after the
            last attempt.
    """
    return transactions.retry_on_conflict(
        attempt,
        allowed=lambda: not run.user_code_ran,
        what=f"{what} of step execution {run.execution_id}",
        rollback=functools.partial(
            session_transactions.rollback_after_error, run.session
        ),
        logger=lambda: run.logger,
        on_retry=lambda: run.forget_attempt(reports, running),
        **options,
    )
