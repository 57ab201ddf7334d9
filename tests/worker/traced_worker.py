"""The workflow and the worker-side tracer of tests/worker/test_tracing_worker.py.

The worker imports this module (``--include``) with ``GENEVA_TEST_SPAN_FILE``
set: it then sets the worker process's tracer provider, whose spans are written
as JSON lines to that file as each one ends. The test process imports it too,
for the class, without the variable: no provider is set there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from flask_geneva import step
from tests.apps import basic


class TracedOnWorker(basic.geneva.Workflow):
    """Two steps that do nothing."""

    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


def _set_up_tracing(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    class JsonLines(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with open(path, "a", encoding="utf-8") as out:
                for span in spans:
                    record: dict[str, Any] = {
                        "name": span.name,
                        "trace_id": f"{span.context.trace_id:032x}",
                        "parent": None
                        if span.parent is None
                        else f"{span.parent.span_id:016x}",
                        "links": [
                            [
                                f"{link.context.trace_id:032x}",
                                f"{link.context.span_id:016x}",
                            ]
                            for link in span.links
                        ],
                        "attributes": dict(span.attributes or {}),
                    }
                    out.write(json.dumps(record) + "\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
    trace.set_tracer_provider(provider)


if os.environ.get("GENEVA_TEST_SPAN_FILE"):
    _set_up_tracing(os.environ["GENEVA_TEST_SPAN_FILE"])
