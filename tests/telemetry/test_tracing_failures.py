"""Telemetry never changes a workflow: a broken tracer provider, a stored trace
context that is not one (R-OTEL-03, R-OTEL-21).

The broken parts are added to the process's recording provider
(tests/support/span_recording) and armed only inside a test: a span processor
whose ``on_start`` or ``on_end`` raises (it runs in the caller's thread, so its
error reaches ``start_span()``/``end()``), and an exporter that raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from flask_geneva.core import log_fields
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.support.workflow import execution_history
from tests.support.workflow import workflow_row
from tests.support.workflow import workflows_table
from tests.telemetry.workflows import ThreeInline
from tests.telemetry.workflows import TracedTwoSteps
from tests.telemetry.workflows import WaitsForPayment

_ARMED: set[str] = set()


class _BrokenProcessor(SpanProcessor):
    """Raises in ``on_start`` or ``on_end`` while armed."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if "on_start" in _ARMED:
            raise RuntimeError("span processor on_start is broken")

    def on_end(self, span: Any) -> None:
        if "on_end" in _ARMED:
            raise RuntimeError("span processor on_end is broken")


class _BrokenExporter(SpanExporter):
    """Raises from ``export`` while armed."""

    def export(self, spans: Any) -> Any:
        if "export" in _ARMED:
            raise ConnectionError("collector unreachable")
        return super().export(spans)


@pytest.fixture
def broken(spans: Any) -> Iterator[set[str]]:
    """Arm the broken parts by name: ``on_start``, ``on_end``, ``export``."""
    provider = trace.get_tracer_provider()
    if not getattr(provider, "_broken_parts_added", False):
        provider.add_span_processor(_BrokenProcessor())  # type: ignore[attr-defined]
        provider.add_span_processor(SimpleSpanProcessor(_BrokenExporter()))  # type: ignore[attr-defined]
        provider._broken_parts_added = True  # type: ignore[attr-defined]
    try:
        yield _ARMED
    finally:
        _ARMED.clear()


@pytest.mark.parametrize("part", ["on_start", "on_end", "export"])
def test_a_broken_tracer_provider_changes_nothing(
    user, broken, geneva_jobs, part, caplog
):
    """With a span processor raising in on_start or on_end, or an exporter
    raising, create(), inline steps, an operator action and a signal delivery
    all return normally, the workflows finish, and nothing of a run stays set
    afterwards (no current span, no log fields); the error is logged (R-OTEL-03)."""
    broken.add(part)
    workflow = ThreeInline.create(hero=user)
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert [outcome for _, _, outcome in execution_history(workflow.id)] == [
        "success"
    ] * 3

    waiting = WaitsForPayment.create(hero=user)
    geneva_jobs.drain()
    waiting.pause()
    waiting.resume()
    geneva_jobs.drain()
    waiting.signal("paid", {"amount": 5})
    geneva_jobs.drain()
    assert workflow_row(waiting.id)["state"] == "finished"

    assert not trace.get_current_span().get_span_context().is_valid
    assert log_fields.current_fields() is None
    if part != "export":  # the SDK's SimpleSpanProcessor logs its exporter's errors
        assert any(
            "broken" in record.getMessage() and record.name.startswith("flask_geneva")
            for record in caplog.records
        )


def test_a_stored_trace_context_that_is_not_one_gives_no_link(user, spans):
    """A trace_context written by hand (garbage, an invalid all-zero traceparent,
    upper-case hex) gives the steps' and operator actions' spans no link and no
    error (R-OTEL-21)."""
    for garbage in (
        "garbage",
        "00-00000000000000000000000000000000-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
        " ",
    ):
        spans.clear()
        workflow = TracedTwoSteps.create(hero=user)
        workflow_id = workflow.id
        db.session.commit()  # the writer below is another connection
        table = workflows_table()
        with db.engine.begin() as connection:
            connection.execute(
                sa.update(table)
                .where(table.c.id == workflow_id)
                .values(trace_context=garbage)
            )
        workflow.pause()
        workflow.resume()
        speedrun_workflow(workflow)
        assert workflow_row(workflow.id)["state"] == "finished"
        later = [
            span
            for span in spans.get_finished_spans()
            if not span.name.startswith("geneva.create")
        ]
        assert len(later) == 4, [span.name for span in later]
        assert [span.links for span in later] == [()] * 4, garbage
