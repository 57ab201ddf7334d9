"""The scratch database a benchmark runs on, shared by the bench scripts.

Every benchmark that takes ``--database-url`` runs on that database or, without
one, on a SQLite file in a temporary directory, and starts from geneva's
tables dropped and created again.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def database_url(given: str | None, directory: tempfile.TemporaryDirectory[str]) -> str:
    """``given``, or a SQLite file ``bench.sqlite3`` in ``directory`` when None.

    Args:
        given: The ``--database-url`` argument (SQLAlchemy URL) or None.
        directory: A temporary directory the caller keeps until the end.
    """
    return given or f"sqlite:///{Path(directory.name) / 'bench.sqlite3'}"


def reset_tables(app: Any) -> str:
    """Drop and create the tables of ``tests.apps.basic`` in ``app``'s database.

    Args:
        app: An app made by ``tests.apps.basic.create_app``.

    Returns:
        The database's dialect name (``sqlite``, ``postgresql``, ``mysql``).
    """
    from tests.apps import basic

    with app.app_context():
        basic.db.drop_all()
        basic.db.create_all()
        return str(basic.db.engine.dialect.name)
