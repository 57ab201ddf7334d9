"""OpenTelemetry spans of creation, steps, operator actions and signals (SPEC §28.1).

The spans are recorded by the SDK's in-memory exporter (``spans``, see
conftest.py); rows are read back through a separate connection.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace import StatusCode

from flask_geneva.core import clock
from flask_geneva.engine.schedules import pause_schedule
from flask_geneva.engine.schedules import resume_schedule
from flask_geneva.ext.app_state import current_context
from flask_geneva.ext.tasks import perform_step_execution
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.deadlines.workflows import dispatch
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row
from tests.telemetry import workflows
from tests.telemetry.workflows import T0
from tests.telemetry.workflows import Boom
from tests.telemetry.workflows import FailsOnce
from tests.telemetry.workflows import HeroLess
from tests.telemetry.workflows import Parent
from tests.telemetry.workflows import Pausing
from tests.telemetry.workflows import SkipsThenCancels
from tests.telemetry.workflows import ThreeInline
from tests.telemetry.workflows import TracedTwoSteps
from tests.telemetry.workflows import WaitsForPayment
from tests.telemetry.workflows import Watched


@pytest.fixture(autouse=True)
def _forget_seen() -> None:
    workflows.SEEN.clear()
    FailsOnce.calls.clear()


def named(spans: Any, prefix: str) -> list[Any]:
    """The finished spans whose name starts with ``prefix``, in end order."""
    return [span for span in spans.get_finished_spans() if span.name.startswith(prefix)]


def traceparent(span: Any) -> str:
    context = span.context
    flags = int(context.trace_flags)
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"


def linked_to(span: Any) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def ids(span: Any) -> tuple[int, int]:
    return (span.context.trace_id, span.context.span_id)


def test_create_is_a_producer_span_in_the_callers_trace(user, spans, test_tracer):
    """geneva.create <type> is a PRODUCER span, child of the caller's current span,
    with the workflow's type, id and hero; its traceparent is stored on the row
    (R-OTEL-10, R-OTEL-20)."""
    with test_tracer.start_as_current_span("POST /orders") as request:
        workflow = TracedTwoSteps.create(hero=user)
    workflow_id = workflow.id
    [create] = named(spans, "geneva.create")
    assert create.name == f"geneva.create {TracedTwoSteps.__geneva_type__}"
    assert create.kind is SpanKind.PRODUCER
    assert create.parent.span_id == request.get_span_context().span_id
    assert create.context.trace_id == request.get_span_context().trace_id
    attributes = create.attributes
    assert attributes["geneva.workflow.type"] == TracedTwoSteps.__geneva_type__
    assert attributes["geneva.workflow.id"] == str(workflow_id)
    assert attributes["geneva.hero.type"] == "User"
    assert attributes["geneva.hero.id"] == str(user.id)
    assert attributes["messaging.system"] == "flask_geneva"
    assert attributes["messaging.operation.type"] == "create"
    assert create.status.status_code is StatusCode.UNSET
    assert workflow_row(workflow_id)["trace_context"] == traceparent(create)


def test_each_step_is_a_consumer_span_linked_to_the_create_span(user, spans):
    """One geneva.step <type>.<step> CONSUMER span per execution, a root of its own
    trace (no current span) linked to the create span, with every attribute
    (R-OTEL-11, R-OTEL-21, R-OTEL-22)."""
    workflow = TracedTwoSteps.create(hero=user)
    [create] = named(spans, "geneva.create")
    with clock.frozen(T0) as frozen:
        speedrun_workflow(workflow)
        del frozen
    assert workflow.state == "finished"
    steps = named(spans, "geneva.step")
    kind = TracedTwoSteps.__geneva_type__
    assert [span.name for span in steps] == [
        f"geneva.step {kind}.first",
        f"geneva.step {kind}.second",
    ]
    rows = {row[0]: row for row in execution_history(workflow.id)}
    assert set(rows) == {"first", "second"}
    for span in steps:
        assert span.kind is SpanKind.CONSUMER
        assert span.parent is None
        assert span.context.trace_id != create.context.trace_id
        assert linked_to(span) == [ids(create)]
        attributes = span.attributes
        assert attributes["geneva.workflow.id"] == str(workflow.id)
        assert attributes["geneva.workflow.type"] == kind
        assert attributes["geneva.step.attempt"] == 1
        assert attributes["geneva.step.outcome"] == "success"
        assert attributes["geneva.hero.type"] == "User"
        assert attributes["geneva.hero.id"] == str(user.id)
        assert attributes["messaging.operation.type"] == "process"
        assert (
            attributes["messaging.message.id"] == attributes["geneva.step_execution.id"]
        )
    executions = [e.id for e in workflow.execution_history]
    assert [span.attributes["geneva.step_execution.id"] for span in steps] == [
        str(execution_id) for execution_id in executions
    ]
    assert [span.attributes["geneva.step.name"] for span in steps] == [
        "first",
        "second",
    ]


def test_the_step_span_is_current_in_conditions_body_and_hooks(user, spans):
    """The step's span is the current span while its skip_if, its body and its
    after hook run (R-OTEL-12)."""
    speedrun_workflow(Watched.create(hero=user))
    [span] = named(spans, "geneva.step")
    assert [where for where, _, _ in workflows.SEEN] == ["skip_if", "body", "after"]
    assert {(s, t) for _, s, t in workflows.SEEN} == {
        (span.context.span_id, span.context.trace_id)
    }
    # Nothing stays current after the run.
    assert not trace.get_current_span().get_span_context().is_valid


def test_an_exception_is_recorded_and_the_attempt_counted(user, spans, geneva_jobs):
    """A body that raises: its span records the exception with status ERROR and
    outcome reattempted; the reattempt's span has attempt 2 and outcome success
    (R-OTEL-11, R-OTEL-13)."""
    workflow = FailsOnce.create(hero=user)
    geneva_jobs.drain()
    assert [o for _, _, o in execution_history(workflow.id)] == [
        "reattempted",
        "success",
    ]
    failed, passed = named(spans, "geneva.step")
    assert failed.status.status_code is StatusCode.ERROR
    assert "Boom" in failed.status.description
    [event] = [e for e in failed.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("Boom")
    assert event.attributes["exception.message"] == "first attempt fails"
    assert failed.attributes["error.type"] == f"{Boom.__module__}.Boom"
    assert failed.attributes["geneva.step.outcome"] == "reattempted"
    assert failed.attributes["geneva.step.attempt"] == 1
    assert passed.status.status_code is StatusCode.UNSET
    assert passed.attributes["geneva.step.outcome"] == "success"
    assert passed.attributes["geneva.step.attempt"] == 2


def test_flow_control_outcomes_are_the_stored_outcomes(user, spans):
    """skip(), cancel() and pause() give the outcomes the executions store
    (R-OTEL-11, R-SE-10)."""
    speedrun_workflow(SkipsThenCancels.create(hero=user))
    other = make_user("pausing@example.com")
    paused = Pausing.create(hero=other)
    speedrun_workflow(paused)
    outcomes = [
        s.attributes["geneva.step.outcome"] for s in named(spans, "geneva.step")
    ]
    stored = [o for _, _, o in execution_history(paused.id)]
    assert outcomes == ["skipped", "canceled", *stored]
    assert stored == ["canceled"]  # a pause() ends its execution canceled


def test_children_are_created_in_the_steps_trace(user, spans, geneva_jobs):
    """start_children() inside a step: one geneva.create span per child, child of
    the step's span; each child's step links to its own create span (R-OTEL-10,
    R-OTEL-21)."""
    for email in workflows.HEROES:
        make_user(email)
    parent = Parent.create(hero=user)
    geneva_jobs.drain()
    [fan_out] = named(spans, f"geneva.step {Parent.__geneva_type__}")
    creates = named(spans, f"geneva.create {workflows.Child.__geneva_type__}")
    assert len(creates) == 2
    for create in creates:
        assert create.parent.span_id == fan_out.context.span_id
        assert create.context.trace_id == fan_out.context.trace_id
    children = named(spans, f"geneva.step {workflows.Child.__geneva_type__}")
    assert sorted(linked_to(span)[0] for span in children) == sorted(
        ids(create) for create in creates
    )
    stored = {
        workflow_row(int(c.attributes["geneva.workflow.id"]))["trace_context"]
        for c in creates
    }
    assert stored == {traceparent(create) for create in creates}
    assert parent.id is not None


def test_inline_continuation_keeps_the_links(user, spans, geneva_jobs):
    """Steps continued inline in one delivery each get their own span, not nested
    in the one before, each linked to the create span (R-OTEL-12, R-OTEL-23)."""
    workflow_id, first_id = start_without_jobs(ThreeInline, user, geneva_jobs)
    [create] = named(spans, "geneva.create")
    perform_step_execution(first_id)
    assert [o for _, _, o in execution_history(workflow_id)] == ["success"] * 3
    steps = named(spans, "geneva.step")
    assert [s.attributes["geneva.step.name"] for s in steps] == ["one", "two", "three"]
    assert {s.parent for s in steps} == {None}
    assert len({s.context.trace_id for s in steps}) == 3
    for span in steps:
        assert linked_to(span) == [ids(create)]
        assert span.attributes["geneva.step.attempt"] == 1
    assert [span_id for _, span_id, _ in workflows.SEEN] == [
        s.context.span_id for s in steps
    ]


def test_a_wait_of_days_and_the_dispatchers_publication_keep_the_link(
    user, spans, geneva_jobs
):
    """A step due three days later, published by the dispatcher under a frozen
    clock, links to the create span read from the row (R-OTEL-21, R-OTEL-23)."""
    with clock.frozen(T0) as frozen:
        workflow = TracedTwoSteps.create(hero=user)
        workflow_id = workflow.id
        geneva_jobs.drain(respect_eta=True)
        geneva_jobs.clear()  # the second step's message is lost: only the row holds it
        db.session.remove()
        frozen.advance(timedelta(days=3, minutes=1))
        assert dispatch().published >= 1
        assert geneva_jobs.drain(respect_eta=True) == 1
    [create] = named(spans, "geneva.create")
    _first, second = named(spans, "geneva.step")
    assert second.attributes["geneva.step.name"] == "second"
    assert linked_to(second) == [ids(create)]
    rows = execution_rows(workflow_id)
    assert rows[1]["scheduled_for"] - rows[0]["completed_at"] >= timedelta(days=3)
    assert workflow_row(workflow_id)["state"] == "finished"


def test_operator_actions_are_spans_linked_to_the_create_span(user, spans, test_tracer):
    """pause, resume and cancel are geneva.operator <action> spans in the caller's
    trace, linked to the create span; a refused action records its error
    (R-OTEL-30)."""
    workflow = TracedTwoSteps.create(hero=user)
    [create] = named(spans, "geneva.create")
    with test_tracer.start_as_current_span("admin request") as request:
        workflow.pause()
        workflow.resume()
        workflow.cancel()
        with pytest.raises(Exception, match=r"(?i)cannot"):
            workflow.pause()
    actions = named(spans, "geneva.operator")
    assert [s.name for s in actions] == [
        "geneva.operator pause",
        "geneva.operator resume",
        "geneva.operator cancel",
        "geneva.operator pause",
    ]
    for span in actions:
        assert span.parent.span_id == request.get_span_context().span_id
        assert linked_to(span) == [ids(create)]
        assert span.attributes["geneva.workflow.id"] == str(workflow.id)
        assert span.attributes["geneva.operator.via"] == "api"
    assert [s.status.status_code for s in actions] == [StatusCode.UNSET] * 3 + [
        StatusCode.ERROR
    ]
    assert actions[0].attributes["geneva.operator.action"] == "pause"


def test_deadline_enforcement_is_an_operator_span(user, spans, geneva_jobs):
    """The dispatcher's deadline cancel goes through the operator action: a
    geneva.operator cancel span with via deadline (R-OTEL-30, R-DL-21)."""
    with clock.frozen(T0) as frozen:
        TracedTwoSteps.create(hero=user, deadline=timedelta(hours=1))
        geneva_jobs.drain(respect_eta=True)
        db.session.remove()
        frozen.advance(timedelta(hours=2))
        assert dispatch().deadlines == 1
    [span] = named(spans, "geneva.operator")
    assert span.name == "geneva.operator cancel"
    assert span.attributes["geneva.operator.via"] == "deadline"


def test_a_signal_delivery_is_a_producer_span(user, spans, geneva_jobs):
    """workflow.signal(name) is a geneva.signal <name> PRODUCER span linked to the
    create span; the woken step's span links to the create span too (R-OTEL-31)."""
    workflow = WaitsForPayment.create(hero=user)
    geneva_jobs.drain()
    [create] = named(spans, "geneva.create")
    workflow.signal("paid", {"amount": 5})
    geneva_jobs.drain()
    [signal] = named(spans, "geneva.signal")
    assert signal.name == "geneva.signal paid"
    assert signal.kind is SpanKind.PRODUCER
    assert signal.attributes["geneva.signal.name"] == "paid"
    assert linked_to(signal) == [ids(create)]
    parked, ran = named(spans, "geneva.step")
    assert parked.attributes["geneva.step.outcome"] == "waiting"
    assert ran.attributes["geneva.step.outcome"] == "success"
    assert linked_to(ran) == [ids(create)]


