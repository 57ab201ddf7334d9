"""Publications that did not reach the broker: logged, counted, left for the dispatcher.

The scheduled execution row is the outbox (BTR-01); the Celery message only wakes
a worker. So a publication that fails or times out after its row was committed
(``create()``, an operator's action, the executor, the dispatcher, housekeeping)
never turns that success into an error (issue 14). Instead:

- it is logged at WARNING with the task id, the execution and the error;
- it is counted: :func:`publish_failures` (per process), sent as the gauge
  ``geneva_drive.publish_failures`` through ``GENEVA_METRICS``;
- its execution is handed to the dispatcher: ``job_id`` becomes
  ``"geneva:deferred"`` (only while the row is still ``scheduled`` with the job id
  that failed), so the next
  :func:`~flask_geneva.engine.operators.dispatcher.dispatch_due` run,
  within one ``GENEVA_DISPATCH_INTERVAL``, publishes it again (R-DSP-02).

If that update fails as well (the database is unreachable too) it is logged, and
stuck-scheduled recovery remains the safety net (R-DSP-05, R-HK-20).
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import publications
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db.context import EngineContext
from flask_geneva.db.context import bound_context
from flask_geneva.db.queries import maintenance as maintenance_queries

__all__ = [
    "PUBLISH_FAILURES_GAUGE",
    "hand_back_to_dispatcher",
    "publications_failed",
    "publish_failures",
]

_log = module_logger("flask_geneva")

#: Gauge name of the per-process count of failed publications.
PUBLISH_FAILURES_GAUGE = "geneva_drive.publish_failures"

_lock = threading.Lock()
_failures = 0


def publish_failures() -> int:
    """How many publications failed or timed out in this process so far."""
    return _failures


def publications_failed(
    session: orm.Session,
    failed: list[tuple[publications.Publication, BaseException]],
    *,
    committed: bool,
) -> None:
    """Log, count and hand back to the dispatcher publications that failed.

    Never raises.

    Args:
        session: The session whose transaction wrote the executions.
        failed: ``(publication, error)`` pairs, in publication order.
        committed: True when the rows are committed (the update then runs in a
            short transaction of its own); False while ``session``'s transaction
            that inserted them is still open (the update joins it).
    """
    global _failures
    with _lock:
        _failures += len(failed)
        total = _failures
    for publication, error in failed:
        _log.warning(
            "publishing %s for step execution %s (task id %s) failed: %s: %s; "
            "left for the dispatcher",
            publication.task_name,
            publication.step_execution_id,
            publication.task_id,
            type(error).__name__,
            error,
        )
    context = bound_context(session)
    if context is None:
        _log.warning(
            "no engine context: %d unpublished step executions are left for "
            "stuck-scheduled recovery",
            len(failed),
        )
        return
    _emit_gauge(context, total)
    unpublished = [
        (publication.step_execution_id, publication.task_id)
        for publication, _ in failed
        if publication.task_name == publications.PERFORM_STEP_TASK
    ]
    try:
        _hand_back(session, context.models.StepExecution, unpublished, committed)
    except Exception as error:  # noqa: BLE001 - recovery (R-DSP-05) still finds them
        _log.error(
            "could not hand step executions %s to the dispatcher (%s: %s); "
            "stuck-scheduled recovery will publish them",
            ", ".join(str(execution_id) for execution_id, _ in unpublished),
            type(error).__name__,
            error,
        )


def _hand_back(
    session: orm.Session,
    execution_cls: Any,
    unpublished: list[tuple[Any, str]],
    committed: bool,
) -> None:
    if not unpublished:
        return
    marker = publications.DEFERRED_JOB_ID
    if not committed and session.in_transaction():
        hand_back_to_dispatcher(session, execution_cls, unpublished, marker=marker)
        return
    engine: sa.Engine = session.get_bind(mapper=sa.inspect(execution_cls))  # type: ignore[assignment]
    with engine.begin() as connection:
        hand_back_to_dispatcher(connection, execution_cls, unpublished, marker=marker)


def _emit_gauge(context: EngineContext, total: int) -> None:
    try:
        metrics = context.settings.metrics
        if metrics is not None:
            metrics.gauge(PUBLISH_FAILURES_GAUGE, total, None)
    except Exception as error:  # noqa: BLE001 - R-MET-06: a metrics hook never breaks us
        _log.warning(
            "metrics hook raised %r for %s; ignored", error, PUBLISH_FAILURES_GAUGE
        )


#: Set ``job_id = marker`` on executions whose publication failed (R-DSP-02): the
#: guarded statement of :mod:`flask_geneva.db.queries.maintenance`.
hand_back_to_dispatcher = maintenance_queries.hand_back_unpublished
