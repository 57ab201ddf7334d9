"""Start-up checks of the Celery broker settings (R-DSP-06, R-PRI-04).

Redis and SQS deliver an unacknowledged message again once the transport's
visibility timeout has passed. A step published with an ETA up to
``GENEVA_MAX_BROKER_DELAY`` ahead sits unacknowledged in a worker that long, so a
broker delay at or above the visibility timeout turns every long wait into
duplicate deliveries and growing worker memory. The spec asks for the delay to
stay well below the timeout; :func:`warn_if_broker_delay_exceeds_visibility`
says so at start-up when both values are known.

flask_geneva runs higher priorities first (R-PRI-02); the Redis transport runs
lower numbers sooner. :func:`warn_if_redis_priorities_unmapped` says so at
start-up when priorities would reach a Redis broker unmapped (R-PRI-04).

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from flask_geneva.core.tagged_logging import module_logger

__all__ = [
    "REDIS_SCHEMES",
    "broker_scheme",
    "broker_visibility_timeout",
    "classes_declaring_priority",
    "first_names",
    "warn_if_broker_delay_exceeds_visibility",
    "warn_if_redis_priorities_unmapped",
]

#: Broker URL schemes of kombu's Redis transports, which run a lower priority
#: number sooner (R-PRI-04).
REDIS_SCHEMES = frozenset({"redis", "rediss", "sentinel"})

_log = module_logger("flask_geneva")


def broker_scheme(celery: Any) -> str:
    """The scheme of ``celery``'s (first) broker URL, lower case; ``amqp`` if unset.

    Args:
        celery: A ``celery.Celery`` application; only its configuration is read.
    """
    url = celery.conf.broker_url or "amqp://"
    if isinstance(url, list | tuple):
        url = url[0] if url else "amqp://"
    return (str(url).split(";", 1)[0].partition("://")[0] or "amqp").lower()


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
    scheme = broker_scheme(celery)
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


def classes_declaring_priority(workflow_classes: Iterable[type[Any]]) -> list[str]:
    """The names of the workflow classes that declare a priority (R-PRI-04).

    A class declares one through its ``priority`` attribute or
    ``default_job_options`` (inherited ones included), or a step's ``priority=``
    or ``job_options``; an instance's ``create(priority=...)`` cannot be known
    before it runs.

    Args:
        workflow_classes: Workflow classes (``geneva.workflow_classes.values()``).

    Returns:
        Their ``__geneva_type__`` names, sorted.
    """
    names = set()
    for cls in workflow_classes:
        definitions = getattr(cls, "__geneva_definitions__", None)
        if definitions is None:
            continue
        levels = [definitions.default_job_options]
        levels += [step.job_options for step in definitions.steps.registered]
        if any(level.get("priority") is not None for level in levels):
            names.add(str(getattr(cls, "__geneva_type__", cls.__name__)))
    return sorted(names)


def warn_if_redis_priorities_unmapped(
    celery: Any,
    priority_mapper: Callable[[int], int] | None,
    workflow_classes: Iterable[type[Any]],
) -> bool:
    """Warn when priorities reach a Redis broker unmapped (R-PRI-04).

    flask_geneva orders priorities higher first (R-PRI-02), while the Redis
    transport runs a lower number sooner; unmapped, the broker would run the
    least urgent steps first. Called by ``init_app``: one WARNING when the
    broker URL is ``redis://`` (or ``rediss://``, ``sentinel://``), some class
    declares a priority (:func:`classes_declaring_priority`) and
    ``GENEVA_PRIORITY_MAPPER`` is None. It names
    ``GENEVA_PRIORITY_MAPPER = "redis"``.

    Args:
        celery: A ``celery.Celery`` application; only its configuration is read.
        priority_mapper: The validated ``GENEVA_PRIORITY_MAPPER``.
        workflow_classes: The registered workflow classes.

    Returns:
        True if the warning was logged.
    """
    if priority_mapper is not None or broker_scheme(celery) not in REDIS_SCHEMES:
        return False
    names = classes_declaring_priority(workflow_classes)
    if not names:
        return False
    shown = first_names(names)
    _log.warning(
        "Workflow classes declare a priority (%s) and the Celery broker is Redis, "
        "whose transport runs lower numbers sooner, while flask_geneva runs higher "
        'priorities first (R-PRI-02); set GENEVA_PRIORITY_MAPPER = "redis" to '
        "publish 9 - clamp(priority, 0, 9), or a callable of your own (R-PRI-04)",
        shown,
    )
    return True


def first_names(names: list[str], limit: int = 5) -> str:
    """``"A, B, C, D, E and 3 more"``: the first ``limit`` names of a startup
    warning, and how many are left out."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
