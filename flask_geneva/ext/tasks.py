"""Celery task shells (SPEC §6.3, §15.7): they take ids, push the app context, delegate.

Task names are fixed strings so that moving a module never orphans queued
messages. Step tasks have no Celery autoretry: retries are the workflow's business
(R-JOB-22); only a claim that lost its database connection is retried by Celery,
nothing of the step having run (R-FLT-02).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from flask import Flask
from flask import has_app_context

from flask_geneva.core import database_outages
from flask_geneva.core import publications
from flask_geneva.core.tagged_logging import TaggedLoggerAdapter
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.exceptions import ClaimFailedError
from flask_geneva.ext import soft_limit_counting

__all__ = [
    "apply_celery_defaults",
    "beat_schedule",
    "celery_defaults",
    "connect_worker_shutdown",
    "perform_step_execution",
    "register_tasks",
    "retry_claim",
    "task_logger",
]

_log = module_logger("flask_geneva")
#: Fixed name of the housekeeping task (R-HK-01, SPEC §15.7).
HOUSEKEEPING_TASK = "flask_geneva.housekeeping"
_APP_ATTRIBUTE = "_flask_geneva_app"
_REGISTERED_ATTRIBUTE = "_flask_geneva_tasks_registered"
#: Name of the Celery task logger injected into the executor (R-LOG-04).
TASK_LOGGER_NAME = "flask_geneva.tasks"
_SHUTDOWN_UID = "flask_geneva.request_worker_exit"
_shutdown_lock = threading.Lock()
_shutdown_connected = False


def connect_worker_shutdown() -> None:
    """Connect Celery's ``worker_shutting_down`` to the shutdown request (R-INT-03).

    When a worker starts its warm shutdown, :func:`flask_geneva.engine.iteration.
    request_worker_exit` is called, so resumable steps running in that process stop
    at their next checkpoint and continue in a successor. Connected once per
    process (later calls do nothing). The request reaches the process that
    receives the signal: with the ``solo`` and ``threads`` pools that is the one
    running the steps; prefork children do not see it.
    """
    global _shutdown_connected
    with _shutdown_lock:
        if _shutdown_connected:
            return
        from celery.signals import worker_shutting_down

        worker_shutting_down.connect(
            _on_worker_shutting_down, weak=False, dispatch_uid=_SHUTDOWN_UID
        )
        _shutdown_connected = True


def _on_worker_shutting_down(*args: Any, **kwargs: Any) -> None:
    from flask_geneva.engine.iteration import request_worker_exit

    _log.info("Celery worker shutting down; asking running steps to stop")
    request_worker_exit()


def task_logger(task: Any) -> TaggedLoggerAdapter:
    """The Celery task logger, without tags of its own (R-LOG-03/04, R-JOB-21).

    It is ``celery.utils.log.get_task_logger("flask_geneva.tasks")``: records go
    through the worker's task log format, whose ``%(task_name)s[%(task_id)s]``
    already names the task, so no ``[task_id=...]`` tag repeats it; the workflow
    and execution tags follow.

    Args:
        task: The bound Celery task (unused: the log format names it).
    """
    from celery.utils.log import get_task_logger

    return TaggedLoggerAdapter(get_task_logger(TASK_LOGGER_NAME))


def register_tasks(celery: Any, *, geneva: Any, app: Flask | None) -> None:
    """Register the flask_geneva tasks on ``celery`` (idempotent).

    Args:
        celery: The Celery application.
        geneva: The :class:`~flask_geneva.Geneva` extension.
        app: Flask app whose context a task pushes when none is active.
    """
    if app is not None:
        setattr(celery, _APP_ATTRIBUTE, app)
        # Prefork children must not use the parent's pooled connections.
        from flask_geneva.ext import worker_processes

        worker_processes.watch_app(app)
    connect_worker_shutdown()
    # A worker survives a broker restart (R-FLT-60); the module imports Celery's
    # worker, which only a Celery app's registration needs.
    from flask_geneva.ext import broker_consumer

    broker_consumer.use_geneva_consumer(celery)
    if getattr(celery, _REGISTERED_ATTRIBUTE, False):
        # Registering again would only re-create the same tasks; Celery warns
        # (DuplicateTaskNameWarning) when a name gets a second callable.
        return
    setattr(celery, _REGISTERED_ATTRIBUTE, True)

    def perform_step(task: Any, step_execution_id: Any) -> None:
        """Run one step execution by id (R-JOB-20..22, R-FLT-02)."""
        # A soft time limit the body catches is still a timeout (R-STO-10).
        soft_limit_counting.count_soft_time_limits()
        with _app_context(task.app):
            try:
                perform_step_execution(step_execution_id, logger=task_logger(task))
            except ClaimFailedError as failed:
                retry_claim(task, failed)

    # shared=False: a shared task would be added to every Celery app created
    # later in the process, and registering it there again is a duplicate.
    celery.task(
        name=publications.PERFORM_STEP_TASK, bind=True, ignore_result=True, shared=False
    )(perform_step)

    def dispatch_due(task: Any) -> int:
        """One dispatcher run: publish due deferred executions, recover dead
        workers' executions, record the run (R-DSP-02, R-WRK-06, R-WRK-13)."""
        from flask_geneva.engine.operators import dispatcher
        from flask_geneva.ext.app_state import current_context

        with _app_context(task.app):
            run = dispatcher.run_dispatcher(
                current_context(), node_name=_node_name(task)
            )
            return run.published

    celery.task(
        name=publications.DISPATCH_DUE_TASK, bind=True, ignore_result=True, shared=False
    )(dispatch_due)

    def housekeeping(task: Any) -> dict[str, int]:
        """Clean up, recover stuck executions, emit gauges (R-HK-01)."""
        from flask_geneva.engine.operators import housekeeping as housekeeping_module
        from flask_geneva.ext.app_state import current_context

        with _app_context(task.app):
            return housekeeping_module.run_housekeeping(
                current_context(), node_name=_node_name(task)
            )

    celery.task(name=HOUSEKEEPING_TASK, bind=True, ignore_result=True, shared=False)(
        housekeeping
    )


