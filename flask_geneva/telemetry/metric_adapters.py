"""Ready-made ``GENEVA_METRICS`` hooks for Prometheus and StatsD (R-MET-06, R-OMET-*).

Housekeeping calls ``hook.gauge(name, value, tags)`` with names such as
``geneva_drive.paused`` and ``geneva_drive.paused_ratio`` and tags ``None`` (totals)
or ``{"workflow": <type>}`` (per workflow class), see SPEC §11.3, and the limit
gauges ``geneva_drive.limit_*`` with ``{"limit": <name>}`` (R-LIM-44); every successful
dispatcher or housekeeping run sets ``geneva_drive.dispatcher_last_success`` /
``geneva_drive.housekeeping_last_success`` (Unix seconds, no tags, R-HK-44).
The engine adds counters through ``hook.increment(name, value, tags)`` and
histograms through ``hook.observe(name, value, tags)`` (SPEC §28.2: step
executions, step durations, workflows created and ended, operator actions,
signals delivered), their tags the workflow class and step and a fixed
vocabulary, never an id (R-OMET-04).
Both client libraries are optional: they are imported when an adapter is created, and a
missing one raises ``ImportError`` naming the package to install. The
OpenTelemetry meter is :class:`flask_geneva.telemetry.meters.OpenTelemetryMetrics`.

Usage::

    app.config["GENEVA_METRICS"] = PrometheusMetrics()          # prometheus_client
    app.config["GENEVA_METRICS"] = StatsdMetrics(host="statsd")  # statsd

.. versionchanged:: 0.3
   Moved from ``core/`` into ``telemetry/``; counters and histograms added.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DEFAULT_DURATION_BUCKETS",
    "STATSD_TAG_ORDER",
    "PrometheusMetrics",
    "StatsdMetrics",
    "statsd_name",
]

_INVALID_PROMETHEUS = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_STATSD = re.compile(r"[^a-zA-Z0-9_\-]")

#: Histogram buckets in seconds for step durations: from 10 ms to an hour, since
#: a step may call a slow API or run a long batch (prometheus_client's default
#: stops at 10 s).
DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)


class PrometheusMetrics:
    """A ``GENEVA_METRICS`` hook on ``prometheus_client`` gauges, counters, histograms.

    A name ``geneva_drive.<x>`` becomes the metric ``geneva_drive_<x>``, labelled
    by its tags' keys (sorted): ``workflow`` for the per-class gauges, ``limit``
    for the limit gauges (R-LIM-44), ``workflow``, ``step``, ``outcome``,
    ``transition`` for ``geneva_drive.step_executions`` and so on (SPEC §28.2).
    A gauge without tags (a total) goes to a separate, unlabelled metric
    ``geneva_drive_<x>_all_workflows``, so summing the labelled series never
    counts a workflow twice. Counters are exposed by ``prometheus_client`` with
    the suffix ``_total`` (``geneva_drive_step_executions_total``), histograms as
    ``_bucket``/``_sum``/``_count``. Metrics are created on first use in
    ``registry``. Thread-safe.

    Args:
        registry: The ``prometheus_client`` registry; default its global
            ``REGISTRY``.
        buckets: The histograms' bucket upper bounds, in seconds; default
            :data:`DEFAULT_DURATION_BUCKETS`.

    Raises:
        ImportError: ``prometheus_client`` is not installed.

    .. versionadded:: 0.1
    .. versionchanged:: 0.3
       ``increment`` and ``observe`` (R-OMET-05), the ``buckets`` argument.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        buckets: Sequence[float] = DEFAULT_DURATION_BUCKETS,
    ) -> None:
        try:
            import prometheus_client
        except ImportError as error:
            raise ImportError(
                "PrometheusMetrics needs the prometheus_client package: "
                "pip install prometheus-client"
            ) from error
        self._client = prometheus_client
        self._registry = (
            registry if registry is not None else prometheus_client.REGISTRY
        )
        self._buckets = tuple(buckets)
        self._metrics: dict[tuple[str, str, tuple[str, ...]], Any] = {}
        self._lock = threading.Lock()

    def gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Set the gauge ``name`` to ``value`` for its tags (R-MET-06)."""
        metric = _prometheus_name(name)
        if not tags:
            metric = f"{metric}_all_workflows"
        self._labelled("gauge", metric, name, tags).set(value)

    def increment(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Add ``value`` to the counter ``name`` for its tags (R-OMET-05)."""
        metric = _prometheus_name(name)
        self._labelled("counter", metric, name, tags).inc(value)

    def observe(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Record ``value`` in the histogram ``name`` for its tags (R-OMET-05)."""
        metric = _prometheus_name(name)
        self._labelled("histogram", metric, name, tags).observe(value)

    def _labelled(
        self, kind: str, metric: str, name: str, tags: dict[str, str] | None
    ) -> Any:
        labels = tuple(sorted(tags)) if tags else ()
        key = (kind, metric, labels)
        with self._lock:
            instrument = self._metrics.get(key)
            if instrument is None:
                instrument = self._create(kind, metric, name, labels)
                self._metrics[key] = instrument
        if not labels:
            return instrument
        assert tags is not None  # noqa: S101 - labels imply tags
        return instrument.labels(**{label: str(tags[label]) for label in labels})

    def _create(
        self, kind: str, metric: str, name: str, labels: tuple[str, ...]
    ) -> Any:
        documentation = f"flask_geneva workflow {kind} {name}"
        options: dict[str, Any] = {"labelnames": labels, "registry": self._registry}
        if kind == "gauge":
            return self._client.Gauge(metric, documentation, **options)
        if kind == "counter":
            return self._client.Counter(metric, documentation, **options)
        return self._client.Histogram(
            metric, documentation, buckets=self._buckets, **options
        )


def _prometheus_name(name: str) -> str:
    return _INVALID_PROMETHEUS.sub("_", name)


#: The order in which :class:`StatsdMetrics` appends tag values to a stat's
#: name; tags not listed here follow in the order of their keys.
STATSD_TAG_ORDER: tuple[str, ...] = (
    "workflow",
    "limit",
    "step",
    "action",
    "via",
    "signal",
    "result",
    "state",
    "outcome",
    "transition",
)


def statsd_name(name: str, tags: dict[str, str] | None) -> str:
    """The StatsD stat for ``name`` and ``tags``: the tag values appended (R-OMET-06).

    Plain StatsD has no tags, so each value is appended as a dotted segment in
    :data:`STATSD_TAG_ORDER` (then any other key, in key order); characters other
    than letters, digits, ``_`` and ``-`` become ``_``. E.g.
    ``geneva_drive.step_executions.SignupWorkflow.send.success.complete``.

    Args:
        name: The metric's name.
        tags: Its tags, or None.

    Returns:
        The stat's name.
    """
    if not tags:
        return name
    keys = [key for key in STATSD_TAG_ORDER if key in tags]
    keys += sorted(key for key in tags if key not in STATSD_TAG_ORDER)
    values = (_INVALID_STATSD.sub("_", str(tags[key])) for key in keys)
    return ".".join((name, *values))


class StatsdMetrics:
    """A ``GENEVA_METRICS`` hook that sends StatsD gauges, counters and timers.

    Plain StatsD has no tags, so the tag values are appended to the name
    (:func:`statsd_name`): ``geneva_drive.paused`` (total),
    ``geneva_drive.paused.SignupWorkflow``,
    ``geneva_drive.limit_waiting.partner-api`` (R-LIM-44),
    ``geneva_drive.step_executions.SignupWorkflow.send.success.complete``.
    Counters are sent with ``incr``; histograms in seconds (names ending in
    ``_seconds``) with ``timing`` in milliseconds, StatsD's unit for timers,
    the suffix becoming ``_ms`` (``geneva_drive.step_duration_ms.SignupWorkflow.send``).

    Args:
        client: An object with ``gauge(stat, value)`` (e.g. ``statsd.StatsClient``)
            and, for counters and timers, ``incr(stat, count)`` and
            ``timing(stat, ms)``; default a new ``statsd.StatsClient(host, port,
            prefix=prefix)``.
        host: StatsD host, when ``client`` is None.
        port: StatsD UDP port, when ``client`` is None.
        prefix: Prefix for every stat, when ``client`` is None.

    Raises:
        ImportError: ``client`` is None and the ``statsd`` package is missing.

    .. versionadded:: 0.1
    .. versionchanged:: 0.3
       ``increment`` and ``observe`` (R-OMET-06).
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
        """Send the gauge, its tag values appended to the name (R-MET-06)."""
        self.client.gauge(statsd_name(name, tags), value)

    def increment(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Send ``incr`` of ``value``, the tag values appended (R-OMET-06)."""
        count = int(value) if float(value).is_integer() else value
        self.client.incr(statsd_name(name, tags), count)

    def observe(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Send a timer in milliseconds for a ``*_seconds`` name (R-OMET-06).

        Other histograms are sent as ``timing`` of the value unchanged.
        """
        if name.endswith("_seconds"):
            name = name.removesuffix("_seconds") + "_ms"
            value = value * 1000.0
        self.client.timing(statsd_name(name, tags), value)
