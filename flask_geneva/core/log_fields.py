"""Structured log fields: which workflow a record is about, and its trace (R-OLOG).

Every record the package logs about a workflow carries, as attributes a JSON
formatter writes out (they are passed as ``extra``), ``workflow_id``,
``workflow_type``, ``execution_id``, ``step``, ``hero_type`` and ``hero_id``
(R-OLOG-01), and every record logged while a valid OpenTelemetry span is current
carries ``trace_id`` and ``span_id`` (R-OLOG-03). The text prefixes of R-LOG-01..03
stay as they are.

Where the workflow fields come from (R-OLOG-02): a tagged adapter built for a
workflow (``workflow.logger``, the executor's logger) carries its own; any other
adapter of the package (:func:`~flask_geneva.core.tagged_logging.module_logger`)
reads the fields of the workflow being acted on from a context variable, which
the executor sets for the duration of a step's run and operator actions,
recovery, deadline enforcement and the dispatcher's passes set per workflow
(:func:`logging_about`). A key the caller passed in ``extra`` is never
overridden.

The trace ids are read from ``opentelemetry.trace`` only when that module is
already imported: the package never imports OpenTelemetry for its logs, and an
application without it pays one dictionary lookup per emitted record.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

__all__ = [
    "TRACE_FIELD_NAMES",
    "WORKFLOW_FIELD_NAMES",
    "WorkflowFieldsFilter",
    "current_fields",
    "id_fields",
    "logging_about",
    "record_extra",
    "reset_fields",
    "set_fields",
    "trace_ids",
    "workflow_fields",
]

#: The workflow fields of a record about a workflow, all present (R-OLOG-01).
WORKFLOW_FIELD_NAMES = (
    "workflow_id",
    "workflow_type",
    "execution_id",
    "step",
    "hero_type",
    "hero_id",
)
#: The trace fields of a record logged in a valid current span (R-OLOG-03).
TRACE_FIELD_NAMES = ("trace_id", "span_id")

Fields = Mapping[str, Any]

_current: contextvars.ContextVar[Fields | None] = contextvars.ContextVar(
    "geneva_log_fields", default=None
)


def _plain(value: Any) -> Any:
    # Ids that are neither int nor str (a UUID key) become strings, so that any
    # JSON formatter writes them (R-OLOG-01).
    kind = type(value)
    return value if kind is int or kind is str or value is None else str(value)


def id_fields(
    workflow_id: Any,
    *,
    workflow_type: str | None = None,
    execution_id: Any = None,
    step: str | None = None,
    hero_type: str | None = None,
    hero_id: Any = None,
) -> Fields:
    """The workflow fields of a record about ``workflow_id`` (R-OLOG-01).

    For a caller that has the ids but not the rows (a loop over ids); the
    values not given are None.

    Args:
        workflow_id: The workflow's id.
        workflow_type: Its stored type (class name), if known.
        execution_id: The step execution the record is about, if one.
        step: That execution's step name.
        hero_type: The hero's stored type.
        hero_id: The hero's id; an empty string counts as no hero.

    Returns:
        A new mapping with every key of :data:`WORKFLOW_FIELD_NAMES`; it is
        shared (set as the current fields, kept by an adapter), never changed.
    """
    if hero_id is None or hero_id == "":
        hero_type = hero_id = None
    return {
        "workflow_id": _plain(workflow_id),
        "workflow_type": workflow_type,
        "execution_id": _plain(execution_id),
        "step": step,
        "hero_type": hero_type,
        "hero_id": _plain(hero_id),
    }


def workflow_fields(
    values: tuple[Any, ...], execution: tuple[Any, Any] | None
) -> Fields:
    """The workflow fields for a workflow's (and an execution's) column values.

    Args:
        values: ``(type, id, hero_type, hero_id)`` of the workflow, as
            :func:`~flask_geneva.core.tagged_logging.column_values` reads them.
        execution: ``(id, step_name)`` of the execution, or None.

    Returns:
        A mapping with every key of :data:`WORKFLOW_FIELD_NAMES` (see
        :func:`id_fields`).
    """
    type_name, workflow_id, hero_type, hero_id = values
    execution_id, step = execution if execution is not None else (None, None)
    return id_fields(
        workflow_id,
        workflow_type=type_name,
        execution_id=execution_id,
        step=step,
        hero_type=hero_type,
        hero_id=hero_id,
    )


def current_fields() -> Fields | None:
    """The fields of the workflow acted on in this context, or None (R-OLOG-02)."""
    return _current.get()


def set_fields(fields: Fields | None) -> contextvars.Token[Fields | None]:
    """Make ``fields`` the current workflow fields; undo with :func:`reset_fields`."""
    return _current.set(fields)


def reset_fields(token: contextvars.Token[Fields | None]) -> None:
    """Restore the fields that were current before :func:`set_fields`."""
    _current.reset(token)


@contextlib.contextmanager
def logging_about(fields: Fields | None) -> Iterator[None]:
    """Log the block's records of the package about ``fields``' workflow (R-OLOG-02).

    Args:
        fields: From :func:`id_fields` or :func:`workflow_fields`; None clears
            them for the block.
    """
    token = _current.set(fields)
    try:
        yield
    finally:
        _current.reset(token)


def trace_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` of the current valid span, else None (R-OLOG-03).

    Lower-case hex, 32 and 16 characters, as OpenTelemetry writes them. Read
    only when ``opentelemetry.trace`` is already imported; a span can only be
    current after that, so nothing is missed and nothing is imported.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def record_extra(own: Fields | None, given: Mapping[str, Any] | None) -> Any:
    """The ``extra`` of a record: workflow and trace fields under the caller's.

    Args:
        own: The adapter's own workflow fields, or None to use the current
            ones (:func:`current_fields`).
        given: The ``extra`` the caller passed, or None; its keys win.

    Returns:
        A new dict, or ``given`` itself when there is nothing to add.
    """
    fields = own if own is not None else _current.get()
    ids = trace_ids() if "opentelemetry.trace" in sys.modules else None
    if fields is None and ids is None:
        return given
    extra = dict(fields) if fields is not None else {}
    if ids is not None:
        extra["trace_id"], extra["span_id"] = ids
    if given:
        extra.update(given)
    return extra


class WorkflowFieldsFilter(logging.Filter):
    """A handler filter giving every record the current fields (R-OLOG-06).

    The package's own records have them already; with this filter on a
    handler, the records of other loggers logged during a step's run or an
    operator action (the application's module loggers in a step body, the
    database driver's) get the current workflow and trace fields too, unless
    they have the attribute already. Records about no workflow outside a span
    pass unchanged. Never drops a record.

    .. versionadded:: 0.1
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the missing fields on ``record``; return True."""
        extra = record_extra(None, None)
        if extra:
            attributes = record.__dict__
            for key, value in extra.items():
                attributes.setdefault(key, value)
        return True
