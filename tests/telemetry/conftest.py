"""The OpenTelemetry SDK's in-memory exporter for the telemetry tests (SPEC §28.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.span_recording import recording_spans


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The exporter of this test's finished spans (see tests/support/span_recording)."""
    with recording_spans() as exporter:
        yield exporter


@pytest.fixture
def test_tracer(spans: InMemorySpanExporter) -> trace.Tracer:
    """A tracer for the test's own spans (a web request's, say)."""
    return trace.get_tracer("tests")
