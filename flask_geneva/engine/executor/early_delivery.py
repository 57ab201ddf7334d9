"""Early deliveries: an execution never runs before its ``scheduled_for`` (R-EXE-18).

The Celery message only wakes a worker; the execution row says when the step is
due. A message can arrive before that time: a duplicate or a redelivery of an
older message, a broker or worker that does not hold ETA messages, a manual
retry, or clocks that disagree. Phase 1 of the executor (the claim, under the
row locks) asks :func:`defer_early_delivery` before anything else changes: an
execution delivered more than ``GENEVA_CLOCK_SKEW_TOLERANCE`` before its time is
left ``scheduled`` and published again for its time through the scheduling code
(R-SCH-09), which hands it to the dispatcher instead when that time is more than
``GENEVA_MAX_BROKER_DELAY`` ahead (R-DSP-01). The early delivery is logged.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import publications
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.engine import scheduling
from flask_geneva.models import WorkflowState

__all__ = ["defer_early_delivery"]

_log = module_logger("flask_geneva")

_REPUBLISHED_STATES = (WorkflowState.READY, WorkflowState.PERFORMING)


def defer_early_delivery(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    *,
    now: datetime,
    tolerance: timedelta,
    logger: Any = None,
) -> bool:
    """Leave an execution delivered before its time for its time (R-EXE-18).

    Called under the workflow and execution row locks, for a ``scheduled``
    execution, before any other Phase 1 check. An execution due within
    ``tolerance`` of ``now`` (or overdue) is not early: the caller claims it.
    Otherwise, by the workflow's state:

    - ``ready`` or ``performing``: the execution is published again for its
      ``scheduled_for`` (R-SCH-09): a new task id becomes its ``job_id`` and the
      task is sent after the caller's commit, or, when that time is more than
      ``GENEVA_MAX_BROKER_DELAY`` ahead or the broker cannot hold a delayed task
      (Celery eager mode), ``job_id`` becomes ``"geneva:deferred"`` and the
      dispatcher sends it when it is due (R-DSP-01/02).
    - ``paused``: nothing changes; ``resume()`` publishes it again (R-EXT-21,
      R-DSP-03).
    - ``canceled`` or ``finished``: not handled here; the caller cancels the
      execution as for an on-time delivery (R-EXE-12).

    The execution's state, ``scheduled_for`` and the workflow row are never
    changed, and no signal is sent (R-SIG-02).

    Args:
        session: The executor's session, in the locked Phase 1 transaction.
        workflow: The locked workflow.
        execution: The locked execution, in state ``scheduled``.
        now: The claim's time (aware UTC).
        tolerance: How early a delivery may be and still run
            (``GENEVA_CLOCK_SKEW_TOLERANCE``).
        logger: Logger or adapter for the warning; default ``flask_geneva``.

    Returns:
        True if the delivery was early and is fully handled: the caller commits
        the session and returns without running the step. False if the caller
        goes on with its usual checks.
    """
    early_by = execution.scheduled_for - now
    if early_by <= tolerance:
        return False
    if workflow.state not in (*_REPUBLISHED_STATES, WorkflowState.PAUSED):
        return False
    log = as_tagged(logger if logger is not None else _log)
    if workflow.state == WorkflowState.PAUSED:
        log.warning(
            "delivered %.3f s before its scheduled_for %s while the workflow is "
            "paused; leaving it for resume() (R-EXE-18)",
            early_by.total_seconds(),
            execution.scheduled_for.isoformat(),
        )
        return True
    scheduling.enqueue_scheduled_execution(session, workflow, execution)
    if execution.job_id == publications.DEFERRED_JOB_ID:
        where = "left for the dispatcher"
    else:
        where = f"published again as task {execution.job_id}"
    log.warning(
        "delivered %.3f s before its scheduled_for %s; not running it early, %s "
        "(R-EXE-18)",
        early_by.total_seconds(),
        execution.scheduled_for.isoformat(),
        where,
    )
    return True
