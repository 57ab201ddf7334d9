"""A step's span on a real worker links to the web request that created the
workflow (SPEC §28.1, R-OTEL-10, R-OTEL-20..22).

The test process's Flask app handles a request (the test client) inside a SERVER
span and creates the workflow there; a real ``celery worker``, whose tracer
provider writes its spans to a file, runs both steps. Each step's span links to
the create span stored on the row, in the request's trace.
"""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tests.apps import basic
from tests.support.span_recording import recording_spans
from tests.support.worker_harness import dispose
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app
from tests.worker.traced_worker import TracedOnWorker

pytestmark = pytest.mark.worker

INCLUDE = ("--include", "tests.worker.traced_worker")


def test_the_workers_step_spans_link_to_the_requests_trace(
    broker_url, worker_database_url, start_worker, tmp_path
):
    """Created in a request's server span, run by a real worker: both step spans
    are CONSUMER spans in traces of their own that link to the create span, a
    child of the request's span in the request's trace (R-OTEL-10, R-OTEL-21,
    R-OTEL-22)."""
    app = worker_test_app(broker_url, worker_database_url)
    tracer = trace.get_tracer("tests.web")
    created: dict[str, int] = {}

    @app.post("/orders")
    def start_order():
        with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER):
            hero = basic.User(email="traced@example.com")
            basic.db.session.add(hero)
            basic.db.session.commit()
            created["id"] = TracedOnWorker.create(hero=hero).id
        return {"id": created["id"]}

    span_file = tmp_path / "worker-spans.jsonl"
    try:
        with recording_spans() as spans:
            response = app.test_client().post("/orders")
            assert response.status_code == 200
            [request] = [
                s for s in spans.get_finished_spans() if s.name == "POST /orders"
            ]
            [create] = [
                s
                for s in spans.get_finished_spans()
                if s.name.startswith("geneva.create")
            ]
        assert create.parent.span_id == request.context.span_id
        start_worker(*INCLUDE, env={"GENEVA_TEST_SPAN_FILE": str(span_file)})
        wait_for_state(app, created["id"], "finished", timeout=60)

        def step_spans():
            if not span_file.exists():
                return None
            lines = span_file.read_text(encoding="utf-8").splitlines()
            found = [json.loads(line) for line in lines]
            steps = [s for s in found if s["name"].startswith("geneva.step")]
            return steps if len(steps) == 2 else None

        steps = wait_for(step_spans, timeout=30)
    finally:
        dispose(app)
    request_trace = f"{request.context.trace_id:032x}"
    create_link = [request_trace, f"{create.context.span_id:016x}"]
    assert [s["attributes"]["geneva.step.name"] for s in steps] == ["first", "second"]
    for span in steps:
        assert span["links"] == [create_link]
        assert span["trace_id"] != request_trace
        assert span["attributes"]["geneva.workflow.id"] == str(created["id"])
        assert span["attributes"]["geneva.step.outcome"] == "success"
