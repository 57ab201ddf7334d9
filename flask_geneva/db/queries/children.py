"""Reads of a workflow's children: the engine's gate and results, operators' views.

Children are workflows whose ``parent_workflow_id`` names the parent (SPEC §25,
R-CHD-10). Every read here goes along the unique child index
``(parent_workflow_id, parent_step_name, child_key)`` by its leading column, is
plain (no row lock) and bounded by a row limit or one grouped statement. None
of this runs without the ``add_child_workflows`` unit: callers check
:attr:`~flask_geneva.db.optional_columns.OptionalColumns.child_workflows` first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.states import TERMINAL_WORKFLOW_STATES
from flask_geneva.db.states import ChildSettlement
from flask_geneva.db.states import ParentClose

__all__ = [
    "child_ids_by_key",
    "child_results",
    "child_state_counts",
    "children_by_ids",
    "children_page",
    "failed_child_ids",
    "ongoing_children_to_cancel",
    "write_result",
]

_FAILED = (ChildSettlement.CANCELED.value, ChildSettlement.FAILED.value)


def failed_child_ids(
    session: orm.Session, workflow_cls: Any, parent_id: Any, *, limit: int = 10
) -> list[Any]:
    """Ids of children canceled or paused by an error, lowest first (R-CHD-23)."""
    return list(
        session.scalars(
            sa.select(workflow_cls.id)
            .where(
                workflow_cls.parent_workflow_id == parent_id,
                workflow_cls.child_settled.in_(_FAILED),
            )
            .order_by(workflow_cls.id)
            .limit(limit)
        )
    )


def child_ids_by_key(
    session: orm.Session,
    workflow_cls: Any,
    parent_id: Any,
    step_name: str,
    keys: list[str],
) -> dict[str, Any]:
    """``{child_key: id}`` of the step's children with those keys (R-CHD-11)."""
    found: dict[str, Any] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        rows = session.execute(
            sa.select(workflow_cls.child_key, workflow_cls.id).where(
                workflow_cls.parent_workflow_id == parent_id,
                workflow_cls.parent_step_name == step_name,
                workflow_cls.child_key.in_(chunk),
            )
        ).all()
        found.update({row.child_key: row.id for row in rows})
    return found


def children_by_ids(
    session: orm.Session, workflow_cls: Any, ids: list[Any]
) -> list[Any]:
    """The workflows with these ids (in chunks of 500), in no particular order."""
    found: list[Any] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        found.extend(
            session.scalars(sa.select(workflow_cls).where(workflow_cls.id.in_(chunk)))
        )
    return found


def children_page(
    session: orm.Session,
    workflow_cls: Any,
    parent_id: Any,
    *,
    after_id: Any = None,
    limit: int = 50,
    state: str | None = None,
) -> list[Any]:
    """Up to ``limit`` children of the parent by id, after ``after_id`` (keyset).

    Args:
        session: A session bound to the models.
        workflow_cls: The workflow base model.
        parent_id: The parent workflow's id.
        after_id: The last id of the previous page, or None for the first.
        limit: The page size.
        state: Only children in this workflow state, or None for all.
    """
    query = sa.select(workflow_cls).where(workflow_cls.parent_workflow_id == parent_id)
    if state is not None:
        query = query.where(workflow_cls.state == state)
    if after_id is not None:
        query = query.where(workflow_cls.id > after_id)
    return list(session.scalars(query.order_by(workflow_cls.id).limit(limit)))


def child_state_counts(
    session: orm.Session, workflow_cls: Any, parent_id: Any
) -> dict[str, int]:
    """``{workflow state: children in it}`` of the parent (one grouped statement)."""
    rows = session.execute(
        sa.select(workflow_cls.state, sa.func.count())
        .where(workflow_cls.parent_workflow_id == parent_id)
        .group_by(workflow_cls.state)
    ).all()
    return {str(state): int(count) for state, count in rows}


def child_results(
    session: orm.Session, workflow_cls: Any, parent_id: Any, *, batch: int = 1000
) -> Iterator[tuple[Any, Any]]:
    """``(child id, stored result document)`` of every child, by id, in batches."""
    after: Any = None
    while True:
        query = sa.select(workflow_cls.id, workflow_cls.result_document).where(
            workflow_cls.parent_workflow_id == parent_id
        )
        if after is not None:
            query = query.where(workflow_cls.id > after)
        rows = session.execute(query.order_by(workflow_cls.id).limit(batch)).all()
        for row in rows:
            yield row.id, row.result_document
        if len(rows) < batch:
            return
        after = rows[-1].id


def ongoing_children_to_cancel(
    session: orm.Session, workflow_cls: Any, parent_id: Any, *, limit: int
) -> list[Any]:
    """Ids of the parent's ongoing children that canceling it cancels (R-CHD-31)."""
    return list(
        session.scalars(
            sa.select(workflow_cls.id)
            .where(
                workflow_cls.parent_workflow_id == parent_id,
                workflow_cls.state.not_in([s.value for s in TERMINAL_WORKFLOW_STATES]),
                workflow_cls.parent_close == ParentClose.CANCEL.value,
            )
            .order_by(workflow_cls.id)
            .limit(limit)
        )
    )


def write_result(
    session: orm.Session, workflow_cls: Any, workflow_id: Any, data: Any
) -> None:
    """Store a workflow's encoded result (R-CHD-01): one ``UPDATE`` of
    ``result`` by primary key in the session's current transaction. Not a
    state change (no state guard); ``data`` None clears it."""
    table = workflow_cls.__table__
    session.execute(
        sa.update(table).where(table.c.id == workflow_id).values(result=data)
    )
