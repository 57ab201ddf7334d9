"""The Celery publisher: sends publications through a Celery app (SPEC §6.2).

:class:`CeleryBackend` is the task backend of ``GENEVA_TASK_BACKEND = "celery"``:
it publishes by task name with bounded broker timeouts (R-DSP-07), pauses after
a failure, and under allowed Celery eager mode queues tasks until the engine's
commit is over (:func:`run_eager_queue`, R-TH-21). The engine never imports this
module; it requests publications through :mod:`flask_geneva.engine.publishing`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from flask_geneva.core.publications import Publication
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.engine.publishing import broker_pause_ignored

__all__ = [
    "BrokerPaused",
    "CeleryBackend",
    "bound_broker_timeouts",
    "run_eager_queue",
]

logger = module_logger("flask_geneva")


def bound_broker_timeouts(celery_app: Any, publish_timeout_seconds: float) -> None:
    """Give ``celery_app`` the broker timeouts that bound a publication (R-DSP-07).

    A Celery app without :func:`flask_geneva.celery_defaults` (the web process of
    the README's quick start, say) would block a publication on a hung broker for
    as long as the operating system keeps the socket open. Each timeout the host
    left unset gets a quarter of ``publish_timeout_seconds``:
    ``broker_connection_timeout`` while still at Celery's default, and
    ``broker_transport_options`` ``socket_timeout`` / ``socket_connect_timeout``
    (Redis) where the host's options lack them. Settings the host chose are kept.
    Connections the app opened before keep their old timeouts.

    Args:
        celery_app: The host's Celery application.
        publish_timeout_seconds: ``GENEVA_PUBLISH_TIMEOUT`` in seconds.
    """
    from celery.app.defaults import DEFAULTS as CELERY_DEFAULTS

    broker_timeout = publish_timeout_seconds / 4
    conf = celery_app.conf
    updates: dict[str, Any] = {}
    current = conf.get("broker_connection_timeout")
    if current == CELERY_DEFAULTS.get("broker_connection_timeout"):
        updates["broker_connection_timeout"] = broker_timeout
    options = dict(conf.get("broker_transport_options") or {})
    if not {"socket_timeout", "socket_connect_timeout"} <= options.keys():
        options.setdefault("socket_timeout", broker_timeout)
        options.setdefault("socket_connect_timeout", broker_timeout)
        updates["broker_transport_options"] = options
    if updates:
        conf.update(updates)


class CeleryBackend:
    """Publishes through ``celery_app.send_task`` by task name, bounded in time.

    Each publication uses Celery's own publish retry (one reconnect and retry, so
    a pooled connection the broker dropped is replaced) and passes
    ``publish_timeout_seconds`` as kombu's publish timeout. How long one broker
    operation may block comes from the Celery app's broker settings
    (``broker_connection_timeout``, ``broker_transport_options`` ``socket_timeout``
    and ``socket_connect_timeout``): :func:`flask_geneva.celery_defaults` sets them
    so that a publication, retry included, stays within
    ``GENEVA_PUBLISH_TIMEOUT``. A publication that took longer is logged.

    After a failed publication the broker is not tried again for
    ``publish_timeout_seconds``: publications in that pause fail at once
    (:class:`BrokerPaused`) and go to the dispatcher like any failure, so a run
    that publishes row after row (housekeeping, say) is not blocked once per row
    by a hung broker. The dispatcher tries the broker regardless
    (:func:`trying_the_broker`): it is the retry, and stops at its first failure.

    Args:
        celery_app: The host's Celery application.
        publish_timeout_seconds: ``GENEVA_PUBLISH_TIMEOUT`` in seconds.
    """

    def __init__(self, celery_app: Any, publish_timeout_seconds: float = 5.0) -> None:
        self.celery_app = celery_app
        self.publish_timeout_seconds = publish_timeout_seconds
        self._paused_until = 0.0
        bound_broker_timeouts(celery_app, publish_timeout_seconds)

    @property
    def holds_eta(self) -> bool:
        """False under Celery eager mode, which runs a task at once, eta or not."""
        return not self.celery_app.conf.task_always_eager

    def run_queued(self) -> int:
        """Run the tasks eager mode queued (R-TH-21); see :func:`run_eager_queue`.

        The engine calls it after its own commits, through
        :meth:`flask_geneva.db.context.EngineContext.run_queued_tasks`.

        Returns:
            The number of tasks run.
        """
        return run_eager_queue()

    def publish(self, publication: Publication) -> None:
        """Send one publication.

        Raises:
            BrokerPaused: A publication failed less than
                ``publish_timeout_seconds`` ago; the broker was not tried.
            Exception: Whatever Celery/kombu raised (e.g.
                ``kombu.exceptions.OperationalError``); the caller,
                :func:`request_publication`, never lets it reach its own caller.
        """
        if self.celery_app.conf.task_always_eager:
            # R-TH-21: never run a task inside the commit that published it.
            _eager.queue.append((self.celery_app, publication))
            return
        timeout = self.publish_timeout_seconds
        options: dict[str, Any] = {
            "task_id": publication.task_id,
            "retry": True,
            "retry_policy": _publish_retry_policy(timeout),
            "timeout": timeout,
            "confirm_timeout": timeout,
        }
        if publication.queue is not None:
            options["queue"] = publication.queue
        if publication.priority is not None:
            options["priority"] = publication.priority
        if publication.eta is not None:
            options["eta"] = publication.eta
        # A step with a timeout (R-STO-03): Celery's soft and hard time limits.
        if publication.soft_time_limit is not None:
            options["soft_time_limit"] = publication.soft_time_limit
        if publication.time_limit is not None:
            options["time_limit"] = publication.time_limit
        started = time.monotonic()
        if started < self._paused_until and not broker_pause_ignored():
            raise BrokerPaused(
                f"not sent: a publication failed less than {timeout:g}s ago "
                "(GENEVA_PUBLISH_TIMEOUT)"
            )
        try:
            self.celery_app.send_task(
                publication.task_name,
                args=[_jsonable_id(publication.step_execution_id)],
                **options,
            )
        except Exception:
            self._paused_until = time.monotonic() + timeout
            raise
        finally:
            elapsed = time.monotonic() - started
            if elapsed > timeout:
                logger.warning(
                    "publishing %s took %.1fs, longer than GENEVA_PUBLISH_TIMEOUT "
                    "(%.1fs): give the Celery app the broker timeouts of "
                    "flask_geneva.celery_defaults()",
                    publication.task_id,
                    elapsed,
                    timeout,
                )


class BrokerPaused(Exception):
    """A publication not tried because the previous one failed moments ago."""


def _publish_retry_policy(timeout_seconds: float) -> dict[str, float]:
    """Celery's ``retry_policy`` for one publication: one quick reconnect and retry."""
    return {
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": min(0.2, timeout_seconds / 10),
        "interval_max": min(0.2, timeout_seconds / 10),
    }


class _EagerQueue(threading.local):
    def __init__(self) -> None:
        self.queue: list[tuple[Any, Publication]] = []
        self.draining = False


_eager = _EagerQueue()


def run_eager_queue() -> int:
    """Run tasks published under Celery eager mode, iteratively (R-TH-21).

    Only with ``GENEVA_ALLOW_EAGER = True``: eager publications are queued (per
    thread) instead of running inside the commit that sent them, and run here one
    after the other, including those they publish in turn; a nested call while
    draining returns at once (no recursion). flask_geneva calls it after its own
    commits (workflow creation, executor runs, flow control); call it yourself after
    committing a transaction you own.

    Returns:
        The number of tasks run.
    """
    if _eager.draining:
        return 0
    _eager.draining = True
    ran = 0
    try:
        while _eager.queue:
            celery_app, publication = _eager.queue.pop(0)
            celery_app.tasks[publication.task_name].apply(
                args=[_jsonable_id(publication.step_execution_id)],
                task_id=publication.task_id,
            )
            ran += 1
    finally:
        _eager.draining = False
    return ran


def _jsonable_id(value: Any) -> Any:
    return value if isinstance(value, int | str) else str(value)
