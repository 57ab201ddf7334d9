"""The reads of the admin pages and the operators' CLI (R-ADM-10..14, CLI).

Part of the store layer (issue 15: every statement on geneva's two tables is
built in the store modules, ``tests/test_sql_ownership.py``). The pages in
:mod:`flask_geneva.admin` and the commands in :mod:`flask_geneva.cli` decide
what to show; this module reads it. Everything here only reads: plain selects,
no row locks (R-ADM-32). The SQL of the list filters is in
:mod:`flask_geneva.db.queries.admin_filters`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.heroes import hero_type_spellings
from flask_geneva.db.optional_columns import undefer_options
from flask_geneva.db.queries.admin_filters import count_at_most
from flask_geneva.db.queries.admin_filters import recency
from flask_geneva.db.queries.keyset import KeysetOrder
from flask_geneva.db.queries.keyset import Position
from flask_geneva.db.queries.keyset import keyset_rows
from flask_geneva.db.queries.keyset import planner_row_estimate
from flask_geneva.db.states import StepExecutionState

__all__ = [
    "count_execution_list",
    "count_executions",
    "count_failed_executions",
    "count_workflow_executions",
    "estimate_execution_list",
    "estimate_workflow_list",
    "execution_chain",
    "execution_list_page",
    "execution_neighbours",
    "execution_order",
    "in_progress_execution",
    "in_progress_execution_id",
    "latest_execution_per_step",
    "latest_failures",
    "load_execution",
    "load_workflow",
    "next_runs",
    "timeline_executions",
    "workflow_counts_by_type_and_state",
    "workflow_list_page",
    "workflow_rows",
    "workflow_type_and_state",
    "workflow_types_stored",
]


# -- workflows -----------------------------------------------------------------------


def load_workflow(session: orm.Session, workflow_cls: Any, workflow_id: Any) -> Any:
    """The workflow as stored now, with every optional column, or None (R-ADM-12).

    Re-read (``populate_existing``) even if the session saw the row earlier.
    """
    return _reread(
        session, workflow_cls, workflow_id, undefer_options(session, workflow_cls, None)
    )


def workflow_list_page(
    session: orm.Session,
    workflow_cls: Any,
    conditions: Sequence[Any],
    *,
    order: KeysetOrder,
    after: Position | None = None,
    before: Position | None = None,
    limit: int,
    offset: int = 0,
) -> list[Any]:
    """One page of the workflows list: workflows matching ``conditions`` (R-ADM-11).

    Read from a position along the order's index (R-ADM-150), see
    :func:`~flask_geneva.db.queries.keyset.keyset_rows`.

    Args:
        session: The admin's session.
        workflow_cls: The ``Workflow`` class.
        conditions: The validated filters' conditions.
        order: The chosen sort, then the id.
        after: Read the rows after this position.
        before: Read the rows before this position.
        limit: Rows to read (a page plus one tells whether more exist).
        offset: Rows to skip, only without a position (a bookmarked page).
    """
    return keyset_rows(
        session,
        sa.select(workflow_cls).where(*conditions),
        order,
        after=after,
        before=before,
        limit=limit,
        offset=offset,
        scalars=True,
    )


def estimate_workflow_list(
    session: orm.Session, workflow_cls: Any, conditions: Sequence[Any], *, cap: int
) -> int | None:
    """The planner's estimate of the workflows matching ``conditions``
    (PostgreSQL, with statistics of more than ``cap`` workflows; else None,
    R-ADM-152)."""
    return planner_row_estimate(
        session,
        sa.select(workflow_cls.id).where(*conditions),
        table=workflow_cls.__table__,
        above=cap,
    )


def workflow_type_and_state(
    session: orm.Session, workflow_cls: Any, workflow_id: Any
) -> Any:
    """The ``(type, state)`` row of one workflow, or None when it is gone."""
    return session.execute(
        sa.select(workflow_cls.type, workflow_cls.state).where(
            workflow_cls.id == workflow_id
        )
    ).first()


def workflow_counts_by_type_and_state(
    session: orm.Session, workflow_cls: Any
) -> list[tuple[Any, Any, int]]:
    """``(type, state, count)`` rows, ordered by type (R-ADM-10)."""
    rows = session.execute(
        sa.select(workflow_cls.type, workflow_cls.state, sa.func.count())
        .group_by(workflow_cls.type, workflow_cls.state)
        .order_by(workflow_cls.type)
    ).all()
    return [(row[0], row[1], int(row[2])) for row in rows]


def workflow_rows(
    session: orm.Session,
    workflow_cls: Any,
    columns: Sequence[str],
    *,
    state: str | None,
    type_name: str | None,
    hero: tuple[str, Any] | None,
    limit: int,
) -> list[Any]:
    """Rows of the named workflow columns, newest id first (``flask geneva list``).

    Reads only ``columns`` from the table, so a table without an optional
    column still lists (R-DM-30..32).

    Args:
        session: The CLI's session.
        workflow_cls: The ``Workflow`` class.
        columns: Column names to read.
        state: Only this state, or None.
        type_name: Only this stored ``type``, or None.
        hero: Only this ``(hero_type, hero_id)``, or None; the type in any case.
        limit: At most this many rows.

    Returns:
        Row mappings (``row["id"]``...).
    """
    table = workflow_cls.__table__
    query = (
        sa.select(*(table.c[name] for name in columns))
        .order_by(table.c.id.desc())
        .limit(limit)
    )
    if state is not None:
        query = query.where(table.c.state == state)
    if type_name is not None:
        query = query.where(table.c.type == type_name)
    if hero is not None:
        # Any case of the hero type (R-ADM-50), as the admin's search.
        query = query.where(
            table.c.hero_type.in_(hero_type_spellings(workflow_cls, hero[0]))
        ).where(table.c.hero_id == hero[1])
    return list(session.execute(query).mappings())


# -- executions ----------------------------------------------------------------------


def load_execution(session: orm.Session, execution_cls: Any, key: Any) -> Any:
    """One execution with every optional column this database has, or None (R-DM-32).

    Re-read (``populate_existing``) even if the session saw the row earlier.
    """
    return _reread(
        session, execution_cls, key, undefer_options(session, None, execution_cls)
    )


def _reread(session: orm.Session, model: Any, key: Any, options: Sequence[Any]) -> Any:
    # populate_existing: the stored values replace what the session saw earlier.
    return session.scalars(
        sa.select(model)
        .where(model.id == key)
        .options(*options)
        .execution_options(populate_existing=True)
    ).one_or_none()


def timeline_executions(
    session: orm.Session,
    execution_cls: Any,
    workflow_id: Any,
    *,
    limit: int,
    offset: int = 0,
    upto: tuple[Any, Any] | None = None,
) -> list[Any]:
    """The workflow's executions, newest first, ``limit`` from ``offset`` (R-ADM-12).

    Timeline order is ``(created_at, id)``; ``offset`` 0 starts at the newest,
    or with ``upto`` (a ``(created_at, id)`` from :func:`timeline_anchor`) at
    that execution, so executions created since do not shift the pages
    (R-ADM-57). With every optional column, re-read even if the session saw
    them earlier.
    """
    return list(
        session.scalars(
            sa.select(execution_cls)
            .where(
                execution_cls.workflow_id == workflow_id,
                *_up_to(execution_cls, upto),
            )
            .options(*undefer_options(session, None, execution_cls))
            .order_by(execution_cls.created_at.desc(), execution_cls.id.desc())
            .limit(limit)
            .offset(offset)
            .execution_options(populate_existing=True)
        )
    )


def _up_to(execution_cls: Any, upto: tuple[Any, Any] | None) -> list[Any]:
    """The condition "at or before ``upto`` in timeline order", or none."""
    if upto is None:
        return []
    created_at, execution_id = upto
    return [
        sa.or_(
            execution_cls.created_at < created_at,
            sa.and_(
                execution_cls.created_at == created_at,
                execution_cls.id <= execution_id,
            ),
        )
    ]


def timeline_anchor(
    session: orm.Session, execution_cls: Any, workflow_id: Any, execution_id: Any
) -> tuple[Any, Any] | None:
    """``(created_at, id)`` of the workflow's execution ``execution_id``, or None.

    The position a paged timeline counts from (R-ADM-57); None when the
    execution is not the workflow's (or is gone).
    """
    row = session.execute(
        sa.select(execution_cls.created_at, execution_cls.id).where(
            execution_cls.workflow_id == workflow_id,
            execution_cls.id == execution_id,
        )
    ).first()
    return None if row is None else (row[0], row[1])


def count_workflow_executions(
    session: orm.Session,
    execution_cls: Any,
    workflow_id: Any,
    cap: int,
    upto: tuple[Any, Any] | None = None,
) -> int:
    """How many executions the workflow has (at or before ``upto``), counting
    at most ``cap + 1`` (R-ADM-30)."""
    return count_at_most(
        session,
        sa.select(execution_cls.id).where(
            execution_cls.workflow_id == workflow_id, *_up_to(execution_cls, upto)
        ),
        cap,
    )


def latest_execution_per_step(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> list[Any]:
    """Each step name's latest execution of the workflow, oldest first (R-ADM-12).

    The step plan's markers: one ``(step_name, state)`` row per step name the
    workflow ran, whatever the number of its executions, in timeline order
    ``(created_at, id)`` of those latest executions (a renamed step's old and new
    names then resolve in the order they ran).
    """
    ranked = (
        sa.select(
            execution_cls.step_name,
            execution_cls.state,
            execution_cls.created_at,
            execution_cls.id,
            recency(execution_cls, execution_cls.step_name),
        )
        .where(execution_cls.workflow_id == workflow_id)
        .subquery()
    )
    return list(
        session.execute(
            sa.select(ranked.c.step_name, ranked.c.state)
            .where(ranked.c.recency == 1)
            .order_by(ranked.c.created_at, ranked.c.id)
        ).all()
    )


def in_progress_execution(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> Any:
    """The workflow's ``in_progress`` execution, or None; a plain read, no lock."""
    return session.scalars(
        sa.select(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.state == StepExecutionState.IN_PROGRESS)
        .limit(1)
    ).first()


