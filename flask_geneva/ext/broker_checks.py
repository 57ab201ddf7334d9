"""Start-up checks of the Celery broker settings against flask_geneva's (R-DSP-06).

Redis and SQS deliver an unacknowledged message again once the transport's
visibility timeout has passed. A step published with an ETA up to
``GENEVA_MAX_BROKER_DELAY`` ahead sits unacknowledged in a worker that long, so a
broker delay at or above the visibility timeout turns every long wait into
duplicate deliveries and growing worker memory. The spec asks for the delay to
stay well below the timeout; :func:`warn_if_broker_delay_exceeds_visibility`
says so at start-up when both values are known.

.. versionadded:: 0.1
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_geneva.core.tagged_logging import module_logger

__all__ = [
    "broker_visibility_timeout",
    "warn_if_broker_delay_exceeds_visibility",
]

_log = module_logger("flask_geneva")


def broker_visibility_timeout(celery: Any) -> tuple[float, str] | None:
    """Return the visibility timeout of ``celery``'s broker, if it is known.

    Known means the broker's transport has a visibility timeout (Redis, Redis
    Sentinel, SQS with its client installed): the value is
    ``broker_transport_options["visibility_timeout"]`` when set, else the
    transport's own default (one hour for Redis). AMQP brokers have none (their
    ``consumer_timeout`` is a server setting), nor do transports that cannot be
    imported here.

    Args:
        celery: A ``celery.Celery`` application; only its configuration is read,
            no connection is made.

    Returns:
        ``(seconds, where the value comes from)``, or None when unknown.

    .. versionadded:: 0.1
    """
    from kombu.transport import resolve_transport

    conf = celery.conf
    url = conf.broker_url or "amqp://"
    if isinstance(url, list | tuple):
        url = url[0] if url else "amqp://"
    scheme = str(url).split(";", 1)[0].partition("://")[0] or "amqp"
    try:
        transport = resolve_transport(scheme)
    except (ImportError, AttributeError, KeyError, ValueError):
        return None
    default = getattr(getattr(transport, "Channel", None), "visibility_timeout", None)
    if default is None:
        return None
    options = conf.broker_transport_options or {}
    configured = options.get("visibility_timeout")
    if configured is not None:
        try:
            return float(configured), "broker_transport_options['visibility_timeout']"
        except (TypeError, ValueError):
            return None
    return float(default), f"the {scheme} transport's default"


def warn_if_broker_delay_exceeds_visibility(
    celery: Any, max_broker_delay: timedelta
) -> bool:
    """Log a warning if ``max_broker_delay`` is not below the visibility timeout.

    Called by ``init_app`` and ``init_celery`` (R-DSP-06). Nothing is logged
    when the broker has no known visibility timeout
    (:func:`broker_visibility_timeout`).

    Args:
        celery: A ``celery.Celery`` application.
        max_broker_delay: The validated ``GENEVA_MAX_BROKER_DELAY``.

    Returns:
        True if the warning was logged.

    .. versionadded:: 0.1
    """
    known = broker_visibility_timeout(celery)
    if known is None:
        return False
    timeout_seconds, source = known
    delay_seconds = max_broker_delay.total_seconds()
    if delay_seconds < timeout_seconds:
        return False
    _log.warning(
        "GENEVA_MAX_BROKER_DELAY (%g s) is not below the broker's visibility "
        "timeout (%g s, %s): a step published that far ahead is delivered again "
        "before it is due. Keep GENEVA_MAX_BROKER_DELAY well below the visibility "
        "timeout (R-DSP-06)",
        delay_seconds,
        timeout_seconds,
        source,
    )
    return True
