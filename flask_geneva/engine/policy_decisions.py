"""Exception policy decisions: resolve, count, run handlers, record (SPEC §9).

For an error in a step (or its conditions, or the prepare phase) the executor
(and recovery, for a step that ran past its timeout, R-STO-20) asks
:func:`resolve` for the :class:`~flask_geneva.policies.resolution.PolicyResult`:
the policy is resolved (R-POL-40..42), the consecutive reattempts counted
(:func:`consecutive_reattempts`, R-CNT-01..06), a declarative policy decided or
an imperative handler run in a savepoint (:func:`run_handler`, R-POL-11/12), and
the ``policy_decision`` record written (:func:`record_decision`, R-PDR-01).
Applying the result to the rows is the transition table's job
(:mod:`flask_geneva.engine.transitions.table`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.core import transactions
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine.flow_control import step_context
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.policies.resolution import PolicyResult
from flask_geneva.policies.resolution import decide
from flask_geneva.policies.resolution import resolve_policy
from flask_geneva.policies.resolution import should_report

__all__ = [
    "consecutive_reattempts",
    "policy_transition",
    "record_decision",
    "resolve",
    "run_handler",
]

Reports = list[tuple[BaseException, dict[str, Any], Any]]
"""The run's pending reports: (error, extra context, execution id or None)."""

#: The transition a decided action applies (R-EXE-45); ``pause`` (and any
#: other) fails the execution and pauses the workflow.
_POLICY_TRANSITIONS = {
    "reattempt": transitions.REATTEMPT,
    "cancel": transitions.FAIL_AND_CANCEL,
    "skip": transitions.SKIP,
    "finish": transitions.FINISH,
}


def policy_transition(action: str) -> transitions.Transition:
    """The transition table's entry for a decided policy ``action`` (R-EXE-45).

    The one mapping the executor's finalize and the recovery of a step that
    ran past its timeout (R-STO-20) both apply.

    Args:
        action: ``PolicyResult.action``: ``"reattempt"``, ``"cancel"``,
            ``"skip"``, ``"finish"`` or ``"pause"``.
    """
    return _POLICY_TRANSITIONS.get(action, transitions.FAIL_AND_PAUSE)


def resolve(
    session: orm.Session,
    logger: Any,
    reports: Reports,
    workflow: Any,
    execution: Any,
    step: Any,
    error: Exception,
    *,
    reporter: Any,
    before_handler: Callable[[], None] | None = None,
) -> PolicyResult:
    """Resolve and decide the policy for ``error``; record it (R-PDR-01).

    Runs inside the caller's locked transaction: the decision record is written
    with the state change it explains (R-PDR-06).

    Args:
        session: The executor's session, holding the row locks.
        logger: The run's tagged logger.
        reports: The run's pending reports; a crashed handler's error is added.
        workflow: The locked workflow.
        execution: The locked execution; gets the ``policy_decision`` record.
        step: The step definition whose policy applies.
        error: The exception raised by the body or a condition.
        reporter: The run's ``GENEVA_ERROR_REPORTER`` (or None), for the
            record's ``reported`` flag.
        before_handler: Called just before an imperative handler runs (the
            executor then never retries the transaction, R-EXE-80).

    Returns:
        The decided result (R-POL-10/11/12/32).
    """
    definitions = type(workflow).__geneva_definitions__
    resolution = resolve_policy(
        step.exception_policy, definitions.exception_policies, error
    )
    policy = resolution.policy
    count = consecutive_reattempts(session, workflow, step.name)
    handler_error: str | None = None
    wait_error_text: str | None = None
    if policy.is_declarative:
        try:
            result = decide(
                resolution,
                count,
                error=error,
                workflow_id=workflow.id,
                step_name=step.name,
            )
        except Exception as wait_error:  # noqa: BLE001 - R-POL-55: pause and report
            result, wait_error_text = _backoff_failed(
                logger, reports, error, wait_error
            )
        if result.terminal:
            logger.warning(
                "max reattempts (%s) reached for step %r, applying %s",
                resolution.cap,
                step.name,
                result.action,
            )
    else:
        if before_handler is not None:
            before_handler()
        result, handler_error = run_handler(
            session, logger, reports, workflow, policy, error
        )
    record_decision(
        execution,
        result,
        {
            "source": resolution.source,
            "index": resolution.index,
            "matched_by": resolution.matched_by,
        },
        count=count,
        cap=resolution.cap,
        handler=policy.handler_name,
        handler_error=handler_error,
        wait_error=wait_error_text,
        reporter=reporter,
    )
    return result


def _backoff_failed(
    logger: Any, reports: Reports, error: Exception, wait_error: Exception
) -> tuple[PolicyResult, str]:
    """A backoff strategy could not compute the wait: pause, report (R-POL-55).

    Like a crashed imperative handler (R-POL-12): the result is ``pause`` with
    report ``always`` and the strategy's exception is queued for the reporter
    with the step's error as context.
    """
    logger.error(
        "reattempt wait could not be computed: %s: %s",
        type(wait_error).__name__,
        wait_error,
    )
    reports.append((wait_error, {"step_error": repr(error)}, None))
    return (
        PolicyResult(action="pause", wait=None, terminal=False, report="always"),
        f"{type(wait_error).__name__}: {wait_error}",
    )


