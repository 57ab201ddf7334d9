"""Record the SQL statements the test app sends (shared by several suites)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from tests.apps.basic import db


@contextlib.contextmanager
def recorded_statements(engine: Any = None) -> Iterator[list[str]]:
    """Collect the SQL statements sent to ``engine`` (default: the app's) in the block."""
    engine = engine if engine is not None else db.engine
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


def assert_row_update_not_blocked(
    table: sa.Table, row_id: Any, values: dict[str, Any]
) -> None:
    """Update ``table``'s row ``row_id`` (its ``id`` column) with ``values`` from
    another connection with a 2 s lock timeout (PostgreSQL, MySQL/MariaDB),
    then roll back: a lock held on the row would time out here."""
    with db.engine.connect() as other:
        if other.dialect.name == "mysql":
            other.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 2")
        else:
            other.exec_driver_sql("SET lock_timeout = '2s'")
        updated = other.execute(
            sa.update(table).where(table.c.id == row_id).values(values)
        ).rowcount
        other.rollback()
    assert updated == 1
