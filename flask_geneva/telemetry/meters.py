"""A ``GENEVA_METRICS`` hook on an OpenTelemetry meter (R-OMET-07).

:class:`OpenTelemetryMetrics` sends geneva's gauges, counters and histograms
through ``opentelemetry-api`` (the optional extra ``otel``): synchronous gauges
(``Meter.create_gauge``, API 1.27 and later), counters and histograms, their
tags as attributes. The application brings the SDK: a ``MeterProvider`` with a
reader (``PeriodicExportingMetricReader`` with an OTLP exporter, or the
Prometheus reader), set globally or passed here.

Usage::

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter,
    )

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(metric_readers=[reader])
    app.config["GENEVA_METRICS"] = OpenTelemetryMetrics(provider)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from flask_geneva.core.version import installed_version
from flask_geneva.telemetry.metric_adapters import DEFAULT_DURATION_BUCKETS

__all__ = ["METER_NAME", "OpenTelemetryMetrics"]

#: The instrumentation scope's name of geneva's meter.
METER_NAME = "flask_geneva"


class OpenTelemetryMetrics:
    """A ``GENEVA_METRICS`` hook that records on an OpenTelemetry meter (R-OMET-07).

    Each metric name is an instrument of the meter ``flask_geneva``, created on
    first use: ``gauge`` a synchronous gauge, ``increment`` a counter (unit
    ``"1"``), ``observe`` a histogram (unit ``"s"`` for a name ending in
    ``_seconds``, with ``DEFAULT_DURATION_BUCKETS`` of
    :mod:`~flask_geneva.telemetry.metric_adapters` as its advised buckets). The
    tags are the attributes. A gauge without tags
    (a total) goes to the instrument ``<name>_all_workflows``, as
    :class:`~flask_geneva.telemetry.metric_adapters.PrometheusMetrics` names
    it, so adding up the per-class points never counts a workflow twice.
    Thread-safe.

    Args:
        meter_provider: The SDK's ``MeterProvider``; default the global one
            (``opentelemetry.metrics.set_meter_provider``), which is a no-op
            until the application sets one.
        buckets: Advised bucket bounds, in seconds, of the ``_seconds``
            histograms.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (the message names
            the extra ``flask-geneva[otel]``).

    .. versionadded:: 0.3
    """

    def __init__(
        self,
        meter_provider: Any = None,
        *,
        buckets: Sequence[float] = DEFAULT_DURATION_BUCKETS,
    ) -> None:
        try:
            from opentelemetry import metrics
        except ImportError as error:
            raise ImportError(
                "OpenTelemetryMetrics needs opentelemetry-api: "
                "pip install 'flask-geneva[otel]'"
            ) from error
        self._meter = metrics.get_meter(
            METER_NAME, installed_version(), meter_provider=meter_provider
        )
        self._buckets = list(buckets)
        self._instruments: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def gauge(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Set the gauge ``name`` to ``value`` for its tags (R-MET-06)."""
        if not tags:
            name = f"{name}_all_workflows"
        self._instrument("gauge", name).set(value, attributes=tags or None)

    def increment(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Add ``value`` to the counter ``name`` for its tags (R-OMET-07)."""
        self._instrument("counter", name).add(value, attributes=tags or None)

    def observe(self, name: str, value: float, tags: dict[str, str] | None) -> None:
        """Record ``value`` in the histogram ``name`` for its tags (R-OMET-07)."""
        self._instrument("histogram", name).record(value, attributes=tags or None)

    def _instrument(self, kind: str, name: str) -> Any:
        key = (kind, name)
        with self._lock:
            instrument = self._instruments.get(key)
            if instrument is None:
                instrument = self._create(kind, name)
                self._instruments[key] = instrument
        return instrument

    def _create(self, kind: str, name: str) -> Any:
        description = f"flask_geneva workflow {kind} {name}"
        meter = self._meter
        if kind == "gauge":
            return meter.create_gauge(name, description=description)
        if kind == "counter":
            return meter.create_counter(name, unit="1", description=description)
        if name.endswith("_seconds"):
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=self._buckets,
            )
        return meter.create_histogram(name, description=description)
