"""The executor's third stage: record the body's outcome (SPEC §7.6, §7.7).

:func:`finalize` takes the run (:class:`~flask_geneva.engine.executor.run.
StepRun`), the step and the body's :class:`~flask_geneva.engine.executor.run.
BodyResult`. In a fresh transaction it locks and re-reads the rows, leaves an
operator's change in place (R-EXE-41/42) or applies the outcome through
:mod:`~flask_geneva.engine.executor.outcomes` (R-EXE-44..48), claims the next
step inline when it may (:mod:`~flask_geneva.engine.executor.continuation`,
R-EXE-70..77), and commits; then it sends the ``finalize`` signal, reports,
and re-raises as ``reraise`` says (R-EXE-50). On PostgreSQL the finalize of
a completed body may instead send one guarded statement without
the lock, falling back to the locked path when the guard fails (R-EXE-81). A
deadlock victim starts over (R-EXE-80), and so does an attempt that lost its
database connection, for up to ``GENEVA_WORKER_DEAD_AFTER`` (R-FLT-10); the
body never runs again. An execution found ended by someone else keeps the
body's outcome as an audit (:mod:`~flask_geneva.engine.executor.superseded`,
R-FLT-12).
"""

from __future__ import annotations

import time
from typing import Any
from typing import Literal

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import database_outages
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import counter_releases
from flask_geneva.db import locks as row_locks
from flask_geneva.db import row_updates
from flask_geneva.db import session_transactions
from flask_geneva.db import write_path
from flask_geneva.engine.children import settle as children_settle
from flask_geneva.engine.executor import continuation
from flask_geneva.engine.executor import hero_missing
from flask_geneva.engine.executor import outcomes
from flask_geneva.engine.executor import superseded
from flask_geneva.engine.executor.continuation import InlineCheckFailed
from flask_geneva.engine.executor.run import BodyResult
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.executor.run import retrying
from flask_geneva.engine.operators import finalize as operator_finalize
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.policies import task_failures
from flask_geneva.policies.resolution import PolicyResult

__all__ = ["finalize"]

_log = module_logger("flask_geneva")

#: How one finalize attempt settled the body's outcome: applied (the policy,
#: if any, decides the re-raise), left to an operator's change (R-EXE-41/42),
#: a missing hero's cancel (R-HERO-07: nothing re-raised or reported), or
#: found applied by an earlier attempt whose commit went through before its
#: connection was lost (R-FLT-10: nothing more written, reported or re-raised).
_Settled = Literal["applied", "left", "hero_gone", "committed"]

#: What one finalize attempt committed: ``(workflow state, execution state)``,
#: the policy result, and how the outcome was settled.
_Finalized = tuple[tuple[Any, Any], PolicyResult | None, _Settled]


