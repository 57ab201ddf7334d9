"""Workflow signals on the workflow page: the parked step's line and the panel.

A step declared with ``@step(wait_for=...)`` parks in ``waiting`` until a
workflow signal arrives (SPEC §23). The workflow page says what it waits for and
since when (R-WSIG-66) and lists the workflow's signals (R-WSIG-67). Everything
here reads rows already loaded or calls
:mod:`flask_geneva.db.queries.admin_workflow_signals`; stored text is returned as plain
strings for the templates to escape (R-ADM-06). Without the
``add_workflow_signals`` unit nothing here queries the signals table
(R-WSIG-04, R-WSIG-70).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

from markupsafe import Markup

from flask_geneva.admin.executions import cursor_display
from flask_geneva.admin.time_display import exact_time
from flask_geneva.admin.time_display import relative_time
from flask_geneva.db.queries import admin_workflow_signals as admin_signal_queries

__all__ = [
    "MAX_PANEL_SIGNALS",
    "NOT_INSTALLED_NOTE",
    "SIGNAL_STATES",
    "signal_panel",
    "signal_row",
    "span_tag",
    "waiting_line",
]

#: Signals shown on a workflow page (the newest ones when there are more).
MAX_PANEL_SIGNALS = 200
#: The states of a workflow signal, in their order (R-WSIG-03).
SIGNAL_STATES = ("pending", "claimed", "consumed", "expired")
#: What the admin says where the ``add_workflow_signals`` unit is missing.
NOT_INSTALLED_NOTE = (
    "Workflow signals are not installed in this database: run `flask geneva "
    "install` and then `flask db upgrade` to add them (install unit "
    "add_workflow_signals)."
)


def span_tag(value: datetime, now: datetime) -> Markup:
    """How long ago (or from now) ``value`` is, as ``<time>`` text without "ago".

    ``"3 d"`` / ``"14 min"`` (``"just now"`` under a second), with the exact UTC
    time as its title (R-ADM-40, R-WSIG-66). Made from a datetime only, never
    from stored text.
    """
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    phrase = relative_time(moment, now).removeprefix("in ").removesuffix(" ago")
    if phrase == "now":
        phrase = "just now"  # under a second: "since just now"
    iso = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Markup(  # noqa: S704 - digits and units only, no stored text
        f'<time class="geneva-time" datetime="{iso}" '
        f'title="{exact_time(moment)}">{phrase}</time>'
    )


def _awaited(steps: Any, step_name: str) -> str:
    """What the step waits for: its signal names, or its custom matcher's repr."""
    definition = steps.named(step_name) if steps is not None else None
    wait_for = getattr(definition, "wait_for", None)
    if wait_for is None:
        return "a workflow signal (the step is no longer defined with wait_for)"
    if wait_for.names:
        return " or ".join(wait_for.names)
    return str(wait_for.description)


def waiting_line(
    executions: list[Any], steps: Any, columns: Any, now: datetime
) -> dict[str, Any] | None:
    """The parked step's facts for "waiting for X since 3 d" (R-WSIG-66).

    Args:
        executions: The workflow's executions on the page, oldest first.
        steps: The class's step collection, or None for a class no longer defined.
        columns: The optional-column flags; without the unit there is no line.
        now: The request's now (aware UTC).

    Returns:
        None when no execution is ``waiting``; else ``execution_id``, ``step``,
        ``awaited`` (plain text), ``since`` (a ``<time>``, or None when the
        column is empty), ``deadline`` (aware datetime or None) and
        ``deadline_passed``.
    """
    if not columns.workflow_signals:
        return None
    parked = [e for e in executions if e.state == "waiting"]
    if not parked:
        return None
    execution = parked[-1]
    deadline = execution.wait_deadline
    return {
        "execution_id": execution.id,
        "step": execution.step_name,
        "awaited": _awaited(steps, execution.step_name),
        "since": span_tag(execution.waiting_since, now)
        if execution.waiting_since is not None
        else None,
        "deadline": deadline,
        "deadline_in": span_tag(deadline, now) if deadline is not None else None,
        "deadline_passed": deadline is not None and deadline <= now,
    }


def signal_row(signal: Any) -> dict[str, Any]:
    """A signal's cells: payload as pretty JSON (cut at 2 KB with the rest
    expandable), state, name, key and times (R-WSIG-67, R-WSIG-69)."""
    payload = None
    if signal.payload_data is not None:
        payload = cursor_display(signal.payload_data)
        if payload["problem"]:  # stored text that is not JSON (R-ADM-31)
            payload["problem"] = "unparsable payload: the stored text is shown as it is"
    return {
        "signal": signal,
        "id": signal.id,
        "payload": payload,
    }


def _claimed_by(signal: Any, executions: list[Any]) -> Any:
    """The execution that ran (or waits to run) with ``signal``, or None.

    An execution woken by the signal carries its id (``signal_id``); a signal
    that was pending first is claimed at the gate of the step's latest execution
    due by then (R-WSIG-13).
    """
    for execution in executions:
        if execution.signal_id == signal.id:
            return execution
    if signal.claimed_at is None or signal.step_name is None:
        return None
    candidates = [
        e
        for e in executions
        if e.step_name == signal.step_name and e.scheduled_for <= signal.claimed_at
    ]
    return candidates[-1] if candidates else None


def _consumed_by(signal: Any, executions: list[Any]) -> Any:
    """The execution whose resolution consumed ``signal`` (R-WSIG-15), or None."""
    if signal.consumed_at is None or signal.step_name is None:
        return None
    candidates = [
        e
        for e in executions
        if e.step_name == signal.step_name
        and e.finished_at is not None
        and e.finished_at <= signal.consumed_at
    ]
    return candidates[-1] if candidates else None


def signal_panel(
    session: Any, signal_cls: Any, workflow: Any, executions: list[Any], columns: Any
) -> dict[str, Any]:
    """The workflow page's signals panel (R-WSIG-67, R-WSIG-70).

    Args:
        session: The admin's session.
        signal_cls: The ``WorkflowSignal`` model.
        workflow: The workflow shown.
        executions: Its executions on the page, oldest first (the claiming and
            consuming executions are found among them, no further query).
        columns: The optional-column flags.

    Returns:
        ``installed`` (False: only ``note`` is set), ``rows`` (newest first,
        each :func:`signal_row` plus ``claimed_by``/``consumed_by`` execution
        ids or None) and ``truncated`` (more than :data:`MAX_PANEL_SIGNALS`).
    """
    if not columns.workflow_signals:
        return {"installed": False, "rows": [], "truncated": False}
    signals = admin_signal_queries.workflow_signals_newest(
        session,
        signal_cls,
        workflow.id,
        limit=MAX_PANEL_SIGNALS + 1,
    )
    rows = []
    for signal in signals[:MAX_PANEL_SIGNALS]:
        row = signal_row(signal)
        claimed = _claimed_by(signal, executions)
        consumed = _consumed_by(signal, executions)
        row["claimed_by"] = claimed.id if claimed is not None else None
        row["consumed_by"] = consumed.id if consumed is not None else None
        rows.append(row)
    return {
        "installed": True,
        "rows": rows,
        "truncated": len(signals) > MAX_PANEL_SIGNALS,
    }
