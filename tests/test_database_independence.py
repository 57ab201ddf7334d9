"""The ``database_independent`` mark: deselected on servers, checked on SQLite.

See tests/support/database_independence.py; the check itself lives in the
conftest's ``pytest_runtest_call``.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.support import database_independence


def test_statements_on_any_engine_are_counted_inside_the_block_only(tmp_path):
    """A statement on a fresh engine is counted; one after the block is not."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'count.sqlite3'}")
    try:
        with (
            database_independence.count_statements() as statements,
            engine.connect() as connection,
        ):
            connection.execute(sa.text("SELECT 1"))
            connection.execute(sa.text("SELECT 2"))
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 3"))
    finally:
        engine.dispose()
    assert statements.value == 2


def test_marked_items_are_deselected_and_reported(request):
    """``deselect`` keeps the unmarked items in order and reports the others."""
    reported: list[list[pytest.Item]] = []

    class Hook:
        def pytest_deselected(self, items: list[pytest.Item]) -> None:
            reported.append(items)

    class Config:
        hook = Hook()

    marked = pytest.Function.from_parent(request.node.parent, name=request.node.name)
    marked.add_marker(database_independence.MARKER)
    plain = pytest.Function.from_parent(request.node.parent, name=request.node.name)
    items = [plain, marked]
    database_independence.deselect(Config(), items)  # type: ignore[arg-type]
    assert items == [plain]
    assert reported == [[marked]]
