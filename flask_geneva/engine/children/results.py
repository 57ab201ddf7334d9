"""Workflow results and what a workflow reads of its children (SPEC §25, R-CHD-01..03).

A result is one JSON value per workflow, stored in ``result`` through the
cursor codec (the types of R-CUR-01..04), at most ``GENEVA_MAX_RESULT_SIZE``
bytes encoded. ``set_result`` writes it in the caller's transaction (a step's
body: committed with the body's writes); ``workflow.result`` reads it back.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import orm

from flask_geneva.core import cursors
from flask_geneva.db import child_counts
from flask_geneva.db import workflow_results
from flask_geneva.db.queries import children as child_queries
from flask_geneva.db.states import parse_workflow_state
from flask_geneva.engine.children.settle import installed
from flask_geneva.engine.children.start import NOT_INSTALLED_MESSAGE
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import ResultTooLargeError

__all__ = [
    "child_counts_of",
    "child_results",
    "children",
    "parent_of",
    "read_result",
    "set_result",
]


def set_result(workflow: Any, value: Any, *, max_size: int | None) -> None:
    """Store ``value`` as the workflow's result (R-CHD-01).

    One ``UPDATE`` of the workflow's ``result`` by primary key in the session's
    current transaction (not a state change: no state guard); the caller's
    commit (the executor's, after a step body) makes it durable. ``None``
    clears it.

    Raises:
        GenevaError: The ``add_child_workflows`` unit is missing.
        CursorSerializationError: The codec refuses the value ("cannot store
            the result", with the path).
        ResultTooLargeError: Encoded, it is larger than ``max_size`` bytes;
            nothing is written.
    """
    session = _session(workflow)
    data = None
    if value is not None:
        data = cursors.dump_document(
            value, root="result", max_size=max_size, too_large=_too_large
        )
    workflow_results.write_result(
        session, workflow.__geneva__.Workflow, workflow.id, data
    )
    orm.attributes.set_committed_value(workflow, "result_document", data)


def _too_large(size: int, max_size: int) -> ResultTooLargeError:
    return ResultTooLargeError(
        f"workflow result is {size} bytes, more than GENEVA_MAX_RESULT_SIZE "
        f"({max_size} bytes); store a reference (an id, a URL) instead of the "
        "document, or raise the setting (None disables the check)"
    )


def read_result(workflow: Any) -> Any:
    """The workflow's result, decoded; None without one or without the unit."""
    session = orm.object_session(workflow)
    if session is None or not installed(session):
        return None
    with session.no_autoflush:
        data = workflow.result_document
    return None if data is None else cursors.deserialize_cursor(data)


def parent_of(workflow: Any) -> Any:
    """The workflow's parent, or None (top-level, cleaned up, or no unit)."""
    session = orm.object_session(workflow)
    if session is None or not installed(session):
        return None
    with session.no_autoflush:
        parent_id = workflow.parent_workflow_id
    if parent_id is None:
        return None
    return session.get(workflow.__geneva__.Workflow, parent_id)


def children(workflow: Any, *, state: str | None, limit: int | None) -> list[Any]:
    """The workflow's children by id: all, or the first ``limit`` (R-CHD-03).

    Raises:
        ValueError: ``state`` is no workflow state, or ``limit`` is not a
            positive int (or None); the message lists what is allowed.
    """
    if state is not None:
        state = parse_workflow_state(state).value
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
    ):
        raise ValueError(f"invalid limit {limit!r}: a positive int, or None for all")
    session = _session(workflow)
    workflow_cls = workflow.__geneva__.Workflow
    found: list[Any] = []
    after: Any = None
    while limit is None or len(found) < limit:
        size = 1000 if limit is None else min(1000, limit - len(found))
        page = child_queries.children_page(
            session, workflow_cls, workflow.id, after_id=after, limit=size, state=state
        )
        found.extend(page)
        if len(page) < size:
            break
        after = page[-1].id
    return found


def child_results(workflow: Any) -> dict[Any, Any]:
    """``{child id: decoded result}`` of every child, None without one (R-CHD-03)."""
    session = _session(workflow)
    workflow_cls = workflow.__geneva__.Workflow
    return {
        child_id: None if data is None else cursors.deserialize_cursor(data)
        for child_id, data in child_queries.child_results(
            session, workflow_cls, workflow.id
        )
    }


def child_counts_of(workflow: Any) -> child_counts.ChildCounts | None:
    """The workflow's child counts (R-CHD-10), or None before its first child."""
    session = orm.object_session(workflow)
    if session is None or not installed(session):
        return None
    return child_counts.counts_of(session, workflow.id)


def _session(workflow: Any) -> orm.Session:
    session = orm.object_session(workflow)
    if session is None:
        raise GenevaError(f"workflow {workflow.id} is not in a session")
    if not installed(session):
        raise GenevaError(NOT_INSTALLED_MESSAGE)
    return session