def retry_claim(task: Any, failed: ClaimFailedError) -> None:
    """Retry a step task whose claim lost its database connection (R-FLT-02).

    Celery's own retry (``task.retry(countdown=...)``): the delivery is
    published again with the next wait of :func:`~flask_geneva.core.
    database_outages.claim_retry_delays` for ``GENEVA_WORKER_DEAD_AFTER`` and
    acknowledged, so the worker goes on with other deliveries meanwhile. After
    the last wait the task ends without an error and the execution, still
    ``scheduled``, is left to the dispatcher (R-FLT-20), which publishes it
    again. Under Celery's eager mode nothing is retried: ``failed`` is raised.

    Args:
        task: The bound ``perform_step`` task.
        failed: What the executor raised.

    Raises:
        celery.exceptions.Retry: The retry was published (Celery's signal to
            end this delivery).
        ClaimFailedError: ``failed``, under eager mode.
    """
    from flask_geneva.ext.app_state import current_context

    request = task.request
    if getattr(request, "is_eager", False):
        raise failed
    delays = database_outages.claim_retry_delays(
        current_context().settings.worker_dead_after
    )
    retries = int(getattr(request, "retries", 0) or 0)
    if retries >= len(delays):
        task_logger(task).warning(
            "the claim of step execution %s lost its database connection %d "
            "times; leaving it scheduled for the dispatcher (R-FLT-20)",
            failed.step_execution_id,
            retries + 1,
        )
        return
    countdown = delays[retries]
    task_logger(task).info(
        "retrying the delivery of step execution %s in %g s (retry %d of %d, R-FLT-02)",
        failed.step_execution_id,
        countdown,
        retries + 1,
        len(delays),
    )
    raise task.retry(countdown=countdown, max_retries=len(delays), exc=failed)


def _node_name(task: Any) -> str | None:
    """The Celery node name of the worker running ``task`` (``celery@host``)."""
    hostname = getattr(getattr(task, "request", None), "hostname", None)
    return hostname if isinstance(hostname, str) else None


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


