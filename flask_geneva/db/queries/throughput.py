"""The overview's throughput read: executions finished per time bucket and
outcome (R-ADM-130).

Part of the store layer (every statement on geneva's tables is built under
``db/``, ``tests/test_sql_ownership.py``). One grouped statement per chart:
:func:`finished_counts` reads the ``finished_at`` index range ``[start, end)``
(a plain range condition on the indexed column, no function around it) and
groups by the bucket each row falls in and its outcome. The bucket is the
finishing time cut to the minute or the hour with the database's own function
(:class:`TimeBucket`: ``strftime`` on SQLite, ``to_char`` on PostgreSQL,
``DATE_FORMAT`` on MySQL and MariaDB), written as the same text on every
database. (The overview's chart of the work in flight per class draws the
class x state counts it reads anyway, R-ADM-131.)

Everything here only reads (R-ADM-32).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement

__all__ = [
    "BUCKET_UNITS",
    "TimeBucket",
    "finished_counts",
    "parse_bucket",
]

#: The bucket units and the text each bucket is written as (UTC).
BUCKET_UNITS = {"minute": "%Y-%m-%d %H:%M", "hour": "%Y-%m-%d %H"}
_POSTGRESQL_FORMATS = {"minute": "YYYY-MM-DD HH24:MI", "hour": "YYYY-MM-DD HH24"}
_MYSQL_FORMATS = {"minute": "%Y-%m-%d %H:%i", "hour": "%Y-%m-%d %H"}


class TimeBucket(ColumnElement[str]):
    """A UTC time column cut to the minute or the hour, as text.

    ``"2026-12-07 14:05"`` (minute) or ``"2026-12-07 14"`` (hour) on every
    database: ``strftime`` on SQLite (the column holds ISO text), ``to_char``
    on PostgreSQL and ``DATE_FORMAT`` on MySQL and MariaDB (the columns hold
    naive UTC, R-DM-23, so no time zone enters). :func:`parse_bucket` reads it
    back.

    Args:
        column: The time column (``finished_at``).
        unit: ``"minute"`` or ``"hour"``.

    Raises:
        ValueError: ``unit`` is neither, naming the allowed ones.
    """

    inherit_cache = False  # the statements holding it are not cached
    type = sa.String()

    def __init__(self, column: Any, unit: str) -> None:
        if unit not in BUCKET_UNITS:
            raise ValueError(
                f"unknown bucket unit {unit!r}; allowed: {', '.join(BUCKET_UNITS)}"
            )
        self.column = column
        self.unit = unit


@compiles(TimeBucket)
def _bucket_sqlite(element: TimeBucket, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    return f"strftime('{BUCKET_UNITS[element.unit]}', {column})"


@compiles(TimeBucket, "postgresql")
def _bucket_postgresql(element: TimeBucket, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    return f"to_char({column}, '{_POSTGRESQL_FORMATS[element.unit]}')"


@compiles(TimeBucket, "mysql")
@compiles(TimeBucket, "mariadb")
def _bucket_mysql(element: TimeBucket, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.column, **kw)
    # The driver formats the statement with %: a literal % is written %%.
    text = _MYSQL_FORMATS[element.unit].replace("%", "%%")
    return f"DATE_FORMAT({column}, '{text}')"


def parse_bucket(text: str, unit: str) -> datetime:
    """The aware UTC start of a bucket written by :class:`TimeBucket`."""
    return datetime.strptime(str(text), BUCKET_UNITS[unit]).replace(tzinfo=UTC)


def finished_counts(
    session: orm.Session,
    execution_cls: Any,
    *,
    start: datetime,
    end: datetime,
    unit: str,
) -> list[tuple[datetime, str, int]]:
    """Executions that finished in ``[start, end)`` per bucket and outcome.

    One grouped statement (R-ADM-130): ``finished_at >= start AND finished_at
    < end`` bounds the read to the ``finished_at`` index's range, each row is
    cut to its minute or hour (:class:`TimeBucket`) and the rows are counted
    per bucket and outcome.

    Args:
        session: The admin's session (reads only).
        execution_cls: The ``StepExecution`` model.
        start: The first bucket's start (aware UTC, a whole minute or hour).
        end: The end of the range (aware UTC, exclusive).
        unit: ``"minute"`` or ``"hour"``.

    Returns:
        ``(bucket start, outcome, count)`` rows, the bucket start aware UTC;
        the outcome ``""`` for a finished execution without one.
    """
    finished = execution_cls.finished_at
    bucket = TimeBucket(finished, unit).label("bucket")
    query = (
        sa.select(bucket, execution_cls.outcome, sa.func.count())
        .where(finished >= start, finished < end)
        .group_by(bucket, execution_cls.outcome)
    )
    return [
        (parse_bucket(text, unit), str(name or ""), int(count))
        for text, name, count in session.execute(query)
    ]
