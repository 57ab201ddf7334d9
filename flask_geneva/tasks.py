"""Celery task shells (SPEC §6.3, §15.7): they take ids, push the app context, delegate.

Task names are fixed strings so that moving a module never orphans queued
messages. Step tasks have no Celery autoretry: retries are the workflow's business
(R-JOB-22).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flask import Flask
from flask import has_app_context

from flask_geneva import dispatch
from flask_geneva.tagged_logging import TaggedLoggerAdapter

__all__ = [
    "beat_schedule",
    "celery_defaults",
    "perform_step_execution",
    "register_tasks",
]

_log = logging.getLogger("flask_geneva")
_APP_ATTRIBUTE = "_flask_geneva_app"


def register_tasks(celery: Any, *, geneva: Any, app: Flask | None) -> None:
    """Register the flask_geneva tasks on ``celery`` (idempotent).

    Args:
        celery: The Celery application.
        geneva: The :class:`~flask_geneva.Geneva` extension.
        app: Flask app whose context a task pushes when none is active.
    """
    if app is not None:
        setattr(celery, _APP_ATTRIBUTE, app)

    def perform_step(task: Any, step_execution_id: Any) -> None:
        """Run one step execution by id (R-JOB-20..22)."""
        task_logger = TaggedLoggerAdapter(
            logging.getLogger("flask_geneva.tasks"),
            (f"task_id={getattr(task.request, 'id', None)}",),
        )
        with _app_context(task.app):
            perform_step_execution(step_execution_id, logger=task_logger)

    celery.task(name=dispatch.PERFORM_STEP_TASK, bind=True, ignore_result=True)(
        perform_step
    )

    def dispatch_due(task: Any) -> int:
        """Publish deferred executions now within the broker horizon (R-DSP-02)."""
        from flask_geneva import dispatcher

        with _app_context(task.app):
            return dispatcher.dispatch_due()

    celery.task(name=dispatch.DISPATCH_DUE_TASK, bind=True, ignore_result=True)(
        dispatch_due
    )


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _app_context(celery: Any) -> Any:
    if has_app_context():
        return _NullContext()
    app = getattr(celery, _APP_ATTRIBUTE, None)
    if app is None:
        raise RuntimeError(
            "flask_geneva tasks need a Flask app: call geneva.init_app(app, "
            "celery=celery) or geneva.init_celery(celery, app=app) in the worker"
        )
    return app.app_context()


def perform_step_execution(step_execution_id: Any, *, logger: Any = None) -> None:
    """Look up the execution (with retries) and run the executor (R-JOB-20/21).

    The lookup is retried ``GENEVA_FIND_ATTEMPTS`` times with ``GENEVA_FIND_DELAY``
    seconds between attempts, because with ``inline_enqueue()`` a worker can see the
    task before the row is committed. A missing execution (or None) logs a warning
    and returns. Needs an app context.

    Raises:
        Exception: Whatever the executor re-raises (R-JOB-22): the task fails.
    """
    from flask_geneva.executor import Executor
    from flask_geneva.runtime import current_state

    state = current_state()
    config = state.config
    session = state.geneva.session
    execution_cls = state.geneva.StepExecution
    found = None
    if step_execution_id is not None:
        for attempt in range(config.find_attempts):
            found = session.get(
                execution_cls, step_execution_id, populate_existing=True
            )
            # End the read transaction so the next attempt sees new commits.
            session.rollback()
            if found is not None:
                break
            if attempt + 1 < config.find_attempts:
                time.sleep(config.find_delay_seconds)
    if found is None:
        (logger or _log).warning(
            "step execution %r not found after %d attempts; nothing to do",
            step_execution_id,
            config.find_attempts,
        )
        return
    Executor.execute(step_execution_id, logger=logger)


def beat_schedule(*, dispatch_interval_seconds: float = 60.0) -> dict[str, Any]:
    """Celery beat entries for flask_geneva's periodic tasks.

    Merge into your beat schedule: ``celery.conf.beat_schedule.update(
    flask_geneva.beat_schedule())``. Without the dispatcher, steps that wait
    longer than ``GENEVA_MAX_BROKER_DELAY`` are never published (R-DSP-01/02).

    Args:
        dispatch_interval_seconds: How often ``dispatch_due`` runs; keep it equal
            to ``GENEVA_DISPATCH_INTERVAL`` (default 60 s).

    Returns:
        ``{entry name: {"task": name, "schedule": seconds}}``.
    """
    return {
        "flask-geneva-dispatch-due": {
            "task": dispatch.DISPATCH_DUE_TASK,
            "schedule": float(dispatch_interval_seconds),
        },
    }


def celery_defaults(*, visibility_timeout_seconds: int = 3600) -> dict[str, Any]:
    """Celery settings recommended for flask_geneva workers.

    ``celery.conf.update(flask_geneva.celery_defaults())``:

    - ``task_acks_late`` and ``task_reject_on_worker_lost``: a task whose worker
      dies is delivered again instead of being lost; duplicates are harmless
      (R-EXE-11), and a step killed mid-body stays ``in_progress`` for
      housekeeping to recover.
    - ``worker_prefetch_multiplier=1``: a worker holds one message at a time.
    - ``broker_transport_options.visibility_timeout`` (Redis, SQS): must stay above
      ``GENEVA_MAX_BROKER_DELAY`` and above your longest step (R-DSP-06).

    Args:
        visibility_timeout_seconds: Redis/SQS visibility timeout in seconds.

    Raises:
        ValueError: ``visibility_timeout_seconds`` is not a positive int.
    """
    if (
        isinstance(visibility_timeout_seconds, bool)
        or not isinstance(visibility_timeout_seconds, int)
        or visibility_timeout_seconds < 1
    ):
        raise ValueError(
            "visibility_timeout_seconds must be a positive int, "
            f"got {visibility_timeout_seconds!r}"
        )
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": visibility_timeout_seconds},
    }
