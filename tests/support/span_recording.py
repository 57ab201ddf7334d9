"""Spans recorded by the OpenTelemetry SDK in tests (SPEC §28.1).

OpenTelemetry allows the global tracer provider to be set once per process, so
:func:`recording_spans` sets one the first time it is used, for the whole
process: an SDK provider whose tracers start real spans only inside
``recording_spans()``. Outside it (in every other test of the same process)
they return the API's invalid span, as a no-op tracer does: nothing is
recorded or stored, and no attempt is counted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_switch = {"on": False}
_exporter = InMemorySpanExporter()


class _SwitchedTracer(trace.Tracer):
    """An SDK tracer that starts spans only while the switch is on."""

    def __init__(self, inner: trace.Tracer) -> None:
        self._inner = inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        if _switch["on"]:
            return self._inner.start_span(*args, **kwargs)
        return trace.INVALID_SPAN

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        if _switch["on"]:
            return self._inner.start_as_current_span(*args, **kwargs)
        return trace.use_span(trace.INVALID_SPAN)


class _SwitchedProvider(TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SwitchedTracer(super().get_tracer(*args, **kwargs))


def _install() -> None:
    if not isinstance(trace.get_tracer_provider(), _SwitchedProvider):
        provider = _SwitchedProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)


@contextlib.contextmanager
def recording_spans() -> Iterator[InMemorySpanExporter]:
    """Record the spans started inside the block; yields the exporter (cleared
    before and after)."""
    _install()
    _exporter.clear()
    _switch["on"] = True
    try:
        yield _exporter
    finally:
        _switch["on"] = False
        _exporter.clear()
