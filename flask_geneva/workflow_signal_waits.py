"""The dispatcher's part of workflow signals: timeouts and lost wakes (SPEC §23).

:func:`flask_geneva.dispatcher.dispatch_due` calls :func:`dispatch_signal_waits`
after its own passes, so both happen within one ``GENEVA_DISPATCH_INTERVAL``
(R-WSIG-31, R-WSIG-40). See :mod:`flask_geneva.workflow_signals`.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import orm

from flask_geneva import clock
from flask_geneva import publishing
from flask_geneva import scheduling
from flask_geneva import signal_rows
from flask_geneva import store
from flask_geneva import workflow_signals
from flask_geneva.engine_context import EngineContext
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = ["dispatch_signal_waits"]

_log = logging.getLogger("flask_geneva")


def dispatch_signal_waits(context: EngineContext, session: orm.Session) -> int:
    """Wake timed-out waits and re-publish lost wakes; return how many.

    Run by :func:`flask_geneva.dispatcher.dispatch_due` after its own passes,
    so within one ``GENEVA_DISPATCH_INTERVAL``:

    - a ``waiting`` execution of a ready workflow whose ``wait_deadline``
      passed is woken (``wake``); its gate applies the timeout (R-WSIG-40);
    - a woken execution still ``scheduled`` ``GENEVA_PUBLISH_TIMEOUT`` after
      its wake (or its last re-publication) is published again with its due
      time moved to now, at most once per pass: its first publication may have
      been lost between the sender's commit and the broker. A duplicate
      delivery changes nothing (R-EXE-11) (R-WSIG-31).

    Each row in its own transaction, locking the workflow then the execution
    and re-checking the state; a row that moved on meanwhile is left alone.
    Nothing happens without the install unit.
    """
    if not workflow_signals.installed(session):
        session.rollback()
        return 0
    geneva = context.models
    settings = context.settings
    now = clock.now()
    limit = settings.housekeeping_batch_size
    timed_out = signal_rows.timed_out_waiting_ids(
        session, geneva.Workflow, geneva.StepExecution, now, limit=limit
    )
    lost = signal_rows.lost_wake_ids(
        session,
        geneva.StepExecution,
        now - settings.publish_timeout,
        publishing.DEFERRED_JOB_ID,
        limit=limit,
    )
    session.rollback()
    done = 0
    for execution_id in timed_out:
        done += _one_row(session, execution_id, StepExecutionState.WAITING)
    for execution_id in lost:
        done += _one_row(session, execution_id, StepExecutionState.SCHEDULED)
    if done:
        _log.info("woke or re-published %d waiting step executions", done)
    return done


def _one_row(session: orm.Session, execution_id: Any, expected: str) -> int:
    try:
        workflow, execution = store.lock_workflow_and_execution(session, execution_id)
        if (
            execution is None
            or execution.state != expected
            or workflow.state != WorkflowState.READY
        ):
            session.rollback()
            return 0
        now = clock.now()
        if expected == StepExecutionState.WAITING:
            if execution.wait_deadline is None or execution.wait_deadline > now:
                session.rollback()
                return 0
            workflow_signals.wake(session, workflow, execution, now)
        else:
            execution.scheduled_for = now
            scheduling.enqueue_scheduled_execution(session, workflow, execution)
        session.commit()
    except Exception as error:  # noqa: BLE001 - one row never stops the dispatcher
        session.rollback()
        _log.error(
            "could not wake step execution %s: %s: %s",
            execution_id,
            type(error).__name__,
            error,
            exc_info=error,
        )
        return 0
    return 1
