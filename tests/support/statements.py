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
