"""Step executions in the admin: list filters and the detail page (R-ADM-13, R-ADM-14).

The overview (R-ADM-10) counts stuck and overdue executions with the same
criteria the list filters by (:func:`flag_criteria`), so every number links to a
list that shows exactly the rows counted.

Everything here only reads (R-ADM-32): plain selects, no row locks. Stored values
of any shape come back as plain strings with a marker instead of raising
(R-ADM-31); the templates escape them (R-ADM-06).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.admin.filters import ERROR_CLASS_CAVEAT
from flask_geneva.admin.filters import error_class_matches
from flask_geneva.admin.presenters import CURSOR_PREVIEW_BYTES
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.admin.presenters import format_duration
from flask_geneva.admin.presenters import pretty_json
from flask_geneva.admin.presenters import recorded_exception
from flask_geneva.admin.presenters import recovery_sentence
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import workers as worker_rows
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.engine.operators import stuck_recovery
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.models import InvalidJSON
from flask_geneva.models import StepExecutionState

__all__ = [
    "FAILED_COUNT_CAP",
    "LIST_FLAGS",
    "ColumnValue",
    "ExecutionLink",
    "cursor_display",
    "execution_detail",
    "filter_executions",
    "flag_criteria",
    "load_execution",
    "recorded_backtrace",
    "recorded_error_message",
    "truncate_utf8",
]

#: The ``only=`` flags of the executions list, with their labels (R-ADM-13, R-ADM-10).
LIST_FLAGS: dict[str, str] = {
    "overdue": "overdue (scheduled, scheduled_for has passed)",
    "stuck_scheduled": "overdue beyond the housekeeping threshold",
    "stuck": "stuck in progress (beyond the housekeeping threshold)",
    "has_cursor": "has a cursor",
}

#: The overview counts failed executions up to this many, then shows "N+" (R-ADM-30).
FAILED_COUNT_CAP = 10_000


def truncate_utf8(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes without splitting a character.

    Returns:
        ``(text, truncated)``: the (possibly shortened) text and whether it was cut.
    """
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= limit:
        return text, False
    return encoded[:limit].decode("utf-8", errors="ignore"), True


# -- list filters (R-ADM-13, R-ADM-10) -------------------------------------------


def flag_criteria(
    flag: str, execution_cls: Any, config: Any, now: datetime
) -> list[Any]:
    """The WHERE criteria of an ``only=`` flag of the executions list.

    ``overdue``: scheduled and ``scheduled_for`` before now (R-ADM-13).
    ``stuck_scheduled``: scheduled and ``scheduled_for`` before now minus
    ``GENEVA_STUCK_SCHEDULED_THRESHOLD`` (R-HK-20; the overview's overdue count).
    ``stuck``: in progress and ``started_at`` before now minus
    ``GENEVA_STUCK_IN_PROGRESS_THRESHOLD`` (R-HK-20, R-ADM-13).
    ``has_cursor``: a stored cursor (needs the ``cursor`` column).

    Args:
        flag: One of :data:`LIST_FLAGS`.
        execution_cls: The ``StepExecution`` model.
        config: The validated ``GenevaConfig`` (thresholds).
        now: The reference time (aware UTC).

    Returns:
        The criteria, to pass to ``Select.where(*criteria)``.

    Raises:
        ValueError: ``flag`` is not one of :data:`LIST_FLAGS`; the message lists them.
    """
    scheduled = StepExecutionState.SCHEDULED.value
    if flag == "overdue":
        return [execution_cls.state == scheduled, execution_cls.scheduled_for < now]
    if flag == "stuck_scheduled":
        return stuck_recovery.stuck_scheduled_criteria(execution_cls, config, now)
    if flag == "stuck":
        workers = worker_registry.registry_table(execution_cls.__geneva__.session)
        return stuck_recovery.stuck_in_progress_criteria(
            execution_cls, config, now, workers
        )
    if flag == "has_cursor":
        return [execution_cls.cursor.is_not(None)]
    raise ValueError(
        f"unknown executions list flag {flag!r}; allowed: {', '.join(LIST_FLAGS)}"
    )


#: Longest text filter value: the filtered columns are VARCHAR(255).
_MAX_TEXT = 255


