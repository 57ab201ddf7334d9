"""Tests whose outcome the database server can't change run in one pass only.

CI runs the suite once per database (SQLite, PostgreSQL, MariaDB). A test marked
``database_independent`` sends no statement of its own to the database: it checks
a step declaration, an exception policy's arithmetic, a log format, a document,
or it drives a program on a SQLite file of its own. On PostgreSQL and MariaDB it
would run the same code again, so there it is deselected (:func:`deselect`).

The mark is checked, not trusted: on SQLite, :func:`count_statements` counts what
the test's body (not its fixtures) executes on any engine, and a marked test that
executed a statement fails, naming the count, so the mark can't hide a test that
has come to depend on the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from sqlalchemy import event

__all__ = ["MARKER", "count_statements", "deselect", "is_marked"]

#: The marker's name (registered in pyproject.toml).
MARKER = "database_independent"


def is_marked(item: pytest.Item) -> bool:
    """Whether the test (or its module or class) carries the mark."""
    return item.get_closest_marker(MARKER) is not None


def deselect(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Remove the marked tests from ``items`` (in place), reporting them deselected."""
    kept = [item for item in items if not is_marked(item)]
    if len(kept) == len(items):
        return
    config.hook.pytest_deselected(items=[item for item in items if is_marked(item)])
    items[:] = kept


class StatementCount:
    """Statements executed on any engine while counting (``value``, an int)."""

    def __init__(self) -> None:
        self.value = 0

    def __call__(self, *_args: object) -> None:
        self.value += 1


@contextmanager
def count_statements() -> Iterator[StatementCount]:
    """Count every statement any SQLAlchemy engine executes inside the block.

    Yields:
        A :class:`StatementCount` whose ``value`` grows with each statement.
    """
    counter = StatementCount()
    event.listen(sa.engine.Engine, "before_cursor_execute", counter)
    try:
        yield counter
    finally:
        event.remove(sa.engine.Engine, "before_cursor_execute", counter)