def finalize(run: StepRun, step: Any, body: BodyResult) -> None:
    """Record how the body ended, in its own locked transaction (R-EXE-40..51).

    Args:
        run: The run; when finalize claims the next step inline, its
            ``continuation`` is set (R-EXE-70).
        step: The step definition of the run's execution.
        body: How the body ended.

    Raises:
        Exception: The body's exception after its policy was committed, when
            ``run.reraise`` asks for it (R-EXE-50).
        sqlalchemy.exc.SQLAlchemyError: Finalize failed, after the retries
            of a deadlock (R-EXE-80) or, for a lost database connection, once
            ``GENEVA_WORKER_DEAD_AFTER`` passed (R-FLT-10/11); the execution
            stays ``in_progress`` for recovery (R-WRK-18).
    """
    # The body may have bound a newer context (a geneva call of its own):
    # the outcome is written with the one this run started with (R-CFG-02).
    session = run.context.bind(run.session)
    run.events.finalize_started = (clock.now(), time.monotonic())  # R-SIG-01 timing
    reports, running = len(run.reports), len(run.running)
    joined_failed = False
    if run.joined:
        # R-EXE-82: the first attempt commits the body's writes with the outcome.
        joined = _finalize_joined(run, session, step, body, reports, running)
        if not isinstance(joined, BodyResult):
            _settle(run, joined, body.error, committed_error=body.error)
            return
        body, joined_failed = joined, True
    error = body.error

    def give_up(failed: BaseException) -> None:
        if error is not None:
            task_failures.log_unrecorded(run.logger, error, "encountered")
        if database_outages.connection_lost(failed) is not None:
            run.logger.error(
                "step execution %s stays in_progress without its outcome: this "
                "worker releases it at its next heartbeat and the dispatcher "
                "then recovers it (R-FLT-11)",
                run.execution_id,
            )

    optimistic = [body.kind == "completed" and not joined_failed]

    def attempt() -> _Finalized | None:
        if optimistic[0]:
            # R-EXE-81: once per finalize; a retry (R-EXE-80) takes the lock.
            optimistic[0] = False
            done = _finalize_optimistically(run, session, step, reports, running)
            if done is not None:
                return done
        try:
            return _finalize_once(run, session, step, body)
        except counter_releases.SlotNotKept as failed:
            # R-LIM-15: a waiter queued for the slot the next step would keep;
            # finalize again without continuing inline (once per run).
            session_transactions.rollback_after_error(session, failed)
            run.inline_refused = True
            run.forget_attempt(reports, running)
            return _finalize_once(run, session, step, body)
        except InlineCheckFailed as failed:
            # R-EXE-73: the check left the transaction unusable; finalize
            # again without continuing inline (once per run).
            session_transactions.rollback_after_error(session, failed)
            run.logger.warning(
                "%s; finalizing step execution %s again without continuing inline",
                failed,
                run.execution_id,
            )
            run.forget_attempt(reports, running)
            return _finalize_once(run, session, step, body)

    # R-EXE-80: a deadlock victim starts over in a fresh transaction that
    # locks, re-reads and re-checks the rows; the body is done. Any error
    # (BaseException) is rolled back, retried or not. R-FLT-10: so is an
    # attempt that lost its database connection, for GENEVA_WORKER_DEAD_AFTER:
    # the body's outcome is kept, never run again for a database restart.
    outage = database_outages.OutageWindow(
        run.settings.worker_dead_after,
        what=f"finalize of step execution {run.execution_id}",
        logger=run.logger,
    )
    finalized = retrying(
        run,
        attempt,
        "finalize",
        reports,
        running,
        rollback_always=True,
        on_give_up=give_up,
        outage=outage,
    )
    if outage.attempts:
        run.logger.warning(
            "finalize of step execution %s reached the database again after "
            "%d attempts in %.1f s; the body did not run again (R-FLT-10)",
            run.execution_id,
            outage.attempts + 1,
            outage.seconds_waited,
        )
    # A joined attempt's failure (R-EXE-82) is no error of a commit that went through.
    _settle(run, finalized, error, committed_error=None if joined_failed else error)


def _settle(
    run: StepRun,
    finalized: _Finalized | None,
    error: Exception | None,
    *,
    committed_error: Exception | None,
) -> None:
    """Signal, report and re-raise as the committed attempt settled the outcome.

    Args:
        run: The run.
        finalized: What the committed attempt returned; None: nothing to do.
        error: The body's captured exception, or None.
        committed_error: The error the ``finalize`` signal names when an
            earlier attempt's commit is found to have gone through (R-FLT-10).
    """
    if finalized is None:
        return
    states, result, settled = finalized
    if settled == "committed":
        run.events.emit_finalize(states, committed_error)
        return
    if settled == "left":
        run.events.emit_finalize(states, None)
        run.events.drop_error(run.logger, error)
        return
    run.events.emit_finalize(states, error)
    run.events.report_pending()
    if (
        settled == "applied"
        and error is not None
        and task_failures.should_reraise(run.reraise, result)
    ):
        raise error