def filter_executions(
    args: Mapping[str, str],
    *,
    execution_cls: Any,
    workflow_cls: Any,
    columns: column_detection.OptionalColumns,
    config: Any,
    now: datetime,
) -> tuple[list[Any], dict[str, str], list[str]]:
    """The executions list's query-string filters as criteria (R-ADM-13).

    Filters: ``state`` (one of the execution states), ``step_name``, ``type``
    (workflow class, also one no longer in the code), ``error_class`` (needs the
    ``error_class_name`` column; see :func:`filters.error_class_matches`),
    ``only`` (one of :data:`LIST_FLAGS`). A value that cannot be applied is
    ignored with a note naming it and what is accepted, never an error
    (R-ADM-13, R-ADM-31).

    Args:
        args: The request's query string.
        execution_cls: The ``StepExecution`` model.
        workflow_cls: The ``Workflow`` model.
        columns: The optional columns present (R-DM-30).
        config: The validated ``GenevaConfig``.
        now: The reference time (aware UTC).

    Returns:
        ``(criteria, filters, notes)``: conditions on ``execution_cls`` and
        ``workflow_cls`` (for ``admin_queries.execution_list_page``), the
        accepted filters
        (to refill the form and carry into pagination links; an ignored value is
        never echoed back into the form) and the notes to show.
    """
    criteria: list[Any] = []
    filters: dict[str, str] = {}
    notes: list[str] = []
    states = [state.value for state in StepExecutionState]
    simple = (
        ("state", execution_cls.state),
        ("step_name", execution_cls.step_name),
        ("type", workflow_cls.type),
        ("error_class", execution_cls.error_class_name),
    )
    for name, column in simple:
        value = args.get(name, "").strip()
        if not value:
            continue
        if "\x00" in value:  # PostgreSQL text cannot hold NUL
            notes.append(f"ignored {name} filter {value!r}: contains a NUL byte")
        elif len(value) > _MAX_TEXT:
            notes.append(
                f"ignored {name} filter {value[:40]!r}…: longer than {_MAX_TEXT} "
                "characters"
            )
        elif name == "state" and value not in states:
            notes.append(
                f"ignored state filter {value!r}: not one of {', '.join(states)}"
            )
        elif name == "error_class" and not columns.error_class_name:
            notes.append(
                f"ignored error_class filter {value!r}: this database has no "
                "error_class_name column"
            )
        else:
            filters[name] = value
            if name == "error_class":
                criteria.append(error_class_matches(column, value))
                # Reattempted executions keep their error in metadata only
                # (R-SE-21); matching JSON would scan every row (R-ADM-30).
                notes.append(ERROR_CLASS_CAVEAT)
            else:
                criteria.append(column == value)
    flag = args.get("only", "").strip()
    if flag:
        if flag not in LIST_FLAGS:
            allowed = ", ".join(LIST_FLAGS)
            notes.append(f"ignored only={flag!r}: allowed values are {allowed}")
        elif flag == "has_cursor" and not columns.cursor:
            notes.append(
                "ignored only='has_cursor': this database has no cursor column"
            )
        else:
            filters["only"] = flag
            criteria.extend(flag_criteria(flag, execution_cls, config, now))
    return criteria, filters, notes


# -- detail page (R-ADM-14) ---------------------------------------------------------


def load_execution(session: orm.Session, execution_cls: Any, key: Any) -> Any:
    """Load one execution with every optional column this database has (R-DM-32).

    A cursor or metadata text that does not parse loads as
    :class:`~flask_geneva.models.InvalidJSON` (R-ADM-31).

    Returns:
        The execution, or None when there is none with this key.
    """
    # Show the stored truth even if this session saw the row earlier.
    return admin_queries.load_execution(session, execution_cls, key)


@dataclasses.dataclass(frozen=True)
class ColumnValue:
    """One stored column of the execution as shown on the detail page.

    Attributes:
        name: The column name in the database.
        kind: ``"null"``, ``"time"``, ``"text"``, ``"section"`` (shown in its own
            section, ``text`` is a summary and ``anchor`` the section id) or
            ``"absent"`` (the optional column does not exist in this database).
        text: The display text (plain, escaped by the template).
        anchor: The id of the section showing the value, or ``""``.
    """

    name: str
    kind: str
    text: str = ""
    anchor: str = ""


