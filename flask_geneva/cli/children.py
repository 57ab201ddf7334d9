"""What ``flask geneva show`` says of a workflow's parent and children (R-CHD-60).

A child gets a ``parent:`` line (the parent's id, class and state, the step
that started the child and its key); a parent a ``children:`` line (its child
counts and the execution parked for them). ``show --children`` adds the
children's counts per state and one page of children, keyset by id. Every read
is bounded: the counts row by primary key, one grouped statement, one page of
rows (:mod:`flask_geneva.db.queries.children`). Without the
``add_child_workflows`` unit nothing is read. The lines hold stored text
(types, step names, keys): the caller escapes them
(:func:`~flask_geneva.core.terminal_text.escape_control_characters`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from flask_geneva.db import child_counts
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import children as child_queries
from flask_geneva.models import WorkflowState

__all__ = ["NOT_INSTALLED", "Family", "family_of", "key_text", "state_counts_text"]

#: What ``show --children`` says without the unit.
NOT_INSTALLED = (
    "not in this database (install unit add_child_workflows: "
    "flask geneva install, then flask db upgrade)"
)


@dataclasses.dataclass
class Family:
    """What ``show`` prints of a workflow's parent and children.

    Attributes:
        lines: Header lines (``parent:``, ``children:``, ``by state:``),
            unescaped.
        page: With ``--children`` and children to list: the table's rows, the
            first the header (``id``, ``class``, ``state``, ``key``, ``step``,
            ``settled``); else None.
        more_after: The last listed id when more children follow it.
        after: The ``--after`` id the page starts after, or None.
    """

    lines: list[str]
    page: list[list[str]] | None = None
    more_after: Any = None
    after: Any = None


def key_text(key: str | None) -> str:
    """A child key as printed: JSON-quoted when it has whitespace or a ``"``
    (one cell, one token), ``-`` for None."""
    if key is None:
        return "-"
    if key == "" or any(c.isspace() for c in key) or '"' in key:
        return json.dumps(key, ensure_ascii=False)
    return key


def state_counts_text(counts: dict[str, int]) -> str:
    """``ready 2, finished 1``: the known states in their order, then others."""
    known = [state.value for state in WorkflowState]
    order = [s for s in known if s in counts]
    order += sorted(s for s in counts if s not in known)
    return ", ".join(f"{state} {counts[state]}" for state in order) or "none"


def family_of(
    session: Any,
    workflow_cls: Any,
    workflow_id: Any,
    workflow_type: str,
    *,
    with_children: bool,
    limit: int,
    after: Any,
    step_label: Callable[[str | None, str | None], str],
) -> Family:
    """Read what ``show`` prints of the workflow's parent and children (R-CHD-60).

    Without ``with_children``: the child link (one statement) and the counts
    row (one read by primary key). With it, also the children per state (one
    grouped statement) and ``limit`` children after ``after`` by id (one
    statement reading ``limit + 1`` rows).

    Args:
        session: The command's session (only read).
        workflow_cls: The workflow base model.
        workflow_id: The shown workflow's id.
        workflow_type: Its ``type`` (its children's starting steps are its steps).
        with_children: ``--children`` was given.
        limit: Children per page (``--limit``).
        after: List children with an id above this one (``--after``), or None.
        step_label: ``(workflow type, step name) -> text``: how a stored step
            name prints (renamed steps, R-EVO-04).

    Returns:
        The lines and the page; without the unit, no lines (``--children``:
        one line saying how to install it) and nothing read.
    """
    if not column_detection.optional_columns(session).child_workflows:
        return Family([f"  children:     {NOT_INSTALLED}"] if with_children else [])
    lines: list[str] = []
    link = child_queries.child_link(session, workflow_cls, workflow_id)
    if link is not None:
        lines.append(f"  parent:       {_parent_text(link, step_label)}")
    counts = child_counts.counts_of(session, workflow_id)
    if counts is not None:
        lines.append(f"  children:     {_counts_text(counts)}")
    elif with_children:
        lines.append("  children:     none")
    if not with_children or counts is None:
        return Family(lines)
    per_state = child_queries.child_state_counts(session, workflow_cls, workflow_id)
    lines.append(f"  by state:     {state_counts_text(per_state)}")
    rows = child_queries.children_rows_page(
        session, workflow_cls, workflow_id, after_id=after, limit=limit + 1
    )
    shown = rows[:limit]
    page = [["id", "class", "state", "key", "step", "settled"]]
    for row in shown:
        page.append(
            [
                str(row.id),
                row.type,
                row.state,
                key_text(row.child_key),
                step_label(workflow_type, row.parent_step_name),
                row.child_settled or "-",
            ]
        )
    more = shown[-1].id if len(rows) > limit else None
    return Family(lines, page, more, after)


def _parent_text(link: Any, step_label: Callable[[str | None, str | None], str]) -> str:
    """``workflow 12 (Summing, ready), step fan_out (execution 4), key part-0
    (parent_close cancel; not settled)``."""
    if link.parent_type is None:
        parent = (
            f"workflow {link.parent_workflow_id} (not found: deleted or cleaned up)"
        )
    else:
        parent = (
            f"workflow {link.parent_workflow_id} "
            f"({link.parent_type}, {link.parent_state})"
        )
    settled = f"settled {link.child_settled}" if link.child_settled else "not settled"
    return (
        f"{parent}, step {step_label(link.parent_type, link.parent_step_name)} "
        f"(execution {link.parent_execution_id}), "
        f"key {key_text(link.child_key)} "
        f"(parent_close {link.parent_close or '-'}; {settled})"
    )


def _counts_text(counts: Any) -> str:
    """``started 3, settled 1, failed 0; execution 45 waits for 3 settled``,
    with `` (reached: its wake is on its way)`` once as many have settled."""
    text = f"started {counts.started}, settled {counts.settled}, failed {counts.failed}"
    if counts.waiting_execution_id is not None:
        text += (
            f"; execution {counts.waiting_execution_id} waits for "
            f"{counts.wake_at_settled} settled"
        )
        if (
            counts.wake_at_settled is not None
            and counts.settled >= counts.wake_at_settled
        ):
            text += " (reached: its wake is on its way)"
    return text
