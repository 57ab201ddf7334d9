"""The executor's second stage: run the step's hooks and body (SPEC §7.5).

:func:`run_body` runs between the claim's commit and finalize, with no row
lock held: the ``before``/``around``/``after_step_execution`` hooks and the
body in the step context, the body's writes committed (or rolled back after
an exception) before finalize (R-EXE-33..39), or left to finalize's
transaction when the body returned without committing itself (R-EXE-82), and
the ``step`` signal sent (R-SIG-03). It hands a
:class:`~flask_geneva.engine.executor.run.BodyResult` to
:mod:`~flask_geneva.engine.executor.finalize`.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import orm

from flask_geneva import signals
from flask_geneva.core import clock
from flask_geneva.core import soft_time_limits
from flask_geneva.db import session_transactions
from flask_geneva.engine.executor import events as executor_events
from flask_geneva.engine.executor.run import BodyResult
from flask_geneva.engine.executor.run import StepRun
from flask_geneva.engine.flow_control import step_context
from flask_geneva.engine.timeouts import body as step_timeouts
from flask_geneva.exceptions import FlowControlSignal
from flask_geneva.exceptions import StepInterrupt
from flask_geneva.models.workflow import WorkflowMixin

__all__ = ["run_body"]


def run_body(run: StepRun, workflow: Any, execution: Any, step: Any) -> BodyResult:
    """Run the hooks and the body of the claimed ``execution`` (R-EXE-33..39).

    Args:
        run: The run; a resumable step's ``it`` is kept on it (R-PDR-03) and
            a failing ``after_step_execution`` is queued for the reporter.
        workflow: The claimed workflow, still loaded.
        execution: The claimed execution, ``in_progress``.
        step: Its step definition.

    Returns:
        How the body ended. An exception of the body or of a hook, or of the
        commit of the body's writes, is captured in it (R-EXE-35/37/38).

    Raises:
        BaseException: What is no ``Exception`` propagates (R-EXE-35).
    """
    session = run.session
    # End the read transaction those loads opened, keeping the loaded state: the
    # body starts without a database snapshot. On SQLite (WAL) a snapshot taken
    # here, before the body, could not be upgraded to a write once another
    # connection committed meanwhile (e.g. an operator pausing the workflow),
    # so the body's own writes would fail to commit.
    if session.in_transaction():
        session_transactions.commit_keeping_state(session)
    run.install_loggers(workflow, execution)
    result = BodyResult("completed")
    before, around, after = _overridden_hooks(workflow)
    started_at, started = clock.now(), time.monotonic()
    soft_limits_before = soft_time_limits.count()
    # R-EXE-82: a body (or hook) that ends the session's transaction itself
    # moves this count, and keeps the separate commit of its writes.
    ended_before = session_transactions.root_transactions_ended(session)
    # Entered for the body, then again for after_step_execution.
    in_step = step_context(
        workflow.id,
        "body",
        resumable=step.is_resumable,
        execution_id=execution.id,
        step_name=step.name,
    )
    with in_step:
        try:
            if before:
                workflow.before_step_execution(execution)
            if around:
                with workflow.around_step_execution(execution):
                    result = _invoke(run, workflow, execution, step)
            else:
                result = _invoke(run, workflow, execution, step)
        except FlowControlSignal as flow_control:
            result = BodyResult("flow_control", flow_control=flow_control)
        except StepInterrupt as interrupt:
            result = BodyResult("interrupted", interrupt=interrupt)
        except Exception as error:  # noqa: BLE001 - R-EXE-37: hook errors count as body errors
            run.logger.error("hook raised %s: %s", type(error).__name__, error)
            result = BodyResult("exception", error=error)

    # R-STO-10/11: a run past the step's timeout ends in StepTimeout.
    result = _timed(result, step, started_at, soft_limits_before)
    # R-EXE-38: persist the body's writes, or discard them after an exception.
    if result.kind == "exception":
        session.rollback()
    elif _may_join(run, session, workflow, step, result, after, ended_before):
        # R-EXE-82: finalize's first attempt commits these writes with the outcome.
        run.joined = True
    else:
        try:
            _commit_if_pending(session)
        except Exception as commit_error:  # noqa: BLE001 - becomes the captured error
            session.rollback()
            run.logger.error("committing the step's writes failed: %s", commit_error)
            failed = BodyResult("exception", error=commit_error)
            result = _timed(failed, step, started_at, soft_limits_before)
    # Without receivers and without an after hook nothing can write to the
    # session from here on: nothing is left to commit (R-EXE-36, R-SIG-03).
    received = bool(signals.step.receivers)
    if received:
        run.events.emit_step_event(result, executor_events.timing(started_at, started))

    try:
        if after:
            with in_step:
                workflow.after_step_execution(execution)
        if after or received:
            _commit_if_pending(session)
    except Exception as hook_error:  # noqa: BLE001 - R-EXE-37: logged and reported
        session.rollback()
        run.logger.error(
            "after_step_execution raised %s: %s",
            type(hook_error).__name__,
            hook_error,
        )
        run.reports.append((hook_error, {"hook": "after_step_execution"}, None))
    except FlowControlSignal:
        session.rollback()
        run.logger.warning("flow control in after_step_execution is ignored")
    run.logger.info(
        "Finished step with outcome %s in %.3fs",
        result.label,
        time.monotonic() - started,
    )
    return result


def _invoke(run: StepRun, workflow: Any, execution: Any, step: Any) -> BodyResult:
    """Call the step's body; capture how it ended (R-EXE-35)."""
    try:
        if step.is_resumable:
            from flask_geneva.engine import iteration

            iterable_step = iteration.build_iterable_step(
                run, workflow, execution, step
            )
            run.iterable_step = iterable_step
            step.invoke(workflow, iterable_step)
        else:
            step.invoke(workflow)
    except FlowControlSignal as flow_control:
        return BodyResult("flow_control", flow_control=flow_control)
    except StepInterrupt as interrupt:
        return BodyResult("interrupted", interrupt=interrupt)
    except Exception as error:  # noqa: BLE001 - R-EXE-35: captured for the policy
        # Logged with its policy decision (task_failures.log_captured) or, if
        # the state changed under the step, when it is dropped (drop_error).
        return BodyResult("exception", error=error)
    return BodyResult("completed")


