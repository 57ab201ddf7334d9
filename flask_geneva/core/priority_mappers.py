"""The named values of ``GENEVA_PRIORITY_MAPPER`` (R-JOB-08, R-PRI-03).

Inside flask_geneva a priority is an int and a higher one runs first (R-PRI-02).
Brokers read the number Celery sends differently: RabbitMQ runs a higher
priority sooner (within the queue's ``x-max-priority``, 0..9 in Celery's usual
setup), Redis's transport a lower one. ``GENEVA_PRIORITY_MAPPER`` turns the
geneva priority into the broker's; besides a callable it takes the names
``"rabbitmq"`` and ``"redis"``, resolved here. Pure code: no Flask, no database.

.. versionadded:: 0.1
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from flask_geneva.core.setting_values import callable_or_none
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "BROKER_PRIORITY_MAX",
    "PRIORITY_MAPPERS",
    "priority_mapper_value",
    "rabbitmq_priority",
    "redis_priority",
]

#: The highest broker priority of the named mappers: Celery's usual RabbitMQ
#: ``x-max-priority`` and the Redis transport's 0..9 steps.
BROKER_PRIORITY_MAX = 9


def rabbitmq_priority(priority: int) -> int:
    """RabbitMQ's priority of a geneva priority: clamped to 0..9 (R-PRI-03).

    RabbitMQ delivers a higher priority sooner, as geneva orders them.

    Args:
        priority: The merged ``priority`` job option.

    Returns:
        ``min(max(priority, 0), 9)``.
    """
    return min(max(priority, 0), BROKER_PRIORITY_MAX)


def redis_priority(priority: int) -> int:
    """The Redis transport's priority of a geneva priority (R-PRI-03).

    The Redis transport delivers a lower number sooner, so the scale is turned
    over: ``9 - clamp(priority, 0, 9)``; geneva's 9 (most urgent) becomes 0.

    Args:
        priority: The merged ``priority`` job option.

    Returns:
        ``9 - min(max(priority, 0), 9)``.
    """
    return BROKER_PRIORITY_MAX - rabbitmq_priority(priority)


#: The names ``GENEVA_PRIORITY_MAPPER`` accepts instead of a callable (R-PRI-03).
PRIORITY_MAPPERS: Mapping[str, Callable[[int], int]] = {
    "rabbitmq": rabbitmq_priority,
    "redis": redis_priority,
}

_NAMES = ", ".join(repr(name) for name in PRIORITY_MAPPERS)


def priority_mapper_value(
    mapping: Mapping[str, Any], key: str
) -> Callable[[int], int] | None:
    """Read ``GENEVA_PRIORITY_MAPPER``: a name, a callable, an import path or None.

    Args:
        mapping: The merged settings.
        key: The setting's key (``"GENEVA_PRIORITY_MAPPER"``).

    Returns:
        The mapper to apply to a merged priority before publication, or None
        to pass priorities unchanged (R-JOB-08).

    Raises:
        GenevaConfigurationError: A str that is neither one of the names
            ``"rabbitmq"``/``"redis"`` nor an importable ``"package.module:name"``
            path, or a value that is not callable; the message names the value
            and the allowed ones (R-PRI-03).
    """
    value = mapping[key]
    if isinstance(value, str):
        named = PRIORITY_MAPPERS.get(value)
        if named is not None:
            return named
        if not any(separator in value for separator in ".:"):
            raise GenevaConfigurationError(
                f"{key} must be one of {_NAMES}, a callable int -> int, an import "
                f"path such as 'package.module:name', or None; got {value!r}"
            )
    try:
        mapper: Callable[[int], int] | None = callable_or_none(mapping, key)
    except GenevaConfigurationError as exc:
        raise GenevaConfigurationError(f"{exc} (or one of the names {_NAMES})") from exc
    return mapper