@dataclasses.dataclass(frozen=True)
class ExecutionLink:
    """A link to another execution: its id, step name and state."""

    id: Any
    step_name: str
    state: str


_OPTIONAL = {
    "meta": "step_execution_metadata",
    "error_class_name": "error_class_name",
    "cursor": "cursor",
    "continues_from_id": "continues_from_id",
    "worker_id": "worker_id",
    # The add_workflow_signals unit's columns (R-WSIG-02, R-WSIG-70).
    "signal_id": "waiting_columns",
    "waiting_since": "waiting_columns",
    "wait_deadline": "waiting_columns",
    # The add_flow_limits unit's column (R-LIM-50).
    "limit_holds": "flow_limits",
}
#: Longest scalar JSON value shown inline in the columns table.
_INLINE_CHARS = 60
_SECTIONS = {
    "meta": "metadata",
    "cursor": "cursor",
    "error_message": "error",
    "error_backtrace": "backtrace",
}


def _column_values(
    execution: Any, columns: column_detection.OptionalColumns
) -> list[ColumnValue]:
    values = []
    for prop in sa.inspect(type(execution)).column_attrs:
        name = prop.columns[0].name
        flag = _OPTIONAL.get(prop.key)
        if flag is not None and not getattr(columns, flag):
            values.append(ColumnValue(name, "absent", "not in this database"))
            continue
        value = getattr(execution, prop.key)
        if prop.key == "cursor" and isinstance(value, InvalidJSON):
            values.append(ColumnValue(name, "section", "unparsable", "cursor"))
            continue
        if value is None:
            values.append(ColumnValue(name, "null", "NULL"))
        elif prop.key in _SECTIONS:
            values.append(
                ColumnValue(
                    name, "section", _summary(prop.key, value), _SECTIONS[prop.key]
                )
            )
        elif isinstance(value, datetime):
            values.append(ColumnValue(name, "time", _format_time(value)))
        else:
            values.append(ColumnValue(name, "text", str(value)))
    return values


def _summary(key: str, value: Any) -> str:
    """A short text for a column shown in its own section."""
    if isinstance(value, InvalidJSON):
        return f"unparsable ({len(value)} characters)"
    if key in ("error_message", "error_backtrace"):
        lines = str(value).count("\n") + 1
        return f"{lines} line{'s' if lines != 1 else ''}"
    if isinstance(value, dict):
        return f"object with {len(value)} key{'s' if len(value) != 1 else ''}"
    if isinstance(value, list):
        return f"array of {len(value)}"
    compact = pretty_json(value)
    return compact if len(compact) <= _INLINE_CHARS else f"{compact[:_INLINE_CHARS]}…"


def _format_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _link(row: Any) -> ExecutionLink:
    return ExecutionLink(row.id, str(row.step_name), str(row.state))


def _neighbours(
    session: orm.Session, execution_cls: Any, execution: Any
) -> tuple[ExecutionLink | None, ExecutionLink | None]:
    """The previous and next execution of the workflow in timeline order.

    The workflow detail page orders by ``(created_at, id)``; so does this.
    """
    before, after = admin_queries.execution_neighbours(
        session, execution_cls, execution
    )
    return (
        _link(before) if before is not None else None,
        _link(after) if after is not None else None,
    )


def _worker_display(
    session: orm.Session,
    execution: Any,
    columns: column_detection.OptionalColumns,
    config: Any,
    now: Any,
) -> dict[str, Any] | None:
    """The worker that claimed the execution and its liveness (R-WRK-09), or None.

    None without the worker registry or when the execution names no worker.
    """
    if not columns.worker_registry or execution.worker_id is None:
        return None
    workers = worker_registry.registry_table(session)
    if workers is None:
        return None
    liveness = worker_rows.worker_liveness(
        session.connection(), workers, execution.worker_id, config.worker_dead_after
    )
    return {
        "id": execution.worker_id,
        "last_heartbeat_at": None if liveness is None else liveness[0],
        "alive": liveness is not None and liveness[1],
    }