def perform_step_execution(
    step_execution_id: Any,
    *,
    logger: Any = None,
    run_early: bool = False,
    continue_inline: bool = True,
) -> None:
    """Find the execution (with retries) and run the executor (R-JOB-20/21).

    The execution is looked up by the executor's first locking statement, tried
    ``GENEVA_FIND_ATTEMPTS`` times with ``GENEVA_FIND_DELAY`` seconds between
    attempts, because with ``inline_enqueue()`` a worker can see the task before
    the row is committed. A missing execution (or None) logs a warning and
    returns. An execution delivered before its ``scheduled_for`` (beyond
    ``GENEVA_CLOCK_SKEW_TOLERANCE``) does not run: it is published again for its
    time (R-EXE-18). Needs an app context.

    ``GENEVA_TASK_RERAISE`` decides which policy-handled exceptions fail the task
    (R-EXE-50 amended): with ``"unhandled"`` (the default) a reattempt, skip or
    finish the policy chose returns normally, so Celery counts a success;
    ``"always"`` re-raises every one.

    Args:
        step_execution_id: The execution's primary key.
        logger: Base logger for the executor (R-LOG-04); default ``flask_geneva``.
        run_early: Run it even before its time (``drain(respect_eta=False)``).
        continue_inline: Run the following steps in this task while they are
            due now on the same queue and priority, within
            ``GENEVA_INLINE_CONTINUATION_BUDGET`` (R-EXE-70..77); the test
            helpers' ``drain()`` passes False, so each of its tasks runs one step.

    Raises:
        Exception: Whatever the executor re-raises (R-JOB-22): the task fails.
    """
    from flask_geneva.engine.executor import step as executor
    from flask_geneva.ext.app_state import current_context

    context = current_context()
    config = context.settings
    executor.execute_step(
        context,
        step_execution_id,
        logger=logger,
        lookup_attempts=config.find_attempts,
        lookup_delay_seconds=config.find_delay_seconds,
        reraise=config.task_reraise,
        run_early=run_early,
        continue_inline=continue_inline,
    )


def beat_schedule(
    *,
    dispatch_interval_seconds: float = 30.0,
    housekeeping_interval_seconds: float = 1800.0,
) -> dict[str, Any]:
    """Celery beat entries for flask_geneva's periodic tasks.

    Merge into your beat schedule: ``celery.conf.beat_schedule.update(
    flask_geneva.beat_schedule())``. Without the dispatcher, steps that wait
    longer than ``GENEVA_MAX_BROKER_DELAY`` are never published (R-DSP-01/02).

    Args:
        dispatch_interval_seconds: How often ``dispatch_due`` runs (it also
            recovers dead workers' executions, R-WRK-12); keep it equal to
            ``GENEVA_DISPATCH_INTERVAL`` (default 30 s), which the health
            warning uses (R-HK-43).
        housekeeping_interval_seconds: How often housekeeping runs; keep it
            equal to ``GENEVA_HOUSEKEEPING_INTERVAL`` (default 30 minutes).

    Returns:
        ``{entry name: {"task": name, "schedule": seconds}}``.

    Raises:
        ValueError: An interval is not a positive, finite number of seconds
            (a bool, a str, None, 0, NaN).
    """
    return {
        "flask-geneva-dispatch-due": {
            "task": publications.DISPATCH_DUE_TASK,
            "schedule": _interval(
                dispatch_interval_seconds, "dispatch_interval_seconds"
            ),
        },
        "flask-geneva-housekeeping": {
            "task": HOUSEKEEPING_TASK,
            "schedule": _interval(
                housekeeping_interval_seconds, "housekeeping_interval_seconds"
            ),
        },
    }


