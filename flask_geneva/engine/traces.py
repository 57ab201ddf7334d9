"""The engine's side of the OpenTelemetry spans (SPEC §28.1, R-OTEL-*).

:mod:`flask_geneva.telemetry.tracing` starts the spans from plain values; this
module reads those values off the rows: the workflow's type, ids and hero, and
its stored creating context (``trace_context``, the ``add_trace_context``
unit, R-OTEL-20). It never loads a column: a value not loaded with the row
(the column is missing, or the copy was read without it) is taken as absent.

Every function returns at once, with None, when tracing is off (R-OTEL-01/02).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.telemetry import tracing
from flask_geneva.telemetry.tracing import CreateTrace
from flask_geneva.telemetry.tracing import StepTrace

__all__ = [
    "action_span",
    "created",
    "end_creates",
    "start_child_creates",
    "start_create",
    "start_step",
    "stored_context_of",
    "trace_context_to_store",
    "traced_action",
]


def start_create(workflow_cls: Any, *, current: bool = True) -> CreateTrace | None:
    """Start the ``geneva.create`` span of a new ``workflow_cls`` (R-OTEL-10).

    Args:
        workflow_cls: The new workflow's class.
        current: Make the span current until its ``end()`` (False: the
            sibling spans of children inserted together).

    Returns:
        The span; None when tracing is off.
    """
    if not tracing.AVAILABLE:
        return None
    return tracing.start_create(workflow_cls.__geneva_type__, current=current)


def start_child_creates(session: orm.Session, children: list[Any]) -> list[Any]:
    """Start one ``geneva.create`` span per new child, in the step's trace.

    (R-OTEL-10.) Each child's ``trace_context`` is set from its span (when
    the unit is installed); the caller inserts them, then calls
    :func:`end_creates`.

    Returns:
        The spans, as many as ``children``; empty when tracing is off.
    """
    if not tracing.AVAILABLE or not children:
        return []
    spans: list[Any] = []
    for child in children:
        traced = tracing.start_create(child.__geneva_type__, current=False)
        if traced is None:  # tracing off, or the provider raised (R-OTEL-03)
            for started in spans:
                started.end()
            return []
        value = trace_context_to_store(session, traced)
        if value is not None:
            child.trace_context = value
        spans.append(traced)
    return spans


def end_creates(
    spans: list[Any], children: list[Any], error: BaseException | None
) -> None:
    """Name the inserted children on their spans (or record ``error``); end them.

    ``spans`` is empty when tracing is off.
    """
    if not spans:
        return
    for traced, child in zip(spans, children, strict=True):
        if error is None:
            created(traced, child)
        else:
            traced.record_error(error)
        traced.end()


def trace_context_to_store(session: orm.Session, traced: CreateTrace | None) -> Any:
    """The value of a new workflow's ``trace_context``, or None to leave it unset.

    None when tracing is off or the ``add_trace_context`` unit is not
    installed (R-OTEL-50: nothing is stored, nothing fails).
    """
    if traced is None or traced.trace_context is None:
        return None
    if not column_detection.optional_columns(session).trace_context:
        return None
    return traced.trace_context


def created(traced: CreateTrace | None, workflow: Any) -> None:
    """Name the inserted ``workflow`` and its hero on its create span."""
    if traced is not None:
        traced.created(workflow.id, workflow.hero_type, workflow.hero_id)


def stored_context_of(workflow: Any) -> str | None:
    """The workflow's stored creating context as loaded, without loading it."""
    value = sa.inspect(workflow).dict.get("trace_context")
    return value if isinstance(value, str) else None


def start_step(
    session: orm.Session,
    workflow: Any,
    execution: Any,
    step_name: str,
    *,
    attempt: int | None = None,
) -> StepTrace | None:
    """Start the ``geneva.step`` span of ``execution`` and make it current.

    (R-OTEL-11, R-OTEL-12.) Called with the rows locked and read in the
    claim's transaction: ``geneva.step.attempt`` is counted in it when the span
    records and ``attempt`` is None.

    Args:
        session: The executor's session, in the claim's transaction.
        workflow: The locked workflow.
        execution: The locked execution.
        step_name: The step's name.
        attempt: The attempt when the caller knows it (an inline claim).

    Returns:
        The span, current until its ``end()``; None when tracing is off.
    """
    if not tracing.AVAILABLE:
        return None

    def count() -> int:
        if attempt is not None:
            return attempt
        execution_cls = type(workflow).__geneva__.StepExecution
        return engine_queries.step_attempt(session, execution_cls, execution)

    return tracing.start_step(
        workflow_type=workflow.type,
        step_name=step_name,
        workflow_id=workflow.id,
        execution_id=execution.id,
        hero_type=workflow.hero_type,
        hero_id=workflow.hero_id,
        trace_context=stored_context_of(workflow),
        attempt=count,
    )


def action_span(
    name: str,
    *,
    kind: str = "internal",
    workflow: Any = None,
    attributes: dict[str, Any] | None = None,
) -> Any:
    """Start an operator action's or a signal delivery's span (R-OTEL-30/31).

    Args:
        name: The span's name.
        kind: ``"internal"`` or ``"producer"``.
        workflow: The workflow acted on (its stored context is linked), or
            None (a schedule).
        attributes: More attributes.

    Returns:
        The span, current until its ``end()``; None when tracing is off.
    """
    if not tracing.AVAILABLE:
        return None
    if workflow is None:
        return tracing.traced_action(name, kind=kind, attributes=attributes)
    return tracing.traced_action(
        name,
        kind=kind,
        workflow_type=workflow.type,
        workflow_id=workflow.id,
        trace_context=stored_context_of(workflow),
        attributes=attributes,
    )


@contextlib.contextmanager
def traced_action(
    name: str,
    *,
    kind: str = "internal",
    workflow: Any = None,
    attributes: dict[str, Any] | None = None,
) -> Iterator[None]:
    """Run the block inside :func:`action_span`'s span (R-OTEL-30/31).

    An exception leaving the block is recorded on the span (status ERROR)
    and propagates; the span ends with the block.
    """
    span = action_span(name, kind=kind, workflow=workflow, attributes=attributes)
    if span is None:
        yield
        return
    try:
        yield
    except BaseException as error:
        span.record_error(error)
        raise
    finally:
        span.end()
