"""Sending one metric through the ``GENEVA_METRICS`` hook, safely (R-MET-06, R-OMET-02).

The hook is the user's object: ``gauge(name, value, tags)`` always, and, when it
has them, ``increment(name, value, tags)`` (counters) and ``observe(name, value,
tags)`` (histograms). :class:`~flask_geneva.core.config.GenevaConfig` finds the
optional methods once (``metrics_methods``), so a hook written with ``gauge``
only is never asked for a counter. Every call here logs and swallows what the
hook raises: a metric never changes a workflow's state or breaks the caller.
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import module_logger

__all__ = ["counts", "send_count", "send_gauge", "send_observation"]

_log = module_logger("flask_geneva")


def counts(config: GenevaConfig) -> bool:
    """True if the hook takes counters (it has ``increment``, R-OMET-02)."""
    return config.metrics is not None and "increment" in config.metrics_methods


def send_gauge(hook: Any, name: str, value: float, tags: dict[str, str] | None) -> None:
    """Call ``hook.gauge(name, value, tags)``; log and swallow an error (R-MET-06).

    Args:
        hook: The ``GENEVA_METRICS`` object (not None).
        name: The gauge's name, e.g. ``geneva_drive.paused``.
        value: Its value.
        tags: None for a total, else the bounded tags (R-OMET-04).
    """
    try:
        hook.gauge(name, value, tags)
    except Exception as error:  # noqa: BLE001 - R-MET-06: a metrics hook never breaks us
        _log.warning("metrics hook raised %r for gauge %s; ignored", error, name)


def send_count(
    config: GenevaConfig, name: str, tags: dict[str, str], value: float = 1
) -> None:
    """Add ``value`` to counter ``name`` when the hook counts (R-OMET-02).

    Args:
        config: The settings in force (``GENEVA_METRICS``).
        name: The counter's name, e.g. ``geneva_drive.step_executions``.
        tags: The bounded tags (R-OMET-04).
        value: How much to add (positive).
    """
    _send_if_taken(config, "increment", "counter", name, value, tags)


def send_observation(
    config: GenevaConfig, name: str, value: float, tags: dict[str, str]
) -> None:
    """Record ``value`` in histogram ``name`` when the hook observes (R-OMET-02).

    Args:
        config: The settings in force (``GENEVA_METRICS``).
        name: The histogram's name, e.g. ``geneva_drive.step_duration_seconds``.
        value: The observation, in the unit its name says.
        tags: The bounded tags (R-OMET-04).
    """
    _send_if_taken(config, "observe", "histogram", name, value, tags)


def _send_if_taken(
    config: GenevaConfig,
    method: str,
    kind: str,
    name: str,
    value: float,
    tags: dict[str, str],
) -> None:
    """Call the hook's optional ``method`` if it has it; log and swallow an error."""
    hook = config.metrics
    if hook is None or method not in config.metrics_methods:
        return
    try:
        getattr(hook, method)(name, value, tags)
    except Exception as error:  # noqa: BLE001 - R-MET-06: a metrics hook never breaks us
        _log.warning("metrics hook raised %r for %s %s; ignored", error, kind, name)
