"""The SQL of the admin's list filters: conditions, capped counts, id walks.

Part of the store layer (issue 15: every statement on geneva's two tables is
built in the store modules, ``tests/test_sql_ownership.py``). The admin
(:mod:`flask_geneva.admin.filters`, :mod:`flask_geneva.admin.executions`)
validates the query string and says which filters apply; the conditions that
need more than a column comparison, and the statements that count and walk the
matching rows, are built here. Everything here only reads (R-ADM-32).
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence
from datetime import UTC
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement

from flask_geneva.db.states import StepExecutionState

__all__ = [
    "ERROR_SEARCH_DEPTH",
    "ERROR_STATES",
    "RECOVERY_OUTCOMES",
    "IdAmong",
    "count_at_most",
    "error_class_matches",
    "error_text_contains",
    "has_overdue_execution",
    "hero_type_in",
    "id_or_hero_id_is",
    "latest_error_class_is",
    "latest_error_sources",
    "matching_workflow_count",
    "matching_workflow_id_batches",
    "recency",
]

#: Execution states that carry a recorded error in the error columns (R-SE-20:
#: the policy's fail/cancel leave ``failed``, its skip leaves ``skipped``;
#: reattempted executions keep theirs in metadata only, R-SE-21). Restricting to
#: them lets the state index find the few candidate rows among millions.
ERROR_STATES = ("failed", "skipped")
#: The error-text search reads this many of the newest recorded errors
#: (R-ADM-50): a bounded read, whatever the number of failures kept.
ERROR_SEARCH_DEPTH = 10_000
# Earlier than any stored time (MariaDB DATETIME starts at year 1000).
_EARLIEST = datetime(1000, 1, 1, tzinfo=UTC)


# -- conditions ----------------------------------------------------------------------


class IdAmong(ColumnElement[bool]):
    """The condition "``column`` is one of the values ``ids`` selects".

    ``column IN (<ids>)`` on most databases. On PostgreSQL it is written
    ``column = ANY(ARRAY(<ids>))``: the ids are read first, once, then looked up
    along ``column``'s index, whatever the planner estimates. With ``IN`` it
    trusts its estimate of how many ids there are, and for a filter whose rows it
    misjudges (the overdue executions: ``scheduled_for < now`` holds for nearly
    every execution but few scheduled ones; the recorded errors) it reads all
    1,000,000 workflows to join them, or every matching workflow to sort it,
    instead of walking the list's order (``bench/admin.py``, R-ADM-30).
    """

    inherit_cache = False  # the statements holding it are not cached
    type = sa.Boolean()

    def __init__(self, column: Any, ids: sa.Select[Any]) -> None:
        self.column = column
        self.ids = ids


@compiles(IdAmong)
def _id_among(element: IdAmong, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.column.in_(element.ids), **kw))


@compiles(IdAmong, "postgresql")
def _id_among_postgresql(element: IdAmong, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    ids = compiler.process(element.ids.scalar_subquery(), **kw)
    return f"{column} = ANY(ARRAY{ids})"


def has_overdue_execution(workflow_cls: Any, execution_cls: Any, now: datetime) -> Any:
    """The condition "the workflow has a ``scheduled`` execution due before ``now``".

    The workflows list's ``overdue`` filter (R-ADM-11).
    """
    return IdAmong(
        workflow_cls.id,
        sa.select(execution_cls.workflow_id).where(
            execution_cls.state == StepExecutionState.SCHEDULED.value,
            execution_cls.scheduled_for < now,
        ),
    )


def id_or_hero_id_is(workflow_cls: Any, key: Any) -> Any:
    """The condition "workflow id or hero id equals ``key``" (the list's search)."""
    return sa.or_(workflow_cls.id == key, workflow_cls.hero_id == key)


def hero_type_in(workflow_cls: Any, spellings: Sequence[str]) -> Any:
    """The condition "``hero_type`` is one of ``spellings``" (R-ADM-50).

    The admin passes every spelling of a typed hero type that differs only in
    case (the mapped models' hero types plus the typed text), so the
    ``(hero_type, hero_id)`` index still answers.
    """
    return workflow_cls.hero_type.in_(list(spellings))


def error_text_contains(workflow_cls: Any, execution_cls: Any, text: str) -> Any:
    """The condition "one of the newest recorded errors is the workflow's and has
    ``text`` in its message", ignoring case (R-ADM-50).

    Only ``failed`` and ``skipped`` executions with an error message carry a
    recorded error (R-SE-20). The search reads the newest
    :data:`ERROR_SEARCH_DEPTH` of them (by ``created_at``; ties at the oldest one
    searched are searched too), found at the
    end of ``index_geneva_drive_step_executions_recorded_errors`` (R-DM-16), so
    its cost does not grow with the number of failures kept; older errors are
    not searched and the list says so. ``%``, ``_`` and the escape character in
    ``text`` match themselves.
    """
    created = execution_cls.created_at
    # The created_at of the DEPTH-th newest recorded error, read from the index
    # alone; with fewer recorded errors every one is searched. A subquery with
    # LIMIT in the IN list would do, but PostgreSQL misjudges how many rows
    # have a recorded error (state and error_message are not independent) and
    # then reads every one of them to sort them.
    cutoff = (
        sa.select(created)
        .where(_has_recorded_error(execution_cls))
        .order_by(created.desc(), execution_cls.id.desc())
        .offset(ERROR_SEARCH_DEPTH - 1)
        .limit(1)
        .scalar_subquery()
    )
    since = sa.func.coalesce(cutoff, sa.literal(_EARLIEST, created.type))
    return workflow_cls.id.in_(
        sa.select(execution_cls.workflow_id).where(
            _has_recorded_error(execution_cls),
            created >= since,
            execution_cls.error_message.icontains(text, autoescape=True),
        )
    )


def error_class_matches(column: Any, class_name: str) -> Any:
    """The condition "``column`` holds the error class ``class_name``" (R-SE-20).

    Stored class names are module-qualified unless builtin
    (``example_app.workflows.GatewayTimeout``, ``TimeoutError``). A name with a
    dot must equal the stored one. A bare name also matches that class in any
    module: ``column = name OR column LIKE '%.' || name``, with ``%``, ``_`` and
    the escape character of ``name`` escaped. LIKE ignores ASCII case on SQLite
    (and on MariaDB, whose default collation also makes ``=`` ignore it).

    Args:
        column: The ``error_class_name`` column (or a subquery's column of it).
        class_name: The filter value: no NUL byte, at most 255 characters.
    """
    if "." in class_name:
        return column == class_name
    return sa.or_(
        column == class_name, column.endswith(f".{class_name}", autoescape=True)
    )


def _has_recorded_error(execution_cls: Any) -> Any:
    return sa.and_(
        execution_cls.state.in_(ERROR_STATES),
        execution_cls.error_message.is_not(None),
    )


#: Outcomes of a completed execution that did its step's work: a later one of
#: these means the workflow recovered from an earlier error (R-ADM-124).
RECOVERY_OUTCOMES = ("success", "continued")


def _later_than(later: Any, created_at: Any, execution_id: Any) -> Any:
    """``later`` comes after ``(created_at, execution_id)`` in timeline order."""
    return sa.or_(
        later.created_at > created_at,
        sa.and_(later.created_at == created_at, later.id > execution_id),
    )


def _recovered_since(
    execution_cls: Any, workflow_id: Any, created_at: Any, execution_id: Any
) -> Any:
    """The workflow has a completed execution (outcome ``success`` or
    ``continued``) after ``(created_at, execution_id)``: it recovered from
    that error (R-ADM-124). Probed along the ``(workflow_id, created_at)``
    index."""
    later = orm.aliased(execution_cls)
    return sa.exists().where(
        later.workflow_id == workflow_id,
        later.state == StepExecutionState.COMPLETED.value,
        later.outcome.in_(RECOVERY_OUTCOMES),
        _later_than(later, created_at, execution_id),
    )


def _latest_error(execution_cls: Any) -> sa.Select[Any]:
    """Select executions with a recorded error, no later one of their workflow,
    and no recovery since.

    "Recorded error" means ``error_message`` is set (R-SE-20) on a ``failed`` or
    ``skipped`` execution; "later" orders by ``created_at`` then ``id``, so
    at most one execution per workflow qualifies; a later completed execution
    of any step (outcome ``success`` or ``continued``) clears it: the workflow
    recovered (R-ADM-124). Meant for a page of workflow ids (the correlated
    checks are probed per row).
    """
    later = orm.aliased(execution_cls)
    newer = sa.exists().where(
        later.workflow_id == execution_cls.workflow_id,
        _has_recorded_error(later),
        _later_than(later, execution_cls.created_at, execution_cls.id),
    )
    recovered = _recovered_since(
        execution_cls,
        execution_cls.workflow_id,
        execution_cls.created_at,
        execution_cls.id,
    )
    return sa.select(execution_cls.id).where(
        _has_recorded_error(execution_cls), ~newer, ~recovered
    )


def latest_error_class_is(
    workflow_cls: Any, execution_cls: Any, class_name: str
) -> Any:
    """The condition "the workflow's latest recorded error has class ``class_name``".

    Same definition as the list's error column (:func:`latest_error_sources`),
    a recovery clearing it (R-ADM-124), written with ``ROW_NUMBER()`` so the
    database ranks the (few) executions with a recorded error once instead of
    probing every workflow: on PostgreSQL with
    5,000,000 executions the filtered list stays well under R-ADM-30's 500 ms
    (``bench/admin.py``).
    """
    ranked = (
        sa.select(
            execution_cls.workflow_id,
            execution_cls.error_class_name,
            execution_cls.created_at,
            execution_cls.id,
            recency(execution_cls, execution_cls.workflow_id),
        )
        .where(_has_recorded_error(execution_cls))
        .subquery()
    )
    return IdAmong(
        workflow_cls.id,
        sa.select(ranked.c.workflow_id).where(
            ranked.c.recency == 1,
            error_class_matches(ranked.c.error_class_name, class_name),
            # A workflow that recovered has no latest error (R-ADM-124).
            ~_recovered_since(
                execution_cls,
                ranked.c.workflow_id,
                ranked.c.created_at,
                ranked.c.id,
            ),
        ),
    )


# -- reads ---------------------------------------------------------------------------


def latest_error_sources(
    session: orm.Session,
    execution_cls: Any,
    workflow_ids: Sequence[Any],
    *,
    has_error_class_column: bool,
    has_metadata_column: bool,
) -> list[tuple[Any, Any]]:
    """``(workflow id, class source)`` of each workflow's latest recorded error.

    One query for a page of workflows (R-ADM-11). The source is the
    ``error_class_name`` value, or without that column the ``metadata`` value
    (the class is in its ``"exception"`` entry, R-SE-20), or None without both.
    Workflows without a recorded error are absent.
    """
    if not workflow_ids:
        return []
    if has_error_class_column:
        source = execution_cls.error_class_name
    elif has_metadata_column:
        source = execution_cls.meta
    else:
        source = sa.null()
    latest = _latest_error(execution_cls).with_only_columns(
        execution_cls.workflow_id, source
    )
    rows = session.execute(
        latest.where(execution_cls.workflow_id.in_(list(workflow_ids)))
    ).all()
    return [(row[0], row[1]) for row in rows]


def count_at_most(session: orm.Session, query: sa.Select[Any], cap: int) -> int:
    """Count the rows of ``query``, reading at most ``cap + 1`` of them (R-ADM-30).

    Returns:
        The row count, or ``cap + 1`` when there are more than ``cap`` rows.
    """
    limited = query.limit(cap + 1).subquery()
    return int(session.scalar(sa.select(sa.func.count()).select_from(limited)) or 0)


def matching_workflow_count(
    session: orm.Session, workflow_cls: Any, conditions: Sequence[Any], cap: int
) -> int:
    """How many workflows match ``conditions``, up to ``cap + 1`` (R-ADM-30)."""
    return count_at_most(session, sa.select(workflow_cls.id).where(*conditions), cap)


def matching_workflow_id_batches(
    session: orm.Session,
    workflow_cls: Any,
    conditions: Sequence[Any],
    *,
    batch_size: int,
    created_until: datetime,
) -> Iterator[list[Any]]:
    """Yield the ids of matching workflows, ``batch_size`` at a time (R-ADM-23).

    Keyset pagination: each batch is ``WHERE <conditions> AND id > <last id>
    ORDER BY id LIMIT batch_size``, so workflows that stop matching while the
    caller acts on earlier batches shift nothing. Workflows created after
    ``created_until`` are left out. Each batch is read when the caller asks for
    it; the caller ends the reading transaction before acting.
    """
    base = (
        sa.select(workflow_cls.id)
        .where(*conditions)
        .where(workflow_cls.created_at <= created_until)
        .order_by(workflow_cls.id)
        .limit(batch_size)
    )
    last: Any = None
    while True:
        query = base if last is None else base.where(workflow_cls.id > last)
        ids = list(session.scalars(query))
        if not ids:
            return
        yield ids
        if len(ids) < batch_size:
            return
        last = ids[-1]


def recency(execution_cls: Any, partition_by: Any) -> Any:
    """``recency``: 1 for the newest execution of each ``partition_by`` group.

    Newest by ``created_at``, ties by id; a column of a ranked subquery whose
    ``recency == 1`` rows are the latest per group.

    Args:
        execution_cls: The ``StepExecution`` class.
        partition_by: Its column the groups are formed by.
    """
    return (
        sa.func.row_number()
        .over(
            partition_by=partition_by,
            order_by=(execution_cls.created_at.desc(), execution_cls.id.desc()),
        )
        .label("recency")
    )