def record_decision(
    execution: Any,
    result: PolicyResult,
    where: dict[str, Any],
    *,
    count: int,
    cap: int | None,
    handler: str | None,
    handler_error: str | None = None,
    wait_error: str | None = None,
    reporter: Any,
) -> None:
    """Write the ``policy_decision`` metadata record (R-PDR-01/02/06).

    Args:
        execution: The execution the decision is about.
        result: The decided result.
        where: ``source``, ``index`` and ``matched_by`` of the resolution.
        count: Consecutive reattempts before this failure (R-CNT-01).
        cap: The reattempt cap that applied, or None.
        handler: The imperative handler's name, or None.
        handler_error: ``"<class>: <message>"`` of a crashed handler (R-POL-12).
        wait_error: ``"<class>: <message>"`` of a backoff strategy that could
            not compute the wait (R-POL-55).
        reporter: The run's ``GENEVA_ERROR_REPORTER`` (or None).

    ``reported`` anticipates the reporter call made after the commit: it is
    true iff a reporter is configured and the report mode asks for one
    (R-REP-01); a failing reporter later adds ``report_error``. A crashed
    imperative handler adds ``handler_error`` (R-POL-12). A wait computed by a
    backoff strategy adds ``backoff``, the strategy's label (R-PDR-07); a
    strategy that failed adds ``wait_error`` (R-POL-55).
    """
    record: dict[str, Any] = {
        **where,
        "action": result.action,
        "wait_seconds": result.wait.total_seconds()
        if result.wait is not None
        else None,
        "terminal": result.terminal,
        "consecutive_reattempts": count,
        "max_reattempts": cap,
        "report": result.report,
        "reported": bool(should_report(result) and reporter is not None),
        "handler": handler,
    }
    if result.backoff is not None:
        record["backoff"] = result.backoff
    if handler_error is not None:
        record["handler_error"] = handler_error
    if wait_error is not None:
        record["wait_error"] = wait_error
    execution.write_metadata("policy_decision", record)


def run_handler(
    session: orm.Session,
    logger: Any,
    reports: Reports,
    workflow: Any,
    policy: Any,
    error: Exception,
) -> tuple[PolicyResult, str | None]:
    """Run an imperative handler in the in-step context (R-POL-11/12).

    The handler runs in a savepoint of the open locked transaction. Its writes
    are kept when it returns or raises a flow-control signal; when it raises
    an ``Exception`` they are rolled back (a failed statement would otherwise
    abort the whole transaction on PostgreSQL), the result is ``pause`` with
    report ``always``, and its exception is queued for the reporter with the
    step's error as context (R-POL-12).

    Returns:
        The policy result, and ``"<class>: <message>"`` of the handler's own
        exception (None when it did not raise one).
    """
    savepoint = session.begin_nested()
    try:
        with step_context(workflow.id, "body"):
            policy.invoke_handler(workflow, error)
    except FlowControlSignal as signal:
        if savepoint.is_active:
            savepoint.commit()
        action = signal.action
        if action == "suspend":
            action = "pause"
        wait = signal.wait if isinstance(signal, ReattemptSignal) else None
        return (
            PolicyResult(
                action=action, wait=wait, terminal=False, report=policy.report
            ),
            None,
        )
    except Exception as handler_error:  # noqa: BLE001 - R-POL-12: pause and report
        # Also when a failed flush deactivated it; not if the handler ended the
        # whole transaction itself.
        if savepoint is session.get_nested_transaction():
            try:
                savepoint.rollback()
            except sa_exc.DBAPIError:
                conflict = transactions.transaction_conflict(handler_error)
                if conflict is None:
                    raise
                # MySQL/MariaDB aborted the whole locked transaction, the
                # savepoint with it: the deadlock propagates (R-EXE-51).
                raise conflict from None
        logger.error(
            "exception handler %s raised %s: %s",
            policy.handler_name,
            type(handler_error).__name__,
            handler_error,
        )
        reports.append(
            (
                handler_error,
                {"handler": policy.handler_name, "step_error": repr(error)},
                None,
            )
        )
        return (
            PolicyResult(action="pause", wait=None, terminal=False, report="always"),
            f"{type(handler_error).__name__}: {handler_error}",
        )
    if savepoint.is_active:
        savepoint.commit()
    return (
        PolicyResult(action="pause", wait=None, terminal=False, report=policy.report),
        None,
    )


def consecutive_reattempts(session: orm.Session, workflow: Any, step_name: str) -> int:
    """Count consecutive policy reattempts of ``step_name`` (R-CNT-01..06).

    Executions after the latest completed non-reattempted execution of the step,
    ordered by ``(created_at, id)`` (R-CNT-02), that are ``reattempted`` — minus
    flow-control reattempts when metadata exists (R-CNT-03) — plus failed
    executions recorded with ``reattempt_reason="prepare"`` (R-CNT-06).
    """
    execution_cls = workflow.__geneva__.StepExecution
    columns = column_detection.optional_columns(session)
    rows = engine_queries.step_history(
        session,
        execution_cls,
        workflow.id,
        step_name,
        with_metadata=columns.step_execution_metadata,
    )
    count = 0
    for row in rows:
        state, outcome = row[0], row[1]
        meta = row[2] if len(row) > 2 and isinstance(row[2], dict) else {}
        if state == StepExecutionState.COMPLETED and outcome != Outcome.REATTEMPTED:
            count = 0
        elif outcome == Outcome.REATTEMPTED:
            if (
                columns.step_execution_metadata
                and meta.get("reattempt_reason") == "flow_control"
            ):
                continue
            count += 1
        elif (
            state == StepExecutionState.FAILED
            and meta.get("reattempt_reason") == "prepare"
        ):
            count += 1
    return count