def _finalize_optimistically(
    run: StepRun, session: orm.Session, step: Any, reports: int, running: int
) -> _Finalized | None:
    """Finalize a completed body without the locking read (R-EXE-81).

    ``complete`` and the inline claim (or the next step's scheduling) are
    applied to the rows as the claim committed them, and the one merged
    statement (R-EXE-79) carries the guard that stands in for the lock:
    both rows unchanged since the claim (state and ``updated_at``), and
    the hero present when the next step is claimed inline. The
    execution's attributes the lock would not have read are expired, as
    after the lock (R-EXE-48).

    Returns:
        As :func:`_finalize_once` for a body that completed; None when the
        rows do not qualify or the guard failed (rolled back, the
        attempt's traces forgotten): the caller takes the locked path.
    """
    claimed = run.claimed_rows
    if claimed is None:
        return None
    workflow, execution = claimed
    guards = continuation.optimistic_guards(run, workflow, execution, step)
    if guards is None:
        return None
    session.expire(execution, row_locks.finalize_unread_execution_keys(session))
    write_path.expect_unchanged_since_claim(session, guards)
    try:
        run.finalizing = True
        workflow.current_step_name = None
        schedules = transitions.apply(
            transitions.COMPLETE,
            clock.now(),
            workflow=workflow,
            execution=execution,
        )
        if guards.hero is not None:
            run.hero_present = True  # the statement's guard checks it
        if not continuation.continue_inline(run, workflow, step, execution):
            guards.hero = None  # nothing claimed: the hero is not checked
            outcomes.perform(run, schedules, workflow, execution, step)
        superseded.note_commit(run, execution)
        outcomes.commit_resolved(run, workflow, execution, step, keep_state=True)
    except row_updates.OptimisticWriteRefused as refused:
        session_transactions.rollback_after_error(session, refused)
        # Refused before any statement, no transaction was rolled back:
        # drop what this attempt applied to the instances all the same.
        session.expire(workflow)
        session.expire(execution)
        run.logger.debug(
            "finalizing step execution %s under lock: %s",
            run.execution_id,
            refused,
        )
        run.forget_attempt(reports, running)
        return None
    finally:
        write_path.expect_unchanged_since_claim(session, None)
    return (workflow.state, execution.state), None, "applied"


def _finalize_joined(
    run: StepRun,
    session: orm.Session,
    step: Any,
    body: BodyResult,
    reports: int,
    running: int,
) -> _Finalized | BodyResult | None:
    """Finalize in the body's own transaction, committing its writes (R-EXE-82).

    The body's pending writes are flushed, then the locked finalize runs in
    the same transaction (R-EXE-40..48: an operator's pause or cancel, or a
    recovery, committed meanwhile is seen under the lock and wins as always,
    and the body's writes commit with what the lock decides), and one commit
    ends the step. Never the optimistic finalize: its refusal rolls back.

    Returns:
        What :func:`_finalize_once` returned, committed with the body's
        writes; or, when any statement of the attempt or its commit failed
        (the transaction, and with it the body's writes, rolled back), the
        body's outcome to finalize instead: the failure as a captured
        exception, as a failed commit of the body's writes is (R-EXE-38).

    Raises:
        BaseException: What is no ``Exception``, after the rollback.
    """
    try:
        session.flush()
        return _finalize_once(run, session, step, body)
    except Exception as failed:  # noqa: BLE001 - becomes the captured error
        session_transactions.rollback_after_error(session, failed)
        run.forget_attempt(reports, running)
        run.logger.error(
            "committing the step's writes with its outcome failed: %s", failed
        )
        return BodyResult("exception", error=failed)
    except BaseException as escaped:
        session_transactions.rollback_after_error(session, escaped)
        raise
    finally:
        run.joined = False


