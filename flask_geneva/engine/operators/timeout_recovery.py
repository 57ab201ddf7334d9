"""Recovery of a step that ran past its timeout: the step's policies decide (R-STO-20).

Celery's hard time limit kills the worker process still running a step
``GENEVA_STEP_TIMEOUT_GRACE`` after its timeout; its execution stays
``in_progress`` until recovery (housekeeping's, the dispatcher's or the
operator's ``recover()``) finds it. Recovering it as any lost worker
(``GENEVA_STUCK_RECOVERY_ACTION``, by default a reattempt recorded as
``recovered``, which resets the reattempt count, R-CNT-05) would run a step that
hangs again and again, forever. So recovery hands such an execution's
:class:`~flask_geneva.exceptions.StepTimeout` to the step's exception policies,
as finalize does with the soft time limit's (R-STO-13): the step's policy, then
the class's, then the default pause, with the consecutive reattempts counted
(R-CNT-01..06), the backoff, the cap and the terminal action, an imperative
handler run in a savepoint, the ``policy_decision`` record written
(R-PDR-01), and the error reported after the commit when the policy says so.

:func:`apply_step_policy` runs under the caller's locks (workflow, then
execution), after the caller checked that the execution is still
``in_progress`` and that its workflow is ``ready`` or ``performing``: a worker
that finalized late, or an operator who got there first, leaves nothing to do,
and the transition table refuses any other state.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core import transactions
from flask_geneva.core.transaction_scoped import TransactionScoped
from flask_geneva.core.transaction_scoped import innermost_transaction
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.context import context_of
from flask_geneva.engine import policy_decisions
from flask_geneva.engine import scheduling
from flask_geneva.engine.operators.worker_lost import LostWorker
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.policies import task_failures
from flask_geneva.policies.resolution import PolicyResult
from flask_geneva.policies.resolution import should_report

__all__ = ["apply_step_policy"]

#: Errors to report once the recovering transaction commits (R-REP-02).
_reports: TransactionScoped[tuple[Any, BaseException, dict[str, Any]]] = (
    TransactionScoped("geneva_timeout_recovery_reports")
)


def apply_step_policy(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    step: Any,
    lost: LostWorker,
) -> PolicyResult:
    """Apply ``step``'s exception policies to the timeout of a lost worker (R-STO-20).

    Resolves and decides the policy for ``lost.error`` (a
    :class:`~flask_geneva.exceptions.StepTimeout`) as finalize does
    (:func:`flask_geneva.engine.policy_decisions.resolve`), records the error
    (metadata only for a reattempt or a finish, R-SE-21; else its columns, no
    backtrace) and the ``recovery`` record, and applies the action's
    transition: ``reattempt`` ends the execution completed/``reattempted``
    (reason ``exception_policy``, counted by R-CNT-01) and schedules the step
    again after the policy's wait (a successor for a resumable step);
    ``skip`` skips it and schedules the next step; ``cancel`` fails it and
    cancels the workflow; ``finish`` finishes the workflow; ``pause`` (the
    default, and a terminal reattempt's default) fails it and pauses the
    workflow. The caller commits; the error is reported after that commit
    when the policy's ``report`` asks for it.

    Args:
        session: The recovering session, holding the workflow's, then the
            execution's row lock.
        workflow: The locked workflow, ``ready`` or ``performing``.
        execution: The locked execution, ``in_progress``.
        step: Its step definition (with a ``timeout``).
        lost: What recovery found (:func:`~flask_geneva.engine.operators.
            worker_lost.lost_worker`), ``lost.timed_out`` true.

    Returns:
        The decided policy result.

    Raises:
        InvalidStateTransition: A row is not in a state the action's
            transition starts from (the caller's checks make this a bug).
    """
    error = lost.error
    logger = workflow.logger
    settings = context_of(session).settings
    pending: policy_decisions.Reports = []
    result = policy_decisions.resolve(
        session,
        logger,
        pending,
        workflow,
        execution,
        step,
        error,
        reporter=settings.error_reporter,
    )
    task_failures.log_captured(logger, error, result, "recovery found")
    action = result.action
    lost.record(execution, columns=action not in ("reattempt", "finish"))
    if action == "reattempt":
        execution.write_metadata("reattempt_reason", "exception_policy")
    # R-EXE-46: the step is over; the one it schedules sets its own name.
    workflow.current_step_name = None
    schedules = transitions.apply(
        policy_decisions.policy_transition(action),
        clock.now(),
        workflow=workflow,
        execution=execution,
    )
    # The ended row must leave the one-active index before a new one enters.
    session.flush()
    kind = transitions.Schedules
    if schedules is kind.SAME_STEP:
        if step.is_resumable and column_detection.optional_columns(session).resumable:
            scheduling.create_successor_execution(
                session, workflow, execution, wait=result.wait
            )
        else:
            scheduling.create_step_execution(session, workflow, step, wait=result.wait)
    elif schedules is kind.NEXT_STEP:
        scheduling.schedule_next_step(session, workflow, after=step.name)
    if step.wait_for is not None:
        # A skipped step consumes the signals it claimed, as finalize's commit
        # does; a reattempt or a pause keeps them for its next run (R-WSIG-15).
        workflow_signals.settle_claimed_signals(
            session, workflow, execution, clock.now()
        )
    reporter = settings.error_reporter
    if reporter is not None:
        # The executor's context (R-REP-10), read now: the rows expire at commit.
        with error_reporting.error_context(workflow, execution):
            extra = {**error_reporting.current_error_context(), "recovery": True}
        # A crashed imperative handler or backoff strategy (R-POL-12/55).
        for failure, context, _ in pending:
            _reports.add(session, (reporter, failure, {**extra, **context}))
        if should_report(result):
            _reports.add(session, (reporter, error, extra))
    return result


@event.listens_for(orm.Session, "after_commit")
def _report_after_commit(session: orm.Session) -> None:
    # Only the root transaction's commit reports (R-TXN-03, TransactionScoped).
    if session not in _reports:
        return
    committed = innermost_transaction(session)
    if committed is not None and committed.nested:
        return
    for reporter, error, extra in _reports.take(session):
        with transactions.user_code_transactions():  # the reporter's own writes
            error_reporting.report(reporter, error, extra=extra)