def in_progress_execution_id(
    session: orm.Session, execution_cls: Any, workflow_id: Any
) -> Any:
    """The id of the workflow's ``in_progress`` execution, or None; no lock."""
    return session.scalar(
        sa.select(execution_cls.id)
        .where(execution_cls.workflow_id == workflow_id)
        .where(execution_cls.state == StepExecutionState.IN_PROGRESS)
    )


def execution_list_page(
    session: orm.Session,
    execution_cls: Any,
    workflow_cls: Any,
    criteria: Sequence[Any],
    *,
    after: Position | None = None,
    before: Position | None = None,
    limit: int,
    offset: int = 0,
) -> list[Any]:
    """One page of the executions list, newest id first (R-ADM-13).

    Read from a position along the primary key (R-ADM-150), see
    :func:`~flask_geneva.db.queries.keyset.keyset_rows`.

    Returns:
        ``(execution, workflow type, workflow state)`` rows of executions
        matching ``criteria`` (conditions on either class), with every optional
        column; the state tells a paused workflow's preserved execution
        (R-ADM-120).
    """
    return keyset_rows(
        session,
        sa.select(execution_cls, workflow_cls.type, workflow_cls.state)
        .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
        .where(*criteria)
        .options(*undefer_options(session, None, execution_cls)),
        execution_order(execution_cls),
        after=after,
        before=before,
        limit=limit,
        offset=offset,
    )