def _finalize_once(
    run: StepRun, session: orm.Session, step: Any, body: BodyResult
) -> _Finalized | None:
    """One attempt at finalize: lock, re-check, apply the outcome, commit.

    Returns:
        None when the execution vanished; else the committed
        ``(workflow state, execution state)``, the policy result, and
        whether the outcome was left to an operator's change (R-EXE-41/42).
    """
    workflow, execution = continuation.lock_for_finalize(run, body.kind == "completed")
    if execution is None:
        _log.warning("step execution %s vanished during the step", run.execution_id)
        if run.joined:
            session.commit()  # R-EXE-82: the body's writes, as R-EXE-38 commits them
        else:
            session.rollback()
        return None
    run.install_loggers(workflow, execution)
    now = clock.now()
    error = body.error
    result: PolicyResult | None = None
    if execution.state != StepExecutionState.IN_PROGRESS:
        states = (workflow.state, execution.state)
        if superseded.committed_before(run, execution):
            run.logger.info(
                "step execution %s: the commit of an earlier finalize attempt "
                "went through before its connection was lost (R-FLT-10)",
                execution.id,
            )
            session.rollback()
            return states, None, "committed"
        # R-EXE-41: the operator's or the recovery's state wins; what the
        # body did is kept as an audit (R-FLT-12).
        superseded.record_superseded(run, session, execution, body)
        return states, None, "left"
    if workflow.state != WorkflowState.PERFORMING:
        # An operator paused, canceled or finished the workflow while the
        # body ran: record what the body did; their state wins (R-EXE-42).
        run.logger.warning(
            "workflow changed to %s during the step (R-EXE-42)", workflow.state
        )
        if body.kind == "flow_control" and body.flow_control is not None:
            outcomes.record_flow_control(execution, body.flow_control)
        if workflow.state == WorkflowState.CANCELED:
            # Children the body started after the cancel committed (R-CHD-31).
            children_settle.note_canceled_during_step(session, workflow)
        operator_finalize.finalize_under_operator_state(
            session,
            workflow,
            execution,
            step,
            kind=body.kind,
            flow_control=body.flow_control,
            error=error,
            record_interrupt=lambda reason: outcomes.record_interrupt(
                run, execution, body, reason=reason
            ),
            now=now,
        )
        superseded.note_commit(run, execution)
        outcomes.commit_resolved(run, workflow, execution, step, keep_state=True)
        return (workflow.state, execution.state), None, "left"

    # From here on this execution is the workflow's one active execution,
    # so new executions need no stray-cancel UPDATE, and all changes go out
    # in one flush (UPDATEs before the INSERT). R-EXE-46 clears
    # current_step_name; the step just done is passed explicitly instead.
    run.finalizing = True
    workflow.current_step_name = None
    if body.kind == "completed":
        schedules = transitions.apply(
            transitions.COMPLETE, now, workflow=workflow, execution=execution
        )
        if not continuation.continue_inline(run, workflow, step, execution):
            outcomes.perform(run, schedules, workflow, execution, step)
    elif body.kind == "interrupted":
        assert body.interrupt is not None  # noqa: S101 - kind implies it
        outcomes.record_interrupt(run, execution, body)
        outcomes.transition(
            run,
            transitions.CONTINUE,
            clock.now(),
            workflow,
            execution,
            step,
            wait=body.interrupt.wait,
        )
    elif body.kind == "flow_control":
        assert body.flow_control is not None  # noqa: S101 - kind implies it
        outcomes.apply_flow_control(run, workflow, execution, step, body.flow_control)
    else:
        assert error is not None  # noqa: S101 - kind implies it
        if hero_missing.hero_gone(workflow):
            # The hero was deleted after the claim: the body read it as None.
            # Canceled as Phase 1 cancels, not paused by the policy (R-HERO-07).
            hero_missing.cancel(
                run, workflow, execution, step, now, error=error, keep_state=True
            )
            return (workflow.state, execution.state), None, "hero_gone"
        result = outcomes.resolve(run, workflow, execution, step, error)
        outcomes.apply_policy(
            run, workflow, execution, step, result, error, "exception_policy"
        )
    superseded.note_commit(run, execution)
    outcomes.commit_resolved(run, workflow, execution, step, keep_state=True)
    return (workflow.state, execution.state), result, "applied"
