"""One housekeeping cleanup at a time per database: an advisory lock (R-HK-12, R-HK-13).

Two cleanups deleting the same rows at once (Celery beat is not highly available,
so two housekeeping runs do happen) either stop early, because a batch that lost
its rows to the other run comes back short and a short batch ends the pass, or die
on a deadlock when their DELETEs lock the same rows in different orders. A cleanup
therefore first takes a database advisory lock and, when another run holds it,
skips its cleanup quietly: the run holding the lock deletes every eligible row.

* PostgreSQL: ``pg_try_advisory_lock(key)``, the key a 64-bit hash of the workflows
  table's name (advisory locks are per database already).
* MySQL/MariaDB: ``GET_LOCK(name, 0)``, the name a hash of the current database
  and the workflows table's name (these locks are server-wide).
* Other dialects (SQLite): no lock. SQLite has a single writer and every batch
  selects and deletes under the write lock, so a short batch does mean the end.

The lock belongs to a connection of its own, taken from the session's engine and
held (outside any transaction) for the whole cleanup; closing that connection,
also when the process dies, releases it. A connection pooler in transaction mode
(PgBouncer) does not keep session-level locks, so such a setup must not run two
housekeeping runs at once.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.tagged_logging import module_logger

__all__ = ["cleanup_lock"]

_log = module_logger("flask_geneva.housekeeping")

_NAME_PREFIX = "flask_geneva.cleanup:"


def _postgresql_key(table_name: str) -> int:
    """A signed 64-bit key (PostgreSQL's ``bigint``) for the table's cleanup lock."""
    digest = hashlib.sha256(f"{_NAME_PREFIX}{table_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _statements(dialect: str, table_name: str) -> tuple[Any, Any, dict[str, Any]]:
    """``(acquire, release, parameters)`` for the dialect, or Nones without a lock."""
    if dialect == "postgresql":
        return (
            sa.text("SELECT pg_try_advisory_lock(:key)"),
            sa.text("SELECT pg_advisory_unlock(:key)"),
            {"key": _postgresql_key(table_name)},
        )
    if dialect in ("mysql", "mariadb"):
        # Server-wide names of at most 64 characters: a hash of database and table.
        name = "CONCAT('geneva_cleanup_', SHA1(CONCAT(DATABASE(), '.', :table)))"
        return (
            sa.text(f"SELECT GET_LOCK({name}, 0)"),
            sa.text(f"SELECT RELEASE_LOCK({name})"),
            {"table": f"{_NAME_PREFIX}{table_name}"},
        )
    return None, None, {}


@contextlib.contextmanager
def cleanup_lock(session: orm.Session, workflow_cls: Any) -> Iterator[bool]:
    """Hold the database's cleanup lock while the block runs, if it is free (R-HK-13).

    Args:
        session: The housekeeping session; the lock is taken on another connection
            of its engine (the one that serves ``workflow_cls``).
        workflow_cls: The ``Workflow`` model; its table names the lock, so apps with
            their own tables in one database do not exclude each other.

    Yields:
        True when this run holds the lock (or the dialect needs none) and may clean
        up; False when another run holds it: the caller skips its cleanup.

    Raises:
        sqlalchemy.exc.DBAPIError: The lock could not be asked for.
    """
    engine = session.get_bind(mapper=workflow_cls).engine
    table_name = workflow_cls.__table__.fullname
    acquire, release, parameters = _statements(engine.dialect.name, table_name)
    if acquire is None:
        yield True
        return
    with engine.connect() as connection:
        acquired = connection.execute(acquire, parameters).scalar() == 1
        connection.commit()  # a session-level lock: no transaction stays open
        if not acquired:
            _log.info(
                "cleanup skipped: another housekeeping run is cleaning up %s",
                table_name,
            )
            yield False
            return
        try:
            yield True
        finally:
            try:
                connection.execute(release, parameters)
                connection.commit()
            except sa.exc.DBAPIError as error:
                # Closing the connection for good releases the lock.
                _log.warning("releasing the cleanup lock failed: %s", error)
                connection.invalidate()