def test_schedule_actions_are_operator_spans(app, spans):
    """Pausing and resuming a schedule are geneva.operator schedule.<action> spans
    naming the schedule (R-OTEL-30)."""
    name = "traced-digest"
    geneva.schedule(name, HeroLess, cron="0 9 * * *")
    try:
        context = current_context()
        pause_schedule(context, context.session, name)
        resume_schedule(context, context.session, name)
    finally:
        geneva.remove_schedule(name)
    actions = named(spans, "geneva.operator")
    assert [s.name for s in actions] == [
        "geneva.operator schedule.pause",
        "geneva.operator schedule.resume",
    ]
    assert {s.attributes["geneva.schedule.name"] for s in actions} == {name}
    assert {s.attributes["geneva.operator.via"] for s in actions} == {"api"}


def test_without_the_unit_nothing_is_stored_and_nothing_fails(
    user, spans, without_unit
):
    """Without add_trace_context the spans are emitted, nothing is stored and the
    steps' spans have no link (R-OTEL-50)."""
    without_unit("add_trace_context")
    workflow = TracedTwoSteps.create(hero=user)
    speedrun_workflow(workflow)
    assert workflow.state == "finished"
    db.session.remove()
    with db.engine.connect() as connection:
        columns = sa.inspect(connection).get_columns("geneva_drive_workflows")
    assert "trace_context" not in {column["name"] for column in columns}
    assert len(named(spans, "geneva.create")) == 1
    steps = named(spans, "geneva.step")
    assert len(steps) == 2
    assert [s.links for s in steps] == [(), ()]


def test_tracestate_is_stored_after_the_traceparent(user, spans):
    """A caller's tracestate is stored after the traceparent and a space, and
    comes back in the link (R-OTEL-20)."""
    from opentelemetry.trace import NonRecordingSpan
    from opentelemetry.trace import SpanContext
    from opentelemetry.trace import TraceFlags
    from opentelemetry.trace import TraceState

    remote = SpanContext(
        trace_id=0x1234,
        span_id=0x5678,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "abc")]),
    )
    with trace.use_span(NonRecordingSpan(remote)):
        workflow = TracedTwoSteps.create(hero=user)
    [create] = named(spans, "geneva.create")
    stored = workflow_row(workflow.id)["trace_context"]
    assert stored == f"{traceparent(create)} vendor=abc"
    speedrun_workflow(workflow)
    first = named(spans, "geneva.step")[0]
    [link] = first.links
    assert link.context.trace_state.get("vendor") == "abc"
    assert link.context.span_id == create.context.span_id
