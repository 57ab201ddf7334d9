"""SQLite locking: ``BEGIN IMMEDIATE`` transactions instead of row locks (BTR-13).

SQLite has no row locks, so geneva transactions on SQLite start with ``BEGIN
IMMEDIATE``, which takes the database write lock up front and serialises
lock-then-check sequences. :func:`install_sqlite_locking` sets that up on an
engine (plus WAL and a busy timeout); :func:`write_transaction` makes sure a
session's transaction holds the write lock before it reads, on any dialect.
"""

from __future__ import annotations

import contextlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.db import session_sync
from flask_geneva.db.states import WORKFLOWS_TABLE

__all__ = ["install_sqlite_locking", "write_transaction"]

_IMMEDIATE_FLAG = "geneva_begin_immediate"


def install_sqlite_locking(engine: sa.Engine, *, busy_timeout_ms: int = 30000) -> None:
    """Give a SQLite ``engine`` real write locks (BTR-13).

    Installs event listeners that hand transaction control to SQLAlchemy
    (pysqlite's own implicit BEGIN is disabled), enable WAL journaling, a busy
    timeout of ``busy_timeout_ms`` milliseconds and foreign keys, and begin every
    transaction with ``BEGIN IMMEDIATE``, as Rails and Django do for SQLite.

    Why every transaction: SQLite has one writer at a time. A deferred transaction
    that reads first and writes later fails at once with "database is locked" when
    another connection wrote in between (WAL snapshot conflict; the busy timeout
    does not apply). Taking the write lock at BEGIN makes such transactions wait
    for their turn instead. Read-only transactions then also queue, so keep them
    short (Flask-SQLAlchemy ends the session with each request).

    Idempotent. Call before the engine opens connections (``Geneva.init_app`` does).
    """
    if engine.dialect.name != "sqlite" or engine.__dict__.get("_geneva_locking"):
        return
    engine.__dict__["_geneva_locking"] = True

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            with contextlib.suppress(Exception):
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            return  # e.g. Alembic's autocommit_block: no transaction wanted
        connection.info[_IMMEDIATE_FLAG] = True
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def write_transaction(
    session: orm.Session, connection: sa.Connection | None = None
) -> None:
    """Begin (if needed) a transaction that holds the write lock before it reads.

    With :func:`install_sqlite_locking` every SQLite transaction already does.
    On a SQLite engine without it, a no-op write statement takes the lock (SQLite
    takes it for any write statement, even one matching no row). Elsewhere the
    row locks of :func:`flask_geneva.db.locks.lock_workflow` do the work and this
    does nothing (the next statement begins the transaction). ``connection``,
    when given, is the session's connection (saves looking the bind up again).
    """
    dialect = (connection or session_sync.bind_of(session)).dialect.name
    if dialect != "sqlite":
        return  # the next statement begins the transaction; row locks do the rest
    if connection is None:
        connection = session_sync.connection_of(session)
    if connection.info.get(_IMMEDIATE_FLAG):
        return
    connection.exec_driver_sql(
        f"UPDATE {WORKFLOWS_TABLE} SET id = id WHERE 1 = 0"  # noqa: S608 - constant
    )
    connection.info[_IMMEDIATE_FLAG] = True
