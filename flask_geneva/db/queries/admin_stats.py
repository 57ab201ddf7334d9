"""The admin's statistics reads: outcomes over time, step durations, oldest overdue.

Part of the store layer (issue 15: every statement on geneva's two tables is
built in the store modules, ``tests/test_sql_ownership.py``). Each read is
bounded by a time window on an indexed column (``finished_at``; ``state`` and
``scheduled_for``) or by a row limit, so its cost follows the window's rows, not
the table's (R-ADM-54, R-ADM-55, R-ADM-56). Everything here only reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState

__all__ = [
    "LOOKUP_SPAN",
    "OUTCOME_STATES",
    "oldest_overdue_execution",
    "outcome_counts",
    "recent_step_durations",
]

#: Ranges up to this long look each execution's class up by primary key (R-ADM-54).
LOOKUP_SPAN = timedelta(hours=3)
#: The end states counted over time: done (throughput) and failed (R-ADM-54).
OUTCOME_STATES = (StepExecutionState.COMPLETED.value, StepExecutionState.FAILED.value)


def outcome_counts(
    session: orm.Session,
    execution_cls: Any,
    workflow_cls: Any,
    edges: Sequence[datetime],
) -> list[tuple[str, int, str, int]]:
    """Completed and failed executions per class and time bucket (R-ADM-54).

    The ``finished_at`` index bounds the read to ``[edges[0], edges[-1])``; each
    execution falls in bucket ``i`` when ``edges[i] <= finished_at < edges[i+1]``
    (a portable ``CASE``, no dialect's date functions). Over at most
    :data:`LOOKUP_SPAN` each execution's workflow class is read by primary key
    (a correlated subquery); over a longer range the workflows are joined.

    Args:
        session: The host's session.
        execution_cls: The StepExecution model.
        workflow_cls: The Workflow model (for the class).
        edges: Ascending aware UTC bucket edges, at least two.

    Returns:
        ``(workflow type, bucket index, state, count)`` rows, state being
        ``completed`` or ``failed``.
    """
    finished = execution_cls.finished_at
    inner = edges[1:-1]
    # One bucket has no inner edge: a CASE with no WHEN is not SQL.
    bucket: Any = (
        sa.case(
            *[(finished < edge, index) for index, edge in enumerate(inner)],
            else_=len(edges) - 2,
        )
        if inner
        else sa.literal(0)
    )
    lookup = edges[-1] - edges[0] <= LOOKUP_SPAN
    type_column: Any = workflow_cls.type
    if lookup:
        # A short range (the hours the admin counts live) looks each
        # execution's class up by primary key: PostgreSQL's join plan hashed
        # all the workflows (~480 ms for two hours at 1,000,000 workflows, ~70
        # ms so; bench/admin.py). A day's range joins: the parallel hash join
        # beats 400,000 lookups made one by one.
        type_column = (
            sa.select(workflow_cls.type)
            .where(workflow_cls.id == execution_cls.workflow_id)
            .correlate(execution_cls)
            .scalar_subquery()
        )
    rows = (
        sa.select(
            type_column.label("type"),
            bucket.label("bucket"),
            execution_cls.state.label("state"),
        )
        .where(finished >= edges[0], finished < edges[-1])
        .where(execution_cls.state.in_(OUTCOME_STATES))
    )
    if not lookup:
        rows = rows.join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
    outcomes = rows.subquery("outcomes")
    query = sa.select(
        outcomes.c.type, outcomes.c.bucket, outcomes.c.state, sa.func.count()
    ).group_by(outcomes.c.type, outcomes.c.bucket, outcomes.c.state)
    dialect = session.get_bind(mapper=execution_cls).dialect
    if (
        lookup
        and dialect.name == "postgresql"
        and (dialect.server_version_info or ()) >= (11,)
    ):
        # The lookups are costed high enough to JIT-compile the plan: ~90 ms
        # added to a ~70 ms read of two hours (PostgreSQL 11+ has JIT). Off
        # for this transaction only (SET LOCAL ends with it); the admin's and
        # housekeeping's other short reads do not need it either.
        session.execute(sa.text("SET LOCAL jit = off"))
    return [
        (str(type_name), int(index), str(state), int(count))
        for type_name, index, state, count in session.execute(query)
    ]


def recent_step_durations(
    session: orm.Session,
    execution_cls: Any,
    workflow_cls: Any,
    type_name: str,
    *,
    since: datetime,
    limit: int,
    scan: int,
) -> list[tuple[str, datetime, datetime]]:
    """A class's executions among the latest completed ones since ``since`` (R-ADM-55).

    The latest ``scan`` completed executions of every class are read newest first
    along the ``finished_at`` index, and of those the class's first ``limit``
    are returned. Bounding the walk keeps a rare class's page as cheap as a
    common one's: without it, a class with 5 % of the executions walked about
    100,000 index entries, each looked up in the workflows table, to fill
    ``limit`` (``bench/admin.py``).

    Returns:
        ``(step name, started_at, finished_at)`` rows, newest first.
    """
    recent = (
        sa.select(
            execution_cls.workflow_id,
            execution_cls.step_name,
            execution_cls.started_at,
            execution_cls.finished_at,
        )
        .where(execution_cls.state == StepExecutionState.COMPLETED.value)
        .where(execution_cls.finished_at >= since)
        .where(execution_cls.started_at.is_not(None))
        .order_by(execution_cls.finished_at.desc())
        .limit(scan)
        .subquery("recent_completed")
    )
    query = (
        sa.select(recent.c.step_name, recent.c.started_at, recent.c.finished_at)
        .join(workflow_cls, workflow_cls.id == recent.c.workflow_id)
        .where(workflow_cls.type == type_name)
        .order_by(recent.c.finished_at.desc())
        .limit(limit)
    )
    return [(str(name), start, end) for name, start, end in session.execute(query)]


def oldest_overdue_execution(
    session: orm.Session, execution_cls: Any, workflow_cls: Any, now: datetime
) -> Any:
    """The scheduled execution due longest ago of a ready or performing workflow.

    R-ADM-56.

    Read off the ``(state, scheduled_for)`` index's start; a paused workflow's
    preserved execution does not count (it waits for ``resume``).

    Returns:
        A row with ``id``, ``workflow_id``, ``step_name``, ``scheduled_for``,
        ``job_id`` and ``type``, or None when nothing is overdue.
    """
    query = (
        sa.select(
            execution_cls.id,
            execution_cls.workflow_id,
            execution_cls.step_name,
            execution_cls.scheduled_for,
            execution_cls.job_id,
            workflow_cls.type,
        )
        .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
        .where(execution_cls.state == StepExecutionState.SCHEDULED.value)
        .where(execution_cls.scheduled_for < now)
        .where(
            workflow_cls.state.in_(
                (WorkflowState.READY.value, WorkflowState.PERFORMING.value)
            )
        )
        .order_by(execution_cls.scheduled_for.asc(), execution_cls.id.asc())
        .limit(1)
    )
    return session.execute(query).first()
