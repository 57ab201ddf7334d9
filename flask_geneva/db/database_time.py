"""The database server's clock as a SQL expression (R-WRK-15).

:class:`DatabaseTime` renders, per dialect, the database's current UTC time (or
a column, or a scalar subquery) minus a duration, in the storage format of
:class:`~flask_geneva.db.column_types.UTCDateTime` columns. The worker registry
(:mod:`flask_geneva.db.workers`) writes and judges heartbeats with it, so that
no process's clock decides a worker's liveness. An expression only: it builds
no statement and names no table.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles

from flask_geneva.db.column_types import UTCDateTime

__all__ = ["DatabaseTime"]


class DatabaseTime(sa.sql.expression.ColumnElement[datetime]):
    """The database server's UTC time, or a time minus a duration, in SQL (R-WRK-15).

    ``DatabaseTime()`` is the server's current time; ``DatabaseTime(base,
    minus)`` is the SQL expression ``base`` (a column or a scalar subquery) or
    the current time, minus ``minus``. ``DatabaseTime(base, minus_ms=expr)``
    subtracts the SQL integer expression ``expr`` of milliseconds instead (a
    row's own dead-after, R-WRK-17). The value has the storage format of
    :class:`~flask_geneva.db.column_types.UTCDateTime` columns (naive UTC, text
    with microseconds on SQLite), so it compares with them and is written to
    them. A NULL ``base`` gives NULL. Rendered per dialect: PostgreSQL
    ``timezone('UTC', statement_timestamp())``, MySQL/MariaDB
    ``UTC_TIMESTAMP(6)``, SQLite ``strftime(…, 'now')`` (the host's clock: an
    SQLite database has no server).

    Raises:
        sqlalchemy.exc.CompileError: On another dialect (the message names it).
    """

    # Rendered with literal durations: statements holding it are not cached.
    inherit_cache = False
    type = UTCDateTime()

    def __init__(
        self, base: Any = None, minus: timedelta = timedelta(0), *, minus_ms: Any = None
    ) -> None:
        self.base = base
        self.minus_microseconds = int(minus / timedelta(microseconds=1))
        self.minus_ms = minus_ms


def _base_sql(element: DatabaseTime, compiler: Any, default: str, **kw: Any) -> str:
    if element.base is None:
        return default
    return str(compiler.process(element.base, **kw))


@compiles(DatabaseTime)
def _compile_database_time(element: DatabaseTime, compiler: Any, **kw: Any) -> str:
    raise sa.exc.CompileError(
        f"the worker registry needs the database clock, unsupported on "
        f"{compiler.dialect.name!r}; supported: 'postgresql', 'mysql', "
        f"'mariadb', 'sqlite'"
    )


@dataclasses.dataclass(frozen=True)
class _Forms:
    """One dialect's SQL: ``now``; ``minus_ms`` formatted with ``base`` and
    ``minus`` (an SQL expression of milliseconds); ``minus_us`` with ``base``,
    ``us`` (microseconds) and ``seconds`` (their negated seconds)."""

    now: str
    minus_ms: str
    minus_us: str
    # SQLite's 'now' is no time value: its result is always reformatted.
    bare_base: bool = True


_FORMS = {
    "postgresql": _Forms(
        now="timezone('UTC', statement_timestamp())",
        minus_ms="({base} - ({minus}) * INTERVAL '1 millisecond')",
        minus_us="({base} - INTERVAL '{us} microseconds')",
    ),
    "mysql": _Forms(
        now="UTC_TIMESTAMP(6)",
        minus_ms="({base} - INTERVAL ({minus}) * 1000 MICROSECOND)",
        minus_us="({base} - INTERVAL {us} MICROSECOND)",
    ),
    # strftime's %f has milliseconds; '000' completes the microseconds of the
    # stored format, so that text comparison orders the values.
    "sqlite": _Forms(
        now="'now'",
        minus_ms="(strftime('%Y-%m-%d %H:%M:%f', {base}, "
        "printf('%+.3f seconds', -({minus}) / 1000.0)) || '000')",
        minus_us="(strftime('%Y-%m-%d %H:%M:%f', {base}, '{seconds:+.6f} seconds') "
        "|| '000')",
        bare_base=False,
    ),
}
_FORMS["mariadb"] = _FORMS["mysql"]


@compiles(DatabaseTime, "postgresql")
@compiles(DatabaseTime, "mysql")
@compiles(DatabaseTime, "mariadb")
@compiles(DatabaseTime, "sqlite")
def _compile_database_time_on(element: DatabaseTime, compiler: Any, **kw: Any) -> str:
    forms = _FORMS[compiler.dialect.name]
    base = _base_sql(element, compiler, forms.now, **kw)
    if element.minus_ms is not None:
        minus = compiler.process(element.minus_ms, **kw)
        return forms.minus_ms.format(base=base, minus=minus)
    us = element.minus_microseconds
    if not us and forms.bare_base:
        return base
    return forms.minus_us.format(base=base, us=us, seconds=-(us / 1_000_000))
