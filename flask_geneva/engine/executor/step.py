"""The executor: claim a step execution, run its body, record the outcome (SPEC §7).

:func:`execute_step` is the entry point. Each step is one run, a
:class:`~flask_geneva.engine.executor.run.StepRun` passed to three stages, each
with its own transaction:

1. **prepare** (locked): duplicate/stale deliveries end here without any change
   (R-EXE-11), early ones are left for their time (R-EXE-18); then workflow
   state, hero, step definition and conditions are checked, and the execution
   moves to ``in_progress`` and is committed before any user code of the body
   runs (R-EXE-10..24).
2. **run** (no locks): hooks and body; the body's writes are committed (or rolled
   back after an exception) before finalization (R-EXE-33..39).
3. **finalize** (locked): the outcome is applied, the next execution is created,
   and after the commit a policy-handled exception is re-raised as ``reraise``
   says (R-EXE-40..51, :mod:`flask_geneva.policies.task_failures`). On PostgreSQL
   finalize of a completed body may instead send one guarded
   statement without the lock, falling back to the locked path when the guard
   fails (R-EXE-81).

The stages are :func:`~flask_geneva.engine.executor.prepare.prepare` (or, for
a step finalize claimed inline, :func:`~flask_geneva.engine.executor.
continuation.adopt_claim`), which hands the claimed ``(workflow, execution,
step)`` on; :func:`~flask_geneva.engine.executor.body.run_body`, which hands on
a :class:`~flask_geneva.engine.executor.run.BodyResult`; and
:func:`~flask_geneva.engine.executor.finalize.finalize`, which leaves the next
step's :class:`~flask_geneva.engine.executor.continuation.ClaimedStep` on the
run when it claimed one inline (R-EXE-70). :func:`execute_step` then runs that
step with a new run.

This module imports neither Flask nor Celery: it runs with the
:class:`~flask_geneva.db.context.EngineContext` its caller passes in.
"""

from __future__ import annotations

from typing import Any
from typing import TypedDict

from flask_geneva.core import database_outages
from flask_geneva.core import transactions
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.db import session_transactions
from flask_geneva.db.context import EngineContext
from flask_geneva.engine.executor import body as body_stage
from flask_geneva.engine.executor import continuation
from flask_geneva.engine.executor import finalize as finalize_stage
from flask_geneva.engine.executor import prepare as prepare_stage
from flask_geneva.engine.executor.continuation import ClaimedStep
from flask_geneva.engine.executor.continuation import InlineBudget
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.executor.run import retrying
from flask_geneva.exceptions import ClaimFailedError
from flask_geneva.policies import task_failures

__all__ = ["ExecuteStepOptions", "execute_step"]


class ExecuteStepOptions(TypedDict, total=False):
    """The keyword options of :func:`execute_step`, for callers that pass them on.

    Each key means what the argument of that name means there.
    """

    logger: Any
    interruptible: bool
    max_iterations: int | None
    lookup_attempts: int
    lookup_delay_seconds: float
    reraise: str
    run_early: bool
    continue_inline: bool


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
            run = StepRun(
                session=session,
                context=context,
                execution_id=execution_id,
                base_logger=logger,
                interruptible=interruptible,
                max_iterations=max_iterations,
                lookup_attempts=lookup_attempts,
                lookup_delay_seconds=lookup_delay_seconds,
                reraise=reraise,
                run_early=run_early,
                inline_budget=budget,
            )
            try:
                claimed = _run_step(run, claimed)
            finally:
                try:
                    # The publications of the run's commits name its
                    # workflow and execution (R-OLOG-02).
                    with run.logging_about_run():
                        context.run_queued_tasks()
                except BaseException:
                    run.drop_handed_over()  # no next run will hold it (R-WRK-18)
                    raise
            if claimed is None:
                return
            # R-EXE-70: the next step was claimed with this one's outcome; run it here.
            execution_id = claimed.execution.id


def _run_step(run: StepRun, claimed: ClaimedStep | None) -> ClaimedStep | None:
    """Run one step through the stages; return the next step if claimed inline.

    Args:
        run: The step's new run.
        claimed: The execution the previous step's finalize claimed inline
            (R-EXE-70); None claims ``run.execution_id``.

    Returns:
        The next step's execution when finalize claimed it inline, else None.
    """
    session = run.session
    if session.in_transaction():
        session.commit()
    handed_over = None
    # The span's outcome when the run wrote none: an operator's change that
    # stood (R-EXE-41), or nothing recorded at all (R-OTEL-11).
    unrecorded = "in_progress"
    try:
        prepared = (
            continuation.adopt_claim(run, claimed)
            if claimed is not None
            else _prepare_retrying(run)
        )
        if prepared is None:
            return None
        workflow, execution, step = prepared
        run.claimed_rows = (workflow, execution)
        continuation.note_hero(run, workflow)  # R-EXE-78: probed with finalize's lock
        try:
            body = body_stage.run_body(run, workflow, execution, step)
            if body.error is not None:
                run.trace_error(body.error)  # R-OTEL-13
        except BaseException as escaped:
            run.trace_error(escaped)
            # R-EXE-35: no flow-control signal (those are caught): it
            # propagates, and must not vanish unlogged (R-WRK-18).
            run.logger.error(
                "step execution %s: %s escaped the step and propagates; the "
                "execution stays in_progress until recovered (R-EXE-35)",
                execution.id,
                type(escaped).__name__,
                exc_info=escaped,
            )
            raise
        finalize_stage.finalize(run, step, body)
        unrecorded = "left"
        if run.continuation is not None:
            handed_over = run.continuation.execution.id
        return run.continuation
    except BaseException as error:
        run.trace_error(error)  # R-OTEL-13: what propagates from the run
        raise
    finally:
        # Committed or not, this run is over (R-WRK-18).
        run.end_trace(unrecorded)
        run.unmark_running(keep=handed_over)
        run.restore_loggers()
        run.leave_error_context()


def _prepare_retrying(run: StepRun) -> tuple[Any, Any, Any] | None:
    """The claim, started over when the database chose it as a deadlock victim.

    Nothing of an aborted attempt was committed and no body ran: a retry
    locks, re-reads and re-checks the execution as a redelivery would
    (R-EXE-11, R-EXE-80). Not after an imperative handler ran in it.

    Raises:
        ClaimFailedError: The claim lost its database connection (R-FLT-01):
            rolled back, nothing of this delivery ran; the database error is
            its ``__cause__``.
    """
    try:
        return retrying(
            run,
            lambda: prepare_stage.prepare(run),
            "claim",
            len(run.reports),
            len(run.running),
        )
    except Exception as error:
        lost = database_outages.connection_lost(error)
        if lost is None:
            raise
        session_transactions.rollback_after_error(run.session, error)
        as_tagged(run.logger).warning(
            "the claim of step execution %s lost its database connection "
            "(%s: %s); nothing ran (R-FLT-01)",
            run.execution_id,
            type(lost).__name__,
            str(lost).strip().splitlines()[0] if str(lost).strip() else "",
        )
        raise ClaimFailedError(
            f"the claim of step execution {run.execution_id} lost its database "
            f"connection: {type(lost).__name__}",
            step_execution_id=run.execution_id,
        ) from error
