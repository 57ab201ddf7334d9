"""The OpenTelemetry SDK's in-memory exporter for the telemetry tests (SPEC §28.1).

OpenTelemetry allows the global tracer provider to be set once per process, so
the first test that asks for ``spans`` sets one for the whole session: an SDK
provider whose tracers start real spans only while a test holds ``spans``.
Between those tests (and in every other test of the same process) they
return the API's invalid span, as a no-op tracer does: nothing is recorded or
stored, and no attempt is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_switch = {"on": False}


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


_exporter = InMemorySpanExporter()


@pytest.fixture(scope="session")
def _tracer_provider() -> TracerProvider:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, _SwitchedProvider):
        provider = _SwitchedProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    return provider


@pytest.fixture
def spans(_tracer_provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """The exporter of this test's finished spans (cleared before and after)."""
    _exporter.clear()
    _switch["on"] = True
    try:
        yield _exporter
    finally:
        _switch["on"] = False
        _exporter.clear()


@pytest.fixture
def test_tracer(spans: InMemorySpanExporter) -> trace.Tracer:
    """A tracer for the test's own spans (a web request's, say)."""
    return trace.get_tracer("tests")