def _timed(
    result: BodyResult, step: Any, started_at: Any, soft_limits_before: int
) -> BodyResult:
    """``result``, or a captured :class:`StepTimeout` it amounts to (R-STO-10/11).

    Only for a step with a ``timeout``: Celery's soft time limit raised in
    the run (seen in the error's chain, or counted by the worker while the
    run went on: a body that caught it), or a body that returned after the
    timeout, becomes the exception the step's policies handle (R-STO-12
    keeps every other end).
    """
    if step.timeout is None:
        return result
    timed_out = step_timeouts.timeout_error(
        step_name=step.name,
        timeout=step.timeout,
        kind=result.kind,
        error=result.error,
        started_at=started_at,
        ended_at=clock.now(),
        soft_limit_signalled=soft_time_limits.count() > soft_limits_before,
    )
    if timed_out is None:
        return result
    return BodyResult("exception", error=timed_out)


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


def _may_join(
    run: StepRun,
    session: orm.Session,
    workflow: Any,
    step: Any,
    result: BodyResult,
    after: bool,
    ended_before: int,
) -> bool:
    """Whether finalize may commit the body's writes with the outcome (R-EXE-82).

    Only a body that returned normally with a transaction open or writes
    pending (else there is nothing to join), that did not end the session's root
    transaction itself (no commit or rollback of its own, no savepoint left
    open), of a step that is not resumable, with no ``after_step_execution``
    hook and no ``step`` receiver (user code that would run between the body
    and finalize), and, when the run may claim the next step inline, a next
    step whose inline claim runs no user code and takes no limit's slot (an
    error there would roll the body's writes back with it, R-EXE-73,
    R-LIM-15). Never on MySQL/MariaDB: finalize's multi-table ``UPDATE`` there
    locks the joined rows in its own order, and with the body's locks held it
    deadlocked against a parent's cancel cascading to its children (CI).
    """
    if (
        result.kind != "completed"
        or session.get_bind().dialect.name == "mysql"
        # Nothing to join: no transaction, nothing pending.
        or not (
            session.in_transaction() or session.new or session.dirty or session.deleted
        )
        or after
        or step.is_resumable
        or signals.step.receivers
        or session.in_nested_transaction()
        or session_transactions.root_transactions_ended(session) != ended_before
    ):
        return False
    if run.inline_budget is not None:
        following = workflow.steps.next_after(step.name)
        if following is not None and (
            following.limits
            or following.skip_if is not None
            or following.run_if is not None
            or type(workflow).__geneva_definitions__.cancel_conditions
        ):
            return False
    return True


def _commit_if_pending(session: orm.Session) -> None:
    """Commit only if the session has a transaction or unflushed changes.

    A commit with nothing to do would still expire every loaded instance, and
    the next attribute access would reload it.
    """
    if session.in_transaction() or session.new or session.dirty or session.deleted:
        session.commit()
