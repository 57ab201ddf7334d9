"""Keyset pagination of the admin's lists and planner estimates of their counts.

Part of the store layer (issue 15: every statement on geneva's tables is built
in the store modules). A list page is read from a *position*: the sort key of
the row a link was made from (its sort column's value and its id), never by
skipping rows with ``OFFSET``, so a page 30,000 rows in costs what the first
page costs: the rows are read along the index of the list's order from the
position on (R-ADM-150). Everything here only reads (R-ADM-32).

The position condition is a row-value comparison, ``(sort, id) < (:value,
:id)``, on PostgreSQL and SQLite, whose planners read it as a range of a
``(sort, id)`` index; MySQL and MariaDB do not use an index for a row-value
range, so there it is written ``sort <= :value AND (sort < :value OR id <
:id)`` (their secondary indexes end with the primary key, so an index on the
sort column is one on ``(sort, id)``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ClauseElement
from sqlalchemy.sql.expression import Executable

__all__ = [
    "KeysetOrder",
    "Position",
    "keyset_rows",
    "planner_row_estimate",
    "row_beyond",
]


@dataclasses.dataclass(frozen=True)
class KeysetOrder:
    """A list's order: by ``column`` then ``id_column``, both one way.

    Attributes:
        column: The sort column (the id column itself for an id sort).
        id_column: The primary key column: the tie-breaker.
        descending: Newest (largest) first.
        nullable: The sort column can be NULL. Its NULL rows then come after
            every row with a value, in either direction, ordered by id the same
            way (R-ADM-151), whatever the database's own NULL order.
    """

    column: Any
    id_column: Any
    descending: bool
    nullable: bool = False

    @property
    def by_id(self) -> bool:
        """Whether the list is sorted by the id alone."""
        return self.column is self.id_column


@dataclasses.dataclass(frozen=True)
class Position:
    """The sort key of one row: where a page starts or ends (R-ADM-150).

    Attributes:
        value: The row's sort column value (None: the column is NULL; ignored
            for an id sort).
        id: The row's id.
    """

    value: Any
    id: Any


def row_beyond(
    column: Any,
    id_column: Any,
    value: Any,
    key: Any,
    *,
    descending: bool,
    dialect: str,
) -> Any:
    """The condition "``(column, id_column)`` is beyond ``(value, key)``".

    Beyond is smaller with ``descending``, else larger. A row-value comparison
    on PostgreSQL and SQLite; on MySQL/MariaDB, whose optimizers use an index
    only for that form, ``column <= value AND (column < value OR id < key)``.

    Args:
        column: The sort column.
        id_column: The primary key column.
        value: The position's sort value (not None).
        key: The position's id.
        descending: Beyond means smaller.
        dialect: The database's dialect name.
    """
    bound = sa.literal(value, column.type)
    bound_key = sa.literal(key, id_column.type)
    if dialect in ("mysql", "mariadb"):
        if descending:
            return sa.and_(
                column <= bound, sa.or_(column < bound, id_column < bound_key)
            )
        return sa.and_(column >= bound, sa.or_(column > bound, id_column > bound_key))
    left = sa.tuple_(column, id_column)
    right = sa.tuple_(bound, bound_key)
    return left < right if descending else left > right


def _beyond_id(id_column: Any, key: Any, descending: bool) -> Any:
    return id_column < key if descending else id_column > key


def _ordering(columns: Sequence[Any], descending: bool) -> list[Any]:
    return [column.desc() if descending else column.asc() for column in columns]


def _whole_ordering(order: KeysetOrder) -> list[Any]:
    """The list's order in one ORDER BY (the NULL rows last, as the parts read)."""
    columns = [order.id_column] if order.by_id else [order.column, order.id_column]
    ordering = _ordering(columns, order.descending)
    if order.nullable and not order.by_id:
        # 0 for a value, 1 for NULL, whatever the database's own NULL order.
        ordering.insert(0, sa.case((order.column.is_(None), 1), else_=0))
    return ordering


def _segments(
    order: KeysetOrder, position: Position | None, backward: bool, dialect: str
) -> list[tuple[list[Any], list[Any]]]:
    """``(conditions, ordering)`` of each part of the list read from ``position``.

    The list reads as the rows with a sort value, then (a nullable column) the
    rows without one. Read forward from a position the parts come in that
    order; backward (``before``) in the reverse order, each read reversed.
    """
    reading_desc = order.descending != backward
    column, id_column = order.column, order.id_column
    if order.by_id:
        conditions = []
        if position is not None:
            conditions.append(_beyond_id(id_column, position.id, reading_desc))
        return [(conditions, _ordering([id_column], reading_desc))]
    valued_order = _ordering([column, id_column], reading_desc)
    valued: list[Any] = [column.is_not(None)] if order.nullable else []
    # All NULL, so ordered by id; the sort column is named too, so the read is
    # one range of the (column, id) index, not a walk of the primary key past
    # the rows with a value (PostgreSQL judges NULLs spread evenly by id).
    null_part = (
        [column.is_(None)],
        _ordering([column, id_column], reading_desc),
    )
    if position is None:
        parts = [(valued, valued_order)]
        if order.nullable:
            parts.append(null_part)
        return list(reversed(parts)) if backward else parts
    if position.value is None:
        # A position among the NULL rows (only a nullable column has them).
        nulls = (
            [*null_part[0], _beyond_id(id_column, position.id, reading_desc)],
            null_part[1],
        )
        return [nulls, (valued, valued_order)] if backward else [nulls]
    beyond = row_beyond(
        column,
        id_column,
        position.value,
        position.id,
        descending=reading_desc,
        dialect=dialect,
    )
    parts = [([*valued, beyond], valued_order)]
    if order.nullable and not backward:
        parts.append(null_part)
    return parts


