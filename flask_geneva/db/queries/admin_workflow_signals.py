"""The admin's reads of workflow signals: a workflow's panel and the signals list.

Workflow signals (SPEC §23) are rows of ``geneva_drive_signals``. The admin shows
them on the workflow page (R-WSIG-67) and in a list across workflows
(R-WSIG-69); these are the only statements it runs on the table. Each read is
bounded: a workflow's panel by a row limit along the ``(workflow_id, state,
created_at)`` index's ``workflow_id`` prefix, the list by one page plus one row
along the primary key (or ``created_at`` for UUID keys), and its match count
by at most 10,001 rows: never an unbounded ``COUNT(*)`` (R-ADM-30). They
never lock and never write (R-ADM-32).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.queries.admin_filters import count_at_most
from flask_geneva.db.queries.keyset import KeysetOrder
from flask_geneva.db.queries.keyset import Position
from flask_geneva.db.queries.keyset import keyset_rows
from flask_geneva.db.queries.keyset import planner_row_estimate
from flask_geneva.db.states import StepExecutionState

__all__ = [
    "count_signal_list",
    "estimate_signal_list",
    "parked_workflow_ids",
    "signal_list_page",
    "signal_names_stored",
    "signal_order",
    "workflow_signals_newest",
]


def workflow_signals_newest(
    session: orm.Session, signal_cls: Any, workflow_id: Any, *, limit: int
) -> list[Any]:
    """The workflow's signals, newest first, at most ``limit`` (R-WSIG-67).

    Read along the ``(workflow_id, state, created_at)`` index's first column.

    Args:
        session: The admin's session.
        signal_cls: The ``WorkflowSignal`` model.
        workflow_id: The workflow's id.
        limit: The most rows returned (pass one more than shown to tell whether
            there are more).
    """
    return list(
        session.scalars(
            sa.select(signal_cls)
            .where(signal_cls.workflow_id == workflow_id)
            .order_by(signal_cls.created_at.desc(), signal_cls.id.desc())
            .limit(limit)
            .execution_options(populate_existing=True)
        )
    )


def signal_list_page(
    session: orm.Session,
    signal_cls: Any,
    workflow_cls: Any,
    *,
    state: str | None = None,
    name: str | None = None,
    workflow_type: str | None = None,
    received_from: datetime | None = None,
    received_before: datetime | None = None,
    received_until: datetime | None = None,
    order_by_created_at: bool = False,
    after: Position | None = None,
    before: Position | None = None,
    limit: int,
    offset: int = 0,
) -> list[tuple[Any, str | None, str | None]]:
    """One page of signals across workflows, newest first (R-WSIG-69).

    The signals are joined to their workflows (an outer join: a signal whose
    workflow is gone still lists, with None for its class and state). Newest
    first is the primary key's order for sequential keys, read backwards along
    it; ``order_by_created_at`` (UUID keys) orders by ``created_at``, then id.

    Args:
        session: The admin's session.
        signal_cls: The ``WorkflowSignal`` model.
        workflow_cls: The ``Workflow`` model.
        state: Only signals in this state.
        name: Only signals of this name (exact).
        workflow_type: Only signals of workflows of this class (the stored
            ``type``).
        received_from: Only signals created at or after this instant (aware UTC).
        received_before: Only signals created before this instant.
        received_until: Only signals created at or before this instant.
        order_by_created_at: Order by ``created_at`` instead of the id.
        after: Read the rows after this position (R-ADM-150).
        before: Read the rows before this position.
        limit: The most rows returned (one more than a page tells whether a next
            page exists).
        offset: Rows skipped, only without a position (a bookmarked page).

    Returns:
        ``[(signal, workflow type or None, workflow state or None), ...]``.
    """
    statement = _filtered(
        sa.select(signal_cls, workflow_cls.type, workflow_cls.state).join(
            workflow_cls, workflow_cls.id == signal_cls.workflow_id, isouter=True
        ),
        signal_cls,
        workflow_cls,
        state=state,
        name=name,
        workflow_type=workflow_type,
        received_from=received_from,
        received_before=received_before,
        received_until=received_until,
    )
    rows = keyset_rows(
        session,
        statement,
        signal_order(signal_cls, order_by_created_at=order_by_created_at),
        after=after,
        before=before,
        limit=limit,
        offset=offset,
    )
    return [(row[0], row[1], row[2]) for row in rows]


def signal_order(signal_cls: Any, *, order_by_created_at: bool) -> KeysetOrder:
    """The signals list's order: newest first, by id or (UUID keys) by
    ``created_at`` then id (R-WSIG-69, R-ADM-150)."""
    column = signal_cls.created_at if order_by_created_at else signal_cls.id
    return KeysetOrder(column, signal_cls.id, descending=True)


def count_signal_list(
    session: orm.Session,
    signal_cls: Any,
    workflow_cls: Any,
    *,
    cap: int,
    **filters: Any,
) -> int:
    """How many signals the list's filters match, reading at most ``cap + 1``
    (R-ADM-127, R-ADM-30); the filters are :func:`signal_list_page`'s.

    Returns:
        The count, or ``cap + 1`` when more than ``cap`` match.
    """
    return count_at_most(
        session, _count_statement(signal_cls, workflow_cls, filters), cap
    )


def estimate_signal_list(
    session: orm.Session,
    signal_cls: Any,
    workflow_cls: Any,
    *,
    cap: int,
    **filters: Any,
) -> int | None:
    """The planner's estimate of the signals the list's filters match
    (PostgreSQL, with statistics of more than ``cap`` signals; else None,
    R-ADM-152); the filters are :func:`signal_list_page`'s."""
    return planner_row_estimate(
        session,
        _count_statement(signal_cls, workflow_cls, filters),
        table=signal_cls.__table__,
        above=cap,
    )