def _interval(value: object, name: str) -> float:
    """A beat entry's interval: a positive, finite number of seconds (R-FLT-72)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"{name} must be a positive number of seconds, got {value!r} "
            f"({type(value).__name__})"
        )
    return float(value)


def celery_defaults(
    celery: Any = None,
    /,
    *,
    visibility_timeout_seconds: int = 3600,
    publish_timeout_seconds: float = 5.0,
) -> dict[str, Any]:
    """Celery settings recommended for flask_geneva workers and publishers.

    ``celery.conf.update(flask_geneva.celery_defaults(celery))``:

    - ``task_acks_late`` and ``task_reject_on_worker_lost``: a task whose worker
      dies is delivered again instead of being lost; duplicates are harmless
      (R-EXE-11), and a step killed mid-body stays ``in_progress`` for
      housekeeping to recover.
    - ``worker_prefetch_multiplier=1``: a worker holds one message at a time.
    - ``broker_transport_options.visibility_timeout`` (Redis, SQS): must stay above
      ``GENEVA_MAX_BROKER_DELAY`` and above your longest step (R-DSP-06).
    - Broker timeouts, a quarter of ``publish_timeout_seconds`` each:
      ``broker_connection_timeout`` (AMQP connect) and
      ``broker_transport_options`` ``socket_timeout`` / ``socket_connect_timeout``
      (Redis), so a broker that hangs fails a publication instead of blocking
      it; with the one reconnect-and-retry of each publication it stays within
      ``publish_timeout_seconds``. Keep ``GENEVA_PUBLISH_TIMEOUT`` equal to it. A
      publication that fails is left for the dispatcher (issue 14).

    Given the Celery app, the returned ``broker_transport_options`` are the
    app's own with these three keys set, so ``conf.update`` keeps the app's
    other keys (a ``global_keyprefix``, a Sentinel ``master_name``, ...);
    without it they are these three alone and ``conf.update`` replaces the
    app's (R-DSP-09). ``flask geneva worker`` applies these to any setting the
    Celery app does not set itself, the app's transport keys winning
    (:func:`apply_celery_defaults`).

    Args:
        celery: The ``celery.Celery`` app whose ``broker_transport_options``
            to merge into (not changed here), or None.
        visibility_timeout_seconds: Redis/SQS visibility timeout in seconds.
        publish_timeout_seconds: How long one publication may block, in seconds
            (default 5, as ``GENEVA_PUBLISH_TIMEOUT``).

    Returns:
        Celery setting names and values.

    Raises:
        ValueError: ``visibility_timeout_seconds`` is not a positive int, or
            ``publish_timeout_seconds`` not a positive number.
        TypeError: ``celery`` is neither None nor a Celery app (an object with
            ``conf``).
    """
    conf = getattr(celery, "conf", None)
    if celery is not None and conf is None:
        raise TypeError(
            "celery must be a Celery app (whose conf.broker_transport_options "
            f"are merged) or None, got {celery!r}"
        )
    if (
        isinstance(visibility_timeout_seconds, bool)
        or not isinstance(visibility_timeout_seconds, int)
        or visibility_timeout_seconds < 1
    ):
        raise ValueError(
            "visibility_timeout_seconds must be a positive int, "
            f"got {visibility_timeout_seconds!r}"
        )
    if (
        isinstance(publish_timeout_seconds, bool)
        or not isinstance(publish_timeout_seconds, int | float)
        or not publish_timeout_seconds > 0
    ):
        raise ValueError(
            "publish_timeout_seconds must be a positive number of seconds, "
            f"got {publish_timeout_seconds!r}"
        )
    broker_timeout = publish_timeout_seconds / 4
    return {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": broker_timeout,
        "broker_transport_options": {
            **dict((conf.broker_transport_options if conf is not None else None) or {}),
            "visibility_timeout": visibility_timeout_seconds,
            "socket_timeout": broker_timeout,
            "socket_connect_timeout": broker_timeout,
        },
    }


def apply_celery_defaults(celery: Any, **options: Any) -> None:
    """Give ``celery`` the :func:`celery_defaults` it does not set itself.

    A setting still at Celery's own default takes flask_geneva's value; one the
    host set keeps its value. ``broker_transport_options`` is merged key by key,
    the host's keys winning.

    Args:
        celery: A ``celery.Celery`` application.
        **options: Passed to :func:`celery_defaults`.
    """
    from celery.app.defaults import DEFAULTS as CELERY_DEFAULTS

    updates: dict[str, Any] = {}
    for key, value in celery_defaults(**options).items():
        current = celery.conf.get(key)
        if key == "broker_transport_options":
            updates[key] = {**value, **(current or {})}
        elif current == CELERY_DEFAULTS.get(key):
            updates[key] = value
    celery.conf.update(updates)
