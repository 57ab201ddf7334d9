"""A workflow's parent and children on its page (R-CHD-61).

A child's page links its parent (with the step that started it and its key);
a parent's page has a "Children" panel: the counts row (started, settled,
failed, the execution parked for them and its threshold), the children per
state (one grouped statement), a page of children by id (keyset on
``children_after``, :data:`CHILDREN_PAGE_SIZE` a page) and links to the
workflows list filtered to the parent's children (``parent=<id>``), where the
bulk actions act on them (R-CHD-62).

Only reads (R-ADM-32), each bounded: the child link (one statement by primary
key), the counts row (by primary key), one grouped count and one page of
``CHILDREN_PAGE_SIZE + 1`` rows (:mod:`flask_geneva.db.queries.children`).
Without the ``add_child_workflows`` unit nothing is read and the page shows
neither. Stored text (types, step names, keys) is returned as plain strings
for the templates to escape (R-ADM-06).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from flask_geneva.admin.list_params import quoted
from flask_geneva.db import child_counts
from flask_geneva.db.queries import children as child_queries
from flask_geneva.models import WorkflowState

__all__ = ["CHILDREN_PAGE_SIZE", "children_panel", "children_wait", "parent_link"]

#: Children listed on one page of the panel.
CHILDREN_PAGE_SIZE = 50


def parent_link(
    session: Any, workflow_cls: Any, workflow_id: Any, columns: Any
) -> dict[str, Any] | None:
    """What the page says of the workflow's parent (R-CHD-61), or None.

    Args:
        session: The admin's session (only read).
        workflow_cls: The workflow base model.
        workflow_id: The shown workflow's id.
        columns: The database's optional columns
            (:func:`~flask_geneva.db.optional_columns.optional_columns`).

    Returns:
        ``id``, ``type`` and ``state`` of the parent (``type``/``state`` None
        when its row is gone), ``step`` and ``execution_id`` that started the
        child, its ``key``, ``parent_close`` and ``settled``
        (``child_settled``); None for a workflow that is no child, and without
        the ``add_child_workflows`` unit (nothing read).
    """
    if not columns.child_workflows:
        return None
    link = child_queries.child_link(session, workflow_cls, workflow_id)
    if link is None:
        return None
    return {
        "id": link.parent_workflow_id,
        "type": link.parent_type,
        "state": link.parent_state,
        "step": link.parent_step_name,
        "execution_id": link.parent_execution_id,
        "key": link.child_key,
        "parent_close": link.parent_close,
        "settled": link.child_settled,
    }


def children_panel(
    session: Any,
    workflow_cls: Any,
    workflow_id: Any,
    columns: Any,
    args: Mapping[str, str],
    parse_key: Callable[[str], Any],
) -> dict[str, Any] | None:
    """The "Children" panel's values (R-CHD-61), or None.

    None (after one read by primary key) for a workflow that never started a
    child (no counts row), and without the ``add_child_workflows`` unit
    (nothing read).

    Args:
        session: The admin's session (only read).
        workflow_cls: The workflow base model.
        workflow_id: The shown workflow's id.
        columns: The database's optional columns.
        args: The page's query string: ``children_after`` (a child id) starts
            the page after that id; a value that is not an id is ignored
            with a note and the first page shown.
        parse_key: Turns id text into a key, or None when it is none.

    Returns:
        ``counts`` (:class:`~flask_geneva.db.child_counts.ChildCounts`),
        ``states`` (``[(state, count)]``, the known states in their order,
        then any other), ``total`` (their sum: the children stored now),
        ``rows`` (the page's children: ``id``, ``type``, ``state``,
        ``child_key``, ``parent_step_name``, ``child_settled``,
        ``created_at``...), ``after`` (the id the page starts after, or None),
        ``next_after`` (the last row's id when more follow, else None) and
        ``notes``.
    """
    if not columns.child_workflows:
        return None
    counts = child_counts.counts_of(session, workflow_id)
    if counts is None:
        return None
    notes: list[str] = []
    raw = args.get("children_after")
    after = parse_key(raw) if raw else None
    if raw and after is None:
        notes.append(
            f"children_after={quoted(raw)} is not a workflow id: the children are "
            "listed from the first"
        )
    per_state = child_queries.child_state_counts(session, workflow_cls, workflow_id)
    known = [state.value for state in WorkflowState]
    order = [s for s in known if s in per_state]
    order += sorted(s for s in per_state if s not in known)
    rows = child_queries.children_rows_page(
        session,
        workflow_cls,
        workflow_id,
        after_id=after,
        limit=CHILDREN_PAGE_SIZE + 1,
    )
    shown = rows[:CHILDREN_PAGE_SIZE]
    return {
        "counts": counts,
        "states": [(state, per_state[state]) for state in order],
        "total": sum(per_state.values()),
        "rows": shown,
        "after": after,
        "next_after": shown[-1].id if len(rows) > CHILDREN_PAGE_SIZE else None,
        "notes": notes,
    }


def children_wait(
    waiting: dict[str, Any] | None, children: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The parked step's line, saying so when it waits for its children.

    The waiting line (:func:`~flask_geneva.admin.signal_display.waiting_line`)
    names the signals a parked step waits for (R-WSIG-66); an execution that
    is the counts row's ``waiting_execution_id`` is parked at its
    ``wait_for_children`` gate instead (R-CHD-21), so its line reads
    ``3 settled children (1 settled now)`` (R-CHD-61).

    Args:
        waiting: The waiting line's values, or None.
        children: The panel's values (:func:`children_panel`), or None.

    Returns:
        ``waiting``, changed for a wait for children (``awaited``, and
        ``for_children`` True), or as given.
    """
    if waiting is None or children is None:
        return waiting
    counts = children["counts"]
    if counts.waiting_execution_id != waiting["execution_id"]:
        return waiting
    needed = counts.wake_at_settled
    noun = "child" if needed == 1 else "children"
    return {
        **waiting,
        "awaited": f"{needed} settled {noun} ({counts.settled} settled now)",
        "for_children": True,
    }


def parked_for(workflow_cls: Any, step_name: str | None) -> str:
    """What a parked step of ``workflow_cls`` waits for: ``"children"`` for a
    ``wait_for_children`` step (R-CHD-21), else ``"signal"`` (R-WSIG-10).

    Args:
        workflow_cls: The workflow's registered class, or None (unknown type).
        step_name: The parked execution's step.
    """
    steps = getattr(workflow_cls, "step_collection", None)
    step = None if steps is None or step_name is None else steps().named(step_name)
    if step is not None and step.wait_for_children is not None:
        return "children"
    return "signal"