def _count_statement(
    signal_cls: Any, workflow_cls: Any, filters: dict[str, Any]
) -> sa.Select[Any]:
    statement = sa.select(signal_cls.id)
    if filters.get("workflow_type") is not None:
        statement = statement.join(
            workflow_cls, workflow_cls.id == signal_cls.workflow_id
        )
    filtered: sa.Select[Any] = _filtered(
        statement,
        signal_cls,
        workflow_cls,
        state=filters.get("state"),
        name=filters.get("name"),
        workflow_type=filters.get("workflow_type"),
        received_from=filters.get("received_from"),
        received_before=filters.get("received_before"),
        received_until=filters.get("received_until"),
    )
    return filtered


def _filtered(
    statement: Any,
    signal_cls: Any,
    workflow_cls: Any,
    *,
    state: str | None,
    name: str | None,
    workflow_type: str | None,
    received_from: datetime | None,
    received_before: datetime | None,
    received_until: datetime | None,
) -> Any:
    """``statement`` with the signals list's filters (R-WSIG-69)."""
    if state is not None:
        statement = statement.where(signal_cls.state == state)
    if name is not None:
        statement = statement.where(signal_cls.name == name)
    if workflow_type is not None:
        statement = statement.where(workflow_cls.type == workflow_type)
    if received_from is not None:
        statement = statement.where(signal_cls.created_at >= received_from)
    if received_before is not None:
        statement = statement.where(signal_cls.created_at < received_before)
    if received_until is not None:
        statement = statement.where(signal_cls.created_at <= received_until)
    return statement


def signal_names_stored(
    session: orm.Session, signal_cls: Any, *, limit: int
) -> list[str]:
    """Distinct signal names among the newest ``limit`` signals, sorted (R-WSIG-69).

    The list's name filter offers them as suggestions; reading the newest rows
    along the primary key keeps the read bounded on a large table.
    """
    newest = (
        sa.select(signal_cls.name)
        .order_by(signal_cls.id.desc())
        .limit(limit)
        .subquery()
    )
    return sorted(
        str(value) for value in session.scalars(sa.select(newest.c.name).distinct())
    )


def parked_workflow_ids(
    session: orm.Session, execution_cls: Any, workflow_ids: list[Any]
) -> dict[Any, str]:
    """``{workflow id: step name}`` of the listed workflows with a parked
    (``waiting``) execution.

    One query for a list page's workflows, by the ``(workflow_id, state)``
    index; the workflows list says "waiting for a signal" (R-WSIG-66) or
    "waiting for children" (R-CHD-21) for them, by the step. Needs the
    ``add_workflow_signals`` unit (the ``waiting`` state is stored only with
    it).
    """
    if not workflow_ids:
        return {}
    rows = session.execute(
        sa.select(execution_cls.workflow_id, execution_cls.step_name)
        .where(execution_cls.workflow_id.in_(workflow_ids))
        .where(execution_cls.state == StepExecutionState.WAITING.value)
    ).all()
    return {row.workflow_id: row.step_name for row in rows}
