"""What a refusal of bad input must be, for the fuzzed public API (R-FLT-70..72).

- :func:`table_snapshot`: every row of flask_geneva's tables and the heroes',
  read through a separate connection: equal before and after a refused call
  means the call wrote nothing (no row half-written, none lost).
- :func:`assert_clear_refusal`: the exception is one a caller can handle (a
  ``GenevaError``, ``ValueError``, ``TypeError`` or ``LookupError``), raised by
  flask_geneva's own code (the innermost frame of its traceback is in the
  package, not in SQLAlchemy, a driver, ``json`` or ``datetime``), and its
  message names what was wrong.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from flask_geneva.db.install.units import OUR_TABLES
from flask_geneva.exceptions import GenevaError
from tests.apps import basic

PACKAGE = Path(__file__).resolve().parents[2] / "flask_geneva"

#: The exceptions a refusal may raise (R-FLT-70).
REFUSALS = (GenevaError, ValueError, TypeError, LookupError)


def table_snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """{table name: its rows as sorted tuples of text} for flask_geneva's tables
    present in the database and the heroes' table, read in autocommit."""
    names = OUR_TABLES | {basic.User.__table__.name}
    tables = [t for t in basic.db.metadata.sorted_tables if t.name in names]
    snapshot = {}
    with basic.db.engine.connect() as connection:
        # Autocommit before anything runs: on SQLite every transaction begins
        # IMMEDIATE (BTR-13) and would wait for a writer.
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        present = set(sa.inspect(connection).get_table_names())
        for table in tables:
            if table.name not in present:
                continue
            rows = connection.execute(sa.select(table)).all()
            snapshot[table.name] = sorted(tuple(map(repr, row)) for row in rows)
    return snapshot


def assert_clear_refusal(error: BaseException, *names: str) -> None:
    """Assert ``error`` is a clear refusal: an exception of :data:`REFUSALS`
    raised in flask_geneva's code whose message holds each of ``names``
    (the wrong value, the setting, the allowed ones)."""
    assert isinstance(error, REFUSALS), _described(error)
    frames = traceback.extract_tb(error.__traceback__)
    assert frames, _described(error)
    innermost = Path(frames[-1].filename).resolve()
    assert innermost.is_relative_to(PACKAGE), _described(error)
    message = str(error)
    assert "\n" not in message.strip() or len(message) < 2000, message
    for name in names:
        assert name in message, (name, message)


def _described(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))