def execution_order(execution_cls: Any) -> KeysetOrder:
    """The executions list's order: newest id first (R-ADM-13, R-ADM-150)."""
    return KeysetOrder(execution_cls.id, execution_cls.id, descending=True)


def _execution_count_statement(
    execution_cls: Any, workflow_cls: Any, criteria: Sequence[Any], join: bool
) -> sa.Select[Any]:
    statement = sa.select(execution_cls.id)
    if join:
        statement = statement.join(
            workflow_cls, workflow_cls.id == execution_cls.workflow_id
        )
    return statement.where(*criteria)


def estimate_execution_list(
    session: orm.Session,
    execution_cls: Any,
    workflow_cls: Any,
    criteria: Sequence[Any],
    *,
    join_workflows: bool,
    cap: int,
) -> int | None:
    """The planner's estimate of the executions matching ``criteria``
    (PostgreSQL, with statistics of more than ``cap`` executions; else None,
    R-ADM-152); arguments as :func:`count_execution_list`."""
    return planner_row_estimate(
        session,
        _execution_count_statement(
            execution_cls, workflow_cls, criteria, join_workflows
        ),
        table=execution_cls.__table__,
        above=cap,
    )


def count_execution_list(
    session: orm.Session,
    execution_cls: Any,
    workflow_cls: Any,
    criteria: Sequence[Any],
    *,
    cap: int,
    join_workflows: bool,
) -> int:
    """How many executions the list's ``criteria`` match, reading at most
    ``cap + 1`` of them (R-ADM-127, R-ADM-30).

    Args:
        join_workflows: Whether ``criteria`` name the workflows' columns (the
            class filter); else the executions are counted alone.

    Returns:
        The count, or ``cap + 1`` when more than ``cap`` match.
    """
    return count_at_most(
        session,
        _execution_count_statement(
            execution_cls, workflow_cls, criteria, join_workflows
        ),
        cap,
    )


def count_executions(
    session: orm.Session, execution_cls: Any, criteria: Sequence[Any]
) -> int:
    """How many executions match ``criteria`` (the overview's stuck counts)."""
    return int(
        session.scalar(
            sa.select(sa.func.count()).select_from(execution_cls).where(*criteria)
        )
        or 0
    )


def count_failed_executions(session: orm.Session, execution_cls: Any, cap: int) -> int:
    """How many executions are ``failed``, counting at most ``cap + 1`` (R-ADM-30)."""
    return count_at_most(
        session,
        sa.select(execution_cls.id).where(
            execution_cls.state == StepExecutionState.FAILED.value
        ),
        cap,
    )


