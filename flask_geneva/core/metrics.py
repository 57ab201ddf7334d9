"""Ready-made ``GENEVA_METRICS`` hooks for Prometheus and StatsD (R-MET-06).

Housekeeping calls ``hook.gauge(name, value, tags)`` with names such as
``geneva_drive.paused`` and ``geneva_drive.paused_ratio`` and tags ``None`` (totals)
or ``{"workflow": <type>}`` (per workflow class), see SPEC §11.3, and the limit
gauges ``geneva_drive.limit_*`` with ``{"limit": <name>}`` (R-LIM-44); every successful
dispatcher or housekeeping run sets ``geneva_drive.dispatcher_last_success`` /
``geneva_drive.housekeeping_last_success`` (Unix seconds, no tags, R-HK-44).
Both client libraries are optional: they are imported when an adapter is created, and a
missing one raises ``ImportError`` naming the package to install.

Usage::

    app.config["GENEVA_METRICS"] = PrometheusMetrics()          # prometheus_client
    app.config["GENEVA_METRICS"] = StatsdMetrics(host="statsd")  # statsd
"""

from __future__ import annotations

import re
import threading
from typing import Any

__all__ = ["PrometheusMetrics", "StatsdMetrics"]

_INVALID_PROMETHEUS = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_STATSD = re.compile(r"[^a-zA-Z0-9_\-]")


class PrometheusMetrics:
    """A ``GENEVA_METRICS`` hook that sets ``prometheus_client`` gauges.

    A gauge name ``geneva_drive.<x>`` becomes the metric ``geneva_drive_<x>`` with
    the label ``workflow`` (the workflow type), or ``limit`` (the limit name) for
    the limit gauges (R-LIM-44). Totals (no tags) go to a separate, unlabelled
    metric ``geneva_drive_<x>_all_workflows``, so summing the labelled series
    never counts a workflow twice. Metrics are created on first use in
    ``registry``. Thread-safe.

    Args:
        registry: The ``prometheus_client`` registry; default its global
            ``REGISTRY``.

    Raises:
        ImportError: ``prometheus_client`` is not installed.

    .. versionadded:: 0.1
    """

    def __init__(self, registry: Any = None) -> None:
        try:
            import prometheus_client
        except ImportError as error:
            raise ImportError(
                "PrometheusMetrics needs the prometheus_client package: "
                "pip install prometheus-client"
            ) from error
        self._gauge_class = prometheus_client.Gauge
        self._registry = (
            registry if registry is not None else prometheus_client.REGISTRY
        )
        self._gauges: dict[tuple[str, str | None], Any] = {}
        self._lock = threading.Lock()

    def gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Set the gauge ``name`` to ``value`` for its ``workflow`` or ``limit`` tag."""
        metric = _INVALID_PROMETHEUS.sub("_", name)
        label = _label_of(tags)
        if label is None:
            metric = f"{metric}_all_workflows"
        key = (metric, label)
        with self._lock:
            gauge = self._gauges.get(key)
            if gauge is None:
                gauge = self._gauge_class(
                    metric,
                    f"flask_geneva workflow gauge {name}",
                    labelnames=(label,) if label is not None else (),
                    registry=self._registry,
                )
                self._gauges[key] = gauge
        if label is not None:
            assert tags is not None  # noqa: S101 - a label implies tags
            gauge.labels(**{label: str(tags[label])}).set(value)
        else:
            gauge.set(value)


#: The tags the adapters know, in the order they are looked for.
_LABELS = ("workflow", "limit")


def _label_of(tags: dict[str, str] | None) -> str | None:
    """The tag a gauge is labelled by: ``workflow``, ``limit`` or None."""
    for label in _LABELS:
        if tags and label in tags:
            return label
    return None


class StatsdMetrics:
    """A ``GENEVA_METRICS`` hook that sends StatsD gauges.

    Plain StatsD has no tags, so the workflow type (or the limit name of a limit
    gauge, R-LIM-44) is appended to the name: ``geneva_drive.paused`` (total),
    ``geneva_drive.paused.SignupWorkflow`` and
    ``geneva_drive.limit_waiting.partner-api`` (characters other than letters,
    digits, ``_`` and ``-`` become ``_``).

    Args:
        client: An object with ``gauge(stat, value)`` (e.g. ``statsd.StatsClient``);
            default a new ``statsd.StatsClient(host, port, prefix=prefix)``.
        host: StatsD host, when ``client`` is None.
        port: StatsD UDP port, when ``client`` is None.
        prefix: Prefix for every stat, when ``client`` is None.

    Raises:
        ImportError: ``client`` is None and the ``statsd`` package is missing.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        client: Any = None,
        *,
        host: str = "localhost",
        port: int = 8125,
        prefix: str | None = None,
    ) -> None:
        if client is None:
            try:
                import statsd
            except ImportError as error:
                raise ImportError(
                    "StatsdMetrics needs the statsd package (pip install statsd) "
                    "or a client object with gauge(stat, value)"
                ) from error
            client = statsd.StatsClient(host, port, prefix=prefix)
        self.client = client

    def gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Send the gauge, its workflow or limit tag (if any) appended to the name."""
        label = _label_of(tags)
        if label is not None:
            assert tags is not None  # noqa: S101 - a label implies tags
            name = f"{name}.{_INVALID_STATSD.sub('_', str(tags[label]))}"
        self.client.gauge(name, value)