def _chain_links(
    session: orm.Session,
    execution_cls: Any,
    execution: Any,
    columns: column_detection.OptionalColumns,
) -> tuple[Any, ExecutionLink | None, list[ExecutionLink]]:
    """``(predecessor id, predecessor link or None if missing, successors)``."""
    if not columns.continues_from_id:
        return None, None, []
    row, rows = admin_queries.execution_chain(session, execution_cls, execution)
    predecessor = _link(row) if row is not None else None
    successors = [_link(successor) for successor in rows]
    predecessor_id = execution.continues_from_id
    return predecessor_id, predecessor, successors


def _cursor_display(
    execution: Any, columns: column_detection.OptionalColumns
) -> dict[str, Any] | None:
    """The cursor section: pretty JSON cut at 2 KB, or None when there is none."""
    if not columns.cursor or execution.cursor is None:
        return None
    return cursor_display(execution.cursor)


def cursor_display(value: Any) -> dict[str, Any]:
    """A stored cursor (R-ADM-12/14) as ``text``, ``preview``, ``truncated``,
    ``size`` (bytes) and ``problem``.

    ``text`` is pretty JSON, or the raw text of an unparsable cursor (then
    ``problem`` says so, R-ADM-31); ``preview`` is cut at
    ``presenters.CURSOR_PREVIEW_BYTES`` UTF-8 bytes without splitting a
    character.
    """
    problem = ""
    if isinstance(value, InvalidJSON):
        text = str(value)
        problem = "unparsable cursor: the stored text is shown as it is"
    else:
        text = pretty_json(value)
    preview, truncated = truncate_utf8(text, CURSOR_PREVIEW_BYTES)
    return {
        "text": text,
        "preview": preview,
        "truncated": truncated,
        "size": len(text.encode("utf-8", errors="replace")),
        "problem": problem,
    }


def _metadata_display(
    execution: Any, columns: column_detection.OptionalColumns
) -> str | None:
    """The stored metadata as pretty JSON (raw text when unparsable), or None."""
    if not columns.step_execution_metadata or execution.meta is None:
        return None
    value = execution.meta
    if isinstance(value, InvalidJSON):
        return str(value)
    return pretty_json(_without_backtrace(value))


def _without_backtrace(meta: Any) -> Any:
    """The metadata with its backtrace copy replaced by a pointer (R-ADM-48).

    The Error section shows the backtrace once; the metadata says where it is
    instead of repeating it as escaped JSON.
    """
    exception = recorded_exception(meta)
    lines = exception.get("backtrace")
    if not lines:
        return meta
    count = len(lines) if isinstance(lines, list) else str(lines).count("\n") + 1
    shown = dict(exception)
    shown["backtrace"] = f"({count} lines: shown under Error above)"
    return {**meta, "exception": shown}


def recorded_backtrace(execution: Any, meta: Mapping[str, Any]) -> str:
    """The error backtrace: the column, else the metadata copy (R-SE-20/21), or ""."""
    if execution.error_backtrace:
        return str(execution.error_backtrace)
    lines = recorded_exception(meta).get("backtrace")
    if isinstance(lines, list):
        return "\n".join(str(line) for line in lines)
    if isinstance(lines, str):
        return lines
    return ""


def recorded_error_message(execution: Any, meta: Mapping[str, Any]) -> str:
    """The error message: the column, else the metadata copy (R-SE-21), or ""."""
    if execution.error_message:
        return str(execution.error_message)
    return str(recorded_exception(meta).get("message") or "")


def _workflow_summary(
    session: orm.Session, geneva: Any, execution: Any
) -> dict[str, Any]:
    workflow_cls = geneva.Workflow
    row = admin_queries.workflow_type_and_state(
        session, workflow_cls, execution.workflow_id
    )
    if row is None:
        return {
            "id": execution.workflow_id,
            "found": False,
            "type": "",
            "state": "",
            "known": False,
            "step": None,
        }
    type_name = str(row.type)
    workflow_class = geneva.workflow_classes.get(type_name)
    step = None
    if workflow_class is not None:
        step = workflow_class.step_collection().named(execution.step_name)
    return {
        "id": execution.workflow_id,
        "found": True,
        "type": type_name,
        "state": str(row.state),
        "known": workflow_class is not None,
        "step": step,
    }