def latest_failures(
    session: orm.Session, execution_cls: Any, workflow_cls: Any, *, limit: int
) -> list[Any]:
    """The newest ``failed`` executions with their workflow's type (R-ADM-10).

    ``finished_at`` equals ``failed_at`` on a failed row (R-SE-02) and is
    indexed: the newest failures are read off the index's end instead of
    sorting every failed row (R-ADM-30).

    Returns:
        ``(execution, workflow type)`` rows, newest first.
    """
    return list(
        session.execute(
            sa.select(execution_cls, workflow_cls.type)
            .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
            .where(execution_cls.state == StepExecutionState.FAILED.value)
            .where(execution_cls.finished_at.is_not(None))
            .options(*undefer_options(session, None, execution_cls))
            .order_by(execution_cls.finished_at.desc(), execution_cls.id.desc())
            .limit(limit)
        ).all()
    )


def execution_neighbours(
    session: orm.Session, execution_cls: Any, execution: Any
) -> tuple[Any, Any]:
    """``(previous, next)`` execution of the workflow in timeline order (R-ADM-14).

    Timeline order is ``(created_at, id)``, as on the workflow page. Each is an
    ``(id, step_name, state)`` row, or None.
    """
    cls = execution_cls
    picked = sa.select(cls.id, cls.step_name, cls.state).where(
        cls.workflow_id == execution.workflow_id
    )
    created, key = execution.created_at, execution.id
    before = session.execute(
        picked.where(
            sa.or_(
                cls.created_at < created,
                sa.and_(cls.created_at == created, cls.id < key),
            )
        )
        .order_by(cls.created_at.desc(), cls.id.desc())
        .limit(1)
    ).first()
    after = session.execute(
        picked.where(
            sa.or_(
                cls.created_at > created,
                sa.and_(cls.created_at == created, cls.id > key),
            )
        )
        .order_by(cls.created_at.asc(), cls.id.asc())
        .limit(1)
    ).first()
    return before, after


def execution_chain(
    session: orm.Session, execution_cls: Any, execution: Any
) -> tuple[Any, list[Any]]:
    """``(predecessor, successors)`` of a resumable execution (R-SE-40, R-ADM-14).

    Each is an ``(id, step_name, state)`` row; the predecessor is None when the
    execution continues none or its row is gone; successors by id. Needs the
    ``continues_from_id`` column.
    """
    cls = execution_cls
    picked = sa.select(cls.id, cls.step_name, cls.state)
    predecessor = None
    if execution.continues_from_id is not None:
        predecessor = session.execute(
            picked.where(cls.id == execution.continues_from_id)
        ).first()
    successors = list(
        session.execute(
            picked.where(cls.continues_from_id == execution.id).order_by(cls.id)
        )
    )
    return predecessor, successors


def next_runs(
    session: Any, execution_cls: Any, workflow_ids: list[Any]
) -> dict[Any, Any]:
    """When each listed workflow's scheduled execution is due (R-ADM-44).

    One query for the page's workflows, by the ``(workflow_id, state)`` index.

    Returns:
        ``{workflow id: scheduled_for}`` for the workflows with a scheduled
        execution; the others are absent.
    """
    if not workflow_ids:
        return {}
    rows = session.execute(
        sa.select(execution_cls.workflow_id, sa.func.min(execution_cls.scheduled_for))
        .where(execution_cls.workflow_id.in_(workflow_ids))
        .where(execution_cls.state == StepExecutionState.SCHEDULED.value)
        .group_by(execution_cls.workflow_id)
    ).all()
    return {row[0]: row[1] for row in rows}


def workflow_types_stored(
    session: orm.Session, workflow_cls: Any, limit: int = 500
) -> list[str]:
    """The distinct ``type`` values in the workflows table, sorted (R-ADM-50).

    A loose index scan on ``index_geneva_drive_workflows_on_type``: a recursive
    query jumps from one type to the next greater one, one index probe per
    class, so the cost grows with the number of classes, not of workflows.

    Args:
        session: The host's session.
        workflow_cls: The Workflow model.
        limit: At most this many types are returned.
    """
    column = workflow_cls.__table__.c.type
    seed = sa.select(sa.func.min(column).label("type")).cte(
        "stored_types", recursive=True
    )
    later = sa.select(sa.func.min(column)).where(column > seed.c.type).scalar_subquery()
    walk = seed.union_all(sa.select(later).where(seed.c.type.is_not(None)))
    query = sa.select(walk.c.type).where(walk.c.type.is_not(None)).limit(limit)
    return sorted(str(name) for name in session.scalars(query))