def keyset_rows(
    session: orm.Session,
    statement: sa.Select[Any],
    order: KeysetOrder,
    *,
    after: Position | None = None,
    before: Position | None = None,
    limit: int,
    offset: int = 0,
    scalars: bool = False,
) -> list[Any]:
    """Up to ``limit`` rows of ``statement`` in ``order`` from a position (R-ADM-150).

    With ``after``: the rows that follow it in the list's order; with
    ``before``: the ``limit`` rows just before it, returned in the list's order;
    with neither: the list's first rows (after ``offset`` rows, for a bookmarked
    ``?page=N`` without a position, R-ADM-151). From a position there is no
    ``OFFSET``: each part is one ``ORDER BY ... LIMIT`` read along the order's
    index from the position.

    Args:
        session: The admin's session.
        statement: The list's select with its filters, without ORDER BY/LIMIT.
        order: The list's order.
        after: Read the rows after this position.
        before: Read the rows before this position (not with ``after``).
        limit: The most rows returned (pass a page plus one to tell whether
            there are more that way).
        offset: Rows skipped, only without a position.
        scalars: Return the first column of each row (an entity) instead of rows.

    Raises:
        ValueError: Both ``after`` and ``before`` are given, or an ``offset``
            with either.
    """
    if after is not None and before is not None:
        raise ValueError("keyset_rows takes after or before, not both")
    backward = before is not None
    if offset:
        if backward or after is not None:
            raise ValueError("keyset_rows takes an offset only without a position")
        query = statement.order_by(*_whole_ordering(order)).limit(limit).offset(offset)
        result = session.scalars(query) if scalars else session.execute(query)
        return list(result.all())
    rows: list[Any] = []
    dialect = session.get_bind().dialect.name
    for conditions, ordering in _segments(order, before or after, backward, dialect):
        wanted = limit - len(rows)
        if wanted <= 0:
            break
        query = statement.where(*conditions).order_by(*ordering).limit(wanted)
        result = session.scalars(query) if scalars else session.execute(query)
        rows.extend(result.all())
    if backward:
        rows.reverse()
    return rows


class _Explain(Executable, ClauseElement):
    """``EXPLAIN (FORMAT JSON) <statement>`` (PostgreSQL)."""

    inherit_cache = False

    def __init__(self, statement: sa.Select[Any]) -> None:
        self.statement = statement


@compiles(_Explain, "postgresql")
def _explain(element: _Explain, compiler: Any, **kw: Any) -> str:
    return "EXPLAIN (FORMAT JSON) " + str(compiler.process(element.statement, **kw))


def planner_row_estimate(
    session: orm.Session, statement: sa.Select[Any], *, table: Any, above: int
) -> int | None:
    """The planner's estimate of the rows ``statement`` returns, or None (R-ADM-152).

    PostgreSQL only: ``EXPLAIN (FORMAT JSON)`` of the statement (planned, not
    run), the top plan node's ``Plan Rows``. For an unfiltered table that is
    ``pg_class.reltuples`` scaled to the table's current size; with filters,
    the planner's selectivity estimate from the table's statistics. None on
    other databases, and when ``table``'s statistics know ``above`` rows or
    fewer (``reltuples``: -1 for a table never analyzed, or the row count of
    its last analysis): the planner would then guess from the table's size in
    pages, not estimate from what it measured.

    Args:
        session: The admin's session.
        statement: The list's filtered select, without LIMIT.
        table: The list's table (a ``sa.Table``).
        above: The count's cap: the table's statistics must know more rows.
    """
    if session.get_bind().dialect.name != "postgresql":
        return None
    known = session.execute(
        sa.text("SELECT reltuples FROM pg_class WHERE oid = to_regclass(:name)"),
        {"name": table.name},
    ).scalar()
    if known is None or float(known) <= above:
        return None
    raw = session.execute(_Explain(statement)).scalar()
    plan: Any = json.loads(raw) if isinstance(raw, str) else raw
    try:
        return int(plan[0]["Plan"]["Plan Rows"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