def execution_detail(
    session: orm.Session,
    geneva: Any,
    execution: Any,
    *,
    meta: Mapping[str, Any],
    metadata_problem: str | None,
    error_class: str,
    config: Any,
    now: datetime,
) -> dict[str, Any]:
    """Collect what the execution detail page shows (R-ADM-14, R-ADM-31).

    Args:
        session: The session to read with (no locks, no writes).
        geneva: The ``Geneva`` extension (models, workflow classes).
        execution: The loaded ``StepExecution`` (see :func:`load_execution`).
        meta: The execution's metadata as a dict (``{}`` when absent or broken).
        metadata_problem: The marker text when the metadata is broken, else None.
        error_class: The recorded error class name, or ``""``.
        config: The validated ``GenevaConfig`` (stuck threshold).
        now: The reference time (aware UTC).

    Returns:
        The template context: ``execution``, ``workflow`` (id, found, type, state,
        known, step), ``columns`` (:class:`ColumnValue` list), ``metadata_text``,
        ``metadata_problem``, ``cursor`` (text, preview, truncated, size,
        problem or None), ``cursor_preview_bytes``, ``error_class``,
        ``error_message``, ``raised`` (an error is recorded: the badges say
        "raised", R-ADM-121), ``recovery`` (why a ``recovered`` execution was
        recovered, R-ADM-125), ``waits_for_resume`` (scheduled in a paused
        workflow, R-ADM-120), ``backtrace``,
        ``policy_sentence``, ``flow_control``, ``interrupt``, ``precondition``,
        ``reattempt_reason``, ``overdue``, ``stuck``, ``duration``,
        ``predecessor_id``, ``predecessor``, ``successors``, ``previous``, ``next``.
    """
    columns = column_detection.optional_columns(session)
    execution_cls = type(execution)
    decision = meta.get("policy_decision")
    interrupt = meta.get("interrupt")
    flow_control = meta.get("flow_control")
    precondition = meta.get("precondition")
    reattempt_reason = meta.get("reattempt_reason")
    end = execution.finished_at or execution.completed_at or execution.failed_at
    worker = _worker_display(session, execution, columns, config, now)
    in_progress = execution.state == StepExecutionState.IN_PROGRESS.value
    if worker is not None:
        # Liveness, not age, for an execution a registered worker holds (R-WRK-06).
        stuck = in_progress and not worker["alive"]
    else:
        stuck = (
            in_progress
            and execution.started_at is not None
            and execution.started_at < now - config.stuck_in_progress_threshold
        )
    previous, following = _neighbours(session, execution_cls, execution)
    workflow = _workflow_summary(session, geneva, execution)
    error_message = recorded_error_message(execution, meta)
    # A paused workflow's preserved execution waits for Resume, not for its
    # time: never "overdue" (R-ADM-120).
    scheduled = execution.state == StepExecutionState.SCHEDULED.value
    waits_for_resume = scheduled and workflow["state"] == "paused"
    predecessor_id, predecessor, successors = _chain_links(
        session, execution_cls, execution, columns
    )
    return {
        "execution": execution,
        "workflow": workflow,
        "columns": _column_values(execution, columns),
        "metadata_text": _metadata_display(execution, columns),
        "metadata_problem": metadata_problem,
        "cursor": _cursor_display(execution, columns),
        "cursor_preview_bytes": CURSOR_PREVIEW_BYTES,
        "error_class": error_class,
        "error_message": error_message,
        "raised": bool(error_class or error_message),
        "recovery": recovery_sentence(execution, meta),
        "waits_for_resume": waits_for_resume,
        "backtrace": recorded_backtrace(execution, meta),
        "policy_sentence": describe_policy_decision(decision)
        if decision is not None
        else "",
        "flow_control": flow_control if isinstance(flow_control, Mapping) else None,
        "interrupt": interrupt if isinstance(interrupt, Mapping) else None,
        "precondition": precondition if isinstance(precondition, Mapping) else None,
        "reattempt_reason": reattempt_reason
        if isinstance(reattempt_reason, str)
        else "",
        "overdue": scheduled and not waits_for_resume and execution.scheduled_for < now,
        "stuck": stuck,
        "worker": worker,
        "duration": format_duration(execution.started_at, end),
        "predecessor_id": predecessor_id,
        "predecessor": predecessor,
        "successors": successors,
        "previous": previous,
        "next": following,
    }
