"""OpenTelemetry spans of workflows, steps, operator actions and signals (SPEC §28.1).

Everything goes through ``opentelemetry-api`` (the optional extra ``otel``):

- without it installed, the import below fails once, :data:`AVAILABLE` is
  False, and every function here returns at its first line: no span, no
  stored context, nothing of ``opentelemetry`` imported (R-OTEL-01);
- with it installed but no tracer provider set (the API's proxy provider),
  :func:`tracer` returns None on each call and the same holds (R-OTEL-02);
- with a provider set (the application's SDK), the spans of R-OTEL-10..40
  are started on the tracer ``flask_geneva``.

The engine calls in with plain values (names, ids, the stored context), never
ORM rows. A workflow's creating span is stored on its row as its W3C
``traceparent`` (and ``tracestate``), see :func:`stored_context`; every later
span of that workflow links to it (R-OTEL-20).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any
from typing import TypeVar

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.core.version import installed_version

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )
except ImportError:  # the optional extra `otel` is not installed (R-OTEL-01)
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from opentelemetry.trace import Tracer

__all__ = [
    "ATTRIBUTES",
    "AVAILABLE",
    "MESSAGING_SYSTEM",
    "TRACE_CONTEXT_LENGTH",
    "CreateTrace",
    "StepTrace",
    "ending",
    "start_create",
    "start_step",
    "stored_context",
    "traced_action",
    "tracer",
]

#: The instrumentation scope's name: the tracer every span here is started on.
TRACER_NAME = "flask_geneva"
#: ``messaging.system`` of the producer and consumer spans (R-OTEL-11): not one
#: of the semantic conventions' well-known values, so our own name.
MESSAGING_SYSTEM = "flask_geneva"
#: The width of the workflows' ``trace_context`` column (R-OTEL-20).
TRACE_CONTEXT_LENGTH = 255

#: The span attributes of SPEC §28.1, by meaning (R-OTEL-11).
ATTRIBUTES = types.MappingProxyType(
    {
        "workflow_id": "geneva.workflow.id",
        "workflow_type": "geneva.workflow.type",
        "execution_id": "geneva.step_execution.id",
        "step_name": "geneva.step.name",
        "attempt": "geneva.step.attempt",
        "outcome": "geneva.step.outcome",
        "hero_type": "geneva.hero.type",
        "hero_id": "geneva.hero.id",
        "action": "geneva.operator.action",
        "via": "geneva.operator.via",
        "signal_name": "geneva.signal.name",
        "schedule_name": "geneva.schedule.name",
        "refused": "geneva.operator.refused",
    }
)

_tracer_for: tuple[Any, Any] = (None, None)

_log = module_logger("flask_geneva")


def _failed(what: str, error: Exception) -> None:
    """Log what the tracer provider raised; the caller goes on without (R-OTEL-03)."""
    _log.warning(
        "OpenTelemetry raised %r while %s; ignored (R-OTEL-03)",
        error,
        what,
        exc_info=error,
    )


def tracer() -> Tracer | None:
    """The ``flask_geneva`` tracer of the global tracer provider, or None.

    None when ``opentelemetry-api`` is not installed or no provider is set
    (the API's proxy provider: every span would be a no-op, so none is
    started, R-OTEL-02). Read on each call, so a provider set after
    ``flask_geneva`` was imported (a worker's ``worker_process_init``) is
    used from then on; the tracer is kept per provider.
    """
    global _tracer_for
    if not AVAILABLE:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    cached_provider, cached = _tracer_for
    if cached_provider is provider:
        return cached  # type: ignore[no-any-return]  # kept for this provider
    try:
        found = provider.get_tracer(TRACER_NAME, installed_version())
    except Exception as error:  # noqa: BLE001 - R-OTEL-03: tracing never breaks us
        _failed("getting the flask_geneva tracer", error)
        return None
    _tracer_for = (provider, found)
    return found


def stored_context(span: Span) -> str | None:
    """The W3C trace context of ``span`` as stored on a workflow row (R-OTEL-20).

    ``traceparent``, then a space and the ``tracestate`` when there is one and
    both fit :data:`TRACE_CONTEXT_LENGTH` (a longer ``tracestate`` is dropped:
    a link needs only the ``traceparent``). Always the W3C format, whatever
    propagators the application configured, so that the stored value means
    the same to every process. None for an invalid span context (a no-op
    tracer).
    """
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(
        carrier, context=trace.set_span_in_context(span)
    )
    parent = carrier.get("traceparent")
    if parent is None:
        return None
    state = carrier.get("tracestate")
    if state and len(parent) + 1 + len(state) <= TRACE_CONTEXT_LENGTH:
        return f"{parent} {state}"
    return parent


def _links(stored: str | None) -> list[Any]:
    """The link to the creating span stored as ``stored``, or none (R-OTEL-21)."""
    if not stored:
        return []
    parent, _, state = stored.partition(" ")
    carrier = {"traceparent": parent}
    if state:
        carrier["tracestate"] = state
    extracted = TraceContextTextMapPropagator().extract(carrier)
    span_context = trace.get_current_span(extracted).get_span_context()
    if not span_context.is_valid:
        return []  # not a traceparent (written by hand?): no link, no error
    return [trace.Link(span_context, {"geneva.link": "workflow.create"})]


def _start(started: Tracer, name: str, **options: Any) -> Span | None:
    """``started.start_span(name, **options)``, or None when it raises (R-OTEL-03).

    The SDK runs the sampler and every span processor's ``on_start`` in the
    caller's thread: what they raise is logged, and the operation runs as
    with tracing off.
    """
    try:
        return started.start_span(name, **options)
    except Exception as error:  # noqa: BLE001 - R-OTEL-03: tracing never breaks us
        _failed(f"starting the span {name!r}", error)
        return None


def _workflow_attributes(
    workflow_type: str, workflow_id: Any, hero_type: Any, hero_id: Any
) -> dict[str, Any]:
    attributes: dict[str, Any] = {ATTRIBUTES["workflow_type"]: workflow_type}
    if workflow_id is not None:
        attributes[ATTRIBUTES["workflow_id"]] = str(workflow_id)
    if hero_type is not None:
        attributes[ATTRIBUTES["hero_type"]] = str(hero_type)
    if hero_id is not None:
        attributes[ATTRIBUTES["hero_id"]] = str(hero_id)
    return attributes


class _CurrentSpan:
    """A started span made the current one until :meth:`end` (R-OTEL-12)."""

    __slots__ = ("_current", "_recorded", "_token", "span")

    def __init__(self, span: Span, *, current: bool = True) -> None:
        self.span = span
        self._current = current
        self._recorded: BaseException | None = None
        self._token: Any = (
            otel_context.attach(trace.set_span_in_context(span)) if current else True
        )

    def record_error(self, error: BaseException) -> None:
        """Record ``error`` on the span and set its status to ERROR (R-OTEL-13).

        The same exception passed again (re-raised after its policy) is
        recorded once.
        """
        if error is self._recorded:
            return
        self._recorded = error
        try:
            self.span.record_exception(error)
            self.span.set_status(
                trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
            )
            self.span.set_attribute("error.type", _qualified_name(type(error)))
        except Exception as failure:  # noqa: BLE001 - R-OTEL-03
            _failed("recording an exception on a span", failure)

    def end(self) -> None:
        """Stop being current and end the span; a second call does nothing."""
        token, self._token = self._token, None
        if token is None:
            return
        if self._current:
            otel_context.detach(token)
        try:
            self.span.end()
        except Exception as error:  # noqa: BLE001 - R-OTEL-03: a span processor's on_end
            _failed("ending a span", error)


_SpanT = TypeVar("_SpanT", bound=_CurrentSpan)


@contextlib.contextmanager
def ending(span: _SpanT | None) -> Iterator[_SpanT | None]:
    """Run a block in ``span``: an exception leaving it is recorded on the span
    (R-OTEL-13), and the span ends when the block does, whatever happened.

    Args:
        span: A started span (:class:`CreateTrace`, an action's span), or None
            when tracing is off (the block runs with nothing around it).

    Yields:
        ``span``.
    """
    if span is None:
        yield None
        return
    try:
        yield span
    except BaseException as error:
        span.record_error(error)
        raise
    finally:
        span.end()


def _qualified_name(cls: type[BaseException]) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class CreateTrace(_CurrentSpan):
    """The ``geneva.create <type>`` span of one workflow's creation (R-OTEL-10).

    Attributes:
        span: The producer span, current until :meth:`end`.
        trace_context: Its context as stored on the row
            (:func:`stored_context`), or None.
    """

    __slots__ = ("trace_context",)

    def __init__(self, span: Span, *, current: bool = True) -> None:
        super().__init__(span, current=current)
        self.trace_context = stored_context(span)

    def created(self, workflow_id: Any, hero_type: Any, hero_id: Any) -> None:
        """Name the inserted workflow and its hero on the span."""
        if workflow_id is not None:
            self.span.set_attribute(ATTRIBUTES["workflow_id"], str(workflow_id))
            self.span.set_attribute("messaging.message.id", str(workflow_id))
        if hero_type is not None:
            self.span.set_attribute(ATTRIBUTES["hero_type"], str(hero_type))
        if hero_id is not None:
            self.span.set_attribute(ATTRIBUTES["hero_id"], str(hero_id))


def start_create(workflow_type: str, *, current: bool = True) -> CreateTrace | None:
    """Start ``geneva.create <workflow_type>`` in the caller's context (R-OTEL-10).

    A PRODUCER span, child of the current span (a web request's, a step's for
    a child workflow, none for a schedule's fire), made current until
    :meth:`CreateTrace.end` unless ``current`` is False (the sibling spans of
    children created together).

    Args:
        workflow_type: The workflow's stored type (its class identity).
        current: Make the span the current one until it ends.

    Returns:
        The started span, or None when tracing is off (R-OTEL-01/02).
    """
    started = tracer()
    if started is None:
        return None
    span = _start(
        started,
        f"geneva.create {workflow_type}",
        kind=trace.SpanKind.PRODUCER,
        attributes={
            ATTRIBUTES["workflow_type"]: workflow_type,
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "create",
            "messaging.operation.name": "create",
            "messaging.destination.name": workflow_type,
        },
    )
    return None if span is None else CreateTrace(span, current=current)


class StepTrace(_CurrentSpan):
    """The ``geneva.step <type>.<step>`` span of one step execution (R-OTEL-11).

    Current while the step's conditions, body and finalize run (R-OTEL-12).
    """

    __slots__ = ("noted",)

    def __init__(self, span: Span) -> None:
        super().__init__(span)
        self.noted: str | None = None

    def note_outcome(self, outcome: str | None) -> None:
        """Remember the outcome the run wrote (the last one written wins)."""
        if outcome is not None:
            self.noted = outcome

    def end(self) -> None:
        """Set ``geneva.step.outcome`` and end the span (R-OTEL-11)."""
        if self.noted is not None and self._token is not None:
            try:
                self.span.set_attribute(ATTRIBUTES["outcome"], self.noted)
            except Exception as error:  # noqa: BLE001 - R-OTEL-03
                _failed("setting a span's outcome", error)
        super().end()


def start_step(
    *,
    workflow_type: str,
    step_name: str,
    workflow_id: Any,
    execution_id: Any,
    hero_type: Any,
    hero_id: Any,
    trace_context: str | None,
    attempt: Callable[[], int | None],
) -> StepTrace | None:
    """Start ``geneva.step <workflow_type>.<step_name>`` and make it current.

    A CONSUMER span (R-OTEL-11) whose parent is the current context (the
    Celery task's span when the message carried one, else none: a root,
    R-OTEL-22) and which links to the workflow's creating span stored as
    ``trace_context`` (R-OTEL-21).

    Args:
        workflow_type: The workflow's stored type.
        step_name: The step's name.
        workflow_id: The workflow's id.
        execution_id: The step execution's id (also ``messaging.message.id``).
        hero_type: The hero's stored type, or None.
        hero_id: The hero's id, or None.
        trace_context: The workflow row's stored creating context, or None.
        attempt: Returns ``geneva.step.attempt``; called only for a recording
            span (it may read the database).

    Returns:
        The started span, or None when tracing is off (R-OTEL-01/02).
    """
    started = tracer()
    if started is None:
        return None
    attributes = _workflow_attributes(workflow_type, workflow_id, hero_type, hero_id)
    attributes[ATTRIBUTES["step_name"]] = step_name
    attributes[ATTRIBUTES["execution_id"]] = str(execution_id)
    attributes["messaging.system"] = MESSAGING_SYSTEM
    attributes["messaging.operation.type"] = "process"
    attributes["messaging.operation.name"] = "perform_step"
    attributes["messaging.destination.name"] = workflow_type
    attributes["messaging.message.id"] = str(execution_id)
    span = _start(
        started,
        f"geneva.step {workflow_type}.{step_name}",
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=_links(trace_context),
    )
    if span is None:
        return None
    if span.is_recording():
        count = attempt()
        if count is not None:
            span.set_attribute(ATTRIBUTES["attempt"], count)
    return StepTrace(span)


def traced_action(
    name: str,
    *,
    kind: str,
    workflow_type: str | None = None,
    workflow_id: Any = None,
    trace_context: str | None = None,
    attributes: dict[str, Any] | None = None,
) -> _CurrentSpan | None:
    """Start the span of an operator action or a signal delivery (R-OTEL-30/31).

    Args:
        name: The span's name (``geneva.operator pause``, ``geneva.signal
            paid``).
        kind: ``"internal"`` (an operator action) or ``"producer"`` (a signal
            sent to a workflow).
        workflow_type: The workflow's stored type, or None (a schedule).
        workflow_id: The workflow's id, or None.
        trace_context: The workflow's stored creating context: linked.
        attributes: More attributes.

    Returns:
        The started span, current until its ``end()``, or None when tracing is
        off.
    """
    started = tracer()
    if started is None:
        return None
    all_attributes: dict[str, Any] = {}
    if workflow_type is not None:
        all_attributes = _workflow_attributes(workflow_type, workflow_id, None, None)
    if attributes:
        all_attributes.update(attributes)
    span = _start(
        started,
        name,
        kind=trace.SpanKind.PRODUCER if kind == "producer" else trace.SpanKind.INTERNAL,
        attributes=all_attributes,
        links=_links(trace_context),
    )
    return None if span is None else _CurrentSpan(span)
