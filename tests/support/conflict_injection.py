"""Inject a database-chosen transaction conflict into one statement (R-EXE-80).

A real deadlock needs a second transaction and a lock cycle; these helpers make
the statement fail as the driver reports a deadlock instead, on every backend:
the exception is an instance of the driver's own error class (PyMySQL's
``OperationalError`` 1213, psycopg's ``DeadlockDetected`` ``40P01``; SQLite has
no such error, so a ``sqlite3.OperationalError`` carrying SQLSTATE ``40001``),
raised from the dialect's ``do_execute`` hook, in place of the driver's execute,
so SQLAlchemy wraps it as it wraps a real one (an error raised from
``before_cursor_execute`` is not wrapped on SQLAlchemy 2.0.22, the floor). The transaction is not aborted by the server, but the code under test
rolls it back before any retry, as it must after a real deadlock.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from collections.abc import Iterator

import sqlalchemy as sa

from tests.apps.basic import db


class _SQLiteSerializationFailure(sqlite3.OperationalError):
    """What a serialization failure would look like from sqlite3 (SQLSTATE 40001)."""

    sqlstate = "40001"


def conflict_error() -> BaseException:
    """The driver-shaped deadlock of the selected database."""
    backend = db.engine.dialect.name
    if backend in ("mysql", "mariadb"):
        import pymysql

        return pymysql.err.OperationalError(
            1213, "Deadlock found when trying to get lock; try restarting transaction"
        )
    if backend == "postgresql":
        import psycopg

        return psycopg.errors.DeadlockDetected("deadlock detected")
    return _SQLiteSerializationFailure("injected serialization failure")


class Injector:
    """Counts the statements it failed; ``armed`` says whether it fails the next.

    Attributes:
        armed: Fail matching statements while True (``times`` still left).
        times: How many more matching statements to fail; None: every one.
        injected: The statements failed so far.
    """

    def __init__(self, matches: Callable[[str], bool], times: int | None) -> None:
        self.matches = matches
        self.armed = True
        self.times = times
        self.injected: list[str] = []

    def do_execute(self, cursor, statement, parameters, context) -> None:
        """Fail a matching statement; None lets the driver run any other."""
        if not self.armed or not self.matches(statement):
            return
        if self.times is not None:
            if self.times <= 0:
                return
            self.times -= 1
        self.injected.append(statement)
        raise conflict_error()


@contextlib.contextmanager
def inject_conflicts(
    matches: Callable[[str], bool], *, times: int | None = 1, armed: bool = True
) -> Iterator[Injector]:
    """Fail the statements ``matches`` accepts with a deadlock, ``times`` of them.

    Args:
        matches: Takes the SQL text; True fails it.
        times: How many to fail; None fails every one.
        armed: Start armed; False waits until the test (or a step) sets
            ``armed``.
    """
    injector = Injector(matches, times)
    injector.armed = armed
    engine = db.engine
    sa.event.listen(engine, "do_execute", injector.do_execute)
    try:
        yield injector
    finally:
        sa.event.remove(engine, "do_execute", injector.do_execute)


def writes(table: str, verb: str) -> Callable[[str], bool]:
    """A matcher for statements that ``verb`` (``INSERT``/``UPDATE``) ``table``."""
    needle = f"{verb} INTO {table}" if verb == "INSERT" else f"{verb} {table}"

    def matches(statement: str) -> bool:
        return needle in " ".join(statement.split())

    return matches
