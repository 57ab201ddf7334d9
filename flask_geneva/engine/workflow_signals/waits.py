"""The dispatcher's part of workflow signals: timeouts and lost wakes (SPEC §23).

:func:`flask_geneva.engine.operators.dispatcher.dispatch_due` calls
:func:`dispatch_signal_waits`
after its own passes, so both happen within one ``GENEVA_DISPATCH_INTERVAL``
(R-WSIG-31, R-WSIG-40). See :mod:`flask_geneva.engine.workflow_signals.delivery`.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import log_fields
from flask_geneva.core import publications
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.core.tagged_logging import workflow_log_fields
from flask_geneva.db import locks as row_locks
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import workflow_signals as signal_rows
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import models_of
from flask_geneva.engine import scheduling
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = ["dispatch_signal_waits", "signal_gauges", "signal_wait_overview"]

#: The workflow signal gauges and their keys in :func:`signal_wait_overview`.
SIGNAL_GAUGES = (
    ("geneva_drive.executions_waiting", "waiting"),
    ("geneva_drive.executions_waiting_long", "waiting_long"),
    ("geneva_drive.signals_pending", "pending_signals"),
    (
        "geneva_drive.signals_pending_oldest_age_seconds",
        "oldest_pending_signal_age_seconds",
    ),
)

_log = module_logger("flask_geneva")


def dispatch_signal_waits(context: EngineContext, session: orm.Session) -> int:
    """Wake timed-out waits and re-publish lost wakes; return how many.

    Run by :func:`flask_geneva.engine.operators.dispatcher.dispatch_due` after its own
    passes,
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
        publications.DEFERRED_JOB_ID,
        since=now - settings.stuck_scheduled_threshold,
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
    token = None
    try:
        workflow, execution = row_locks.lock_workflow_and_execution(
            session, execution_id
        )
        if workflow is not None and execution is not None:
            # Its wake, commit, publication and error name it (R-OLOG-02).
            token = log_fields.set_fields(workflow_log_fields(workflow, execution))
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
    finally:
        if token is not None:
            log_fields.reset_fields(token)
    return 1


def signal_wait_overview(
    session: orm.Session, *, config: GenevaConfig
) -> dict[str, Any] | None:
    """Parked executions and buffered signals, for gauges and status (R-WSIG-65).

    Args:
        session: A session bound to the models; only read (the caller ends the
            transaction).
        config: The settings (``GENEVA_SIGNAL_WAIT_WARN_AFTER``).

    Returns:
        None without the ``add_workflow_signals`` unit, else ``{"waiting":
        executions parked at a wait_for gate, "waiting_long": those parked
        longer than GENEVA_SIGNAL_WAIT_WARN_AFTER, "pending_signals": signals
        of ongoing workflows no step claimed yet,
        "oldest_pending_signal_age_seconds": the oldest one's age (0.0 without
        one), "per_workflow": {type: the same four keys} for each type with a
        parked execution or a pending signal (R-OMET-20)}``.
    """
    if not column_detection.optional_columns(session).workflow_signals:
        return None
    models = models_of(session)
    signal_cls = getattr(models, "WorkflowSignal", None)
    if signal_cls is None:
        return None
    now = clock.now()
    per_type = signal_rows.signal_wait_counts_by_type(
        session,
        models.Workflow,
        models.StepExecution,
        signal_cls,
        long_before=now - config.signal_wait_warn_after,
    )
    per_workflow = {
        workflow_type: _overview(*counts, now=now)
        for workflow_type, counts in sorted(per_type.items())
    }
    oldest = [counts[3] for counts in per_type.values() if counts[3] is not None]
    totals = _overview(
        sum(counts[0] for counts in per_type.values()),
        sum(counts[1] for counts in per_type.values()),
        sum(counts[2] for counts in per_type.values()),
        min(oldest) if oldest else None,
        now=now,
    )
    return {**totals, "per_workflow": per_workflow}


def _overview(
    waiting: int, waiting_long: int, pending: int, oldest: Any, *, now: Any
) -> dict[str, Any]:
    age = 0.0
    if oldest is not None:
        if oldest.tzinfo is None:  # SQLite and MySQL read back naive UTC
            oldest = oldest.replace(tzinfo=UTC)
        age = max(0.0, (now - oldest).total_seconds())
    return {
        "waiting": waiting,
        "waiting_long": waiting_long,
        "pending_signals": pending,
        "oldest_pending_signal_age_seconds": age,
    }


def signal_gauges(
    session: orm.Session, *, config: GenevaConfig
) -> list[tuple[str, float, dict[str, str] | None]]:
    """``(gauge name, value, tags)`` of the workflow signal gauges (R-WSIG-65).

    ``geneva_drive.executions_waiting``, ``geneva_drive.executions_waiting_long``
    (parked longer than ``GENEVA_SIGNAL_WAIT_WARN_AFTER``),
    ``geneva_drive.signals_pending`` and
    ``geneva_drive.signals_pending_oldest_age_seconds``: the totals without
    tags, then the same per workflow type with ``{"workflow": type}`` for each
    type that has a parked execution or a pending signal (R-OMET-20); empty
    without the ``add_workflow_signals`` unit.
    """
    overview = signal_wait_overview(session, config=config)
    if overview is None:
        return []
    gauges: list[tuple[str, float, dict[str, str] | None]] = [
        (name, overview[key], None) for name, key in SIGNAL_GAUGES
    ]
    for workflow_type, counts in overview["per_workflow"].items():
        tags = {"workflow": workflow_type}
        gauges.extend((name, counts[key], tags) for name, key in SIGNAL_GAUGES)
    return gauges
