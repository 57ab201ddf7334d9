"""Build the test schema with our own install migrations, in-process (STYLE §8).

The conftest calls :func:`install_schema` once per session on PostgreSQL and
MariaDB, so the whole suite runs on the schema ``flask geneva install`` +
``flask db upgrade`` produce (R-MIG-01..05), not on ``db.create_all()``. No
subprocess and no Flask-Migrate setup on the app is needed: the revisions are
written into a temporary Alembic directory whose ``env.py`` runs them on the app's
engine.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from flask import Flask

from flask_geneva import reset_column_caches
from flask_geneva.db.install.units import OUR_TABLES as ALL_OUR_TABLES
from flask_geneva.db.install.units import STEP_EXECUTIONS_TABLE
from flask_geneva.ext.schema_install import install

__all__ = ["drop_schema", "install_schema"]

VERSION_TABLE = "alembic_version"
#: Every table the install units create, the step executions first (their
#: foreign key references the workflows).
OUR_TABLES = (
    STEP_EXECUTIONS_TABLE,
    *sorted(ALL_OUR_TABLES - {STEP_EXECUTIONS_TABLE}),
)

_ENV_PY = """\
from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
"""

_ALEMBIC_INI = """\
[alembic]
script_location = %(here)s
"""


def install_schema(app: Flask) -> list[str]:
    """Create our tables by writing and applying the install revisions.

    Must be called inside ``app``'s app context, with ``geneva.init_app(app)`` done.
    A leftover ``alembic_version`` table is dropped first (its revision ids are
    unknown to the fresh directory); tables that already exist are completed by the
    idempotent units (R-MIG-04). Uses the key type the app's ``Geneva`` was built
    with. Commits.

    Args:
        app: The Flask app.

    Returns:
        The unit names applied, in order.

    Raises:
        InstallError: The revisions could not be written.
    """
    geneva = app.extensions["geneva"].geneva
    engine = geneva.db.engine
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as connection:
        connection.execute(sa.text(f"DROP TABLE IF EXISTS {quote(VERSION_TABLE)}"))
    with tempfile.TemporaryDirectory(prefix="geneva-schema-") as tmp:
        directory = Path(tmp)
        (directory / "versions").mkdir()
        (directory / "env.py").write_text(_ENV_PY, encoding="utf-8")
        (directory / "alembic.ini").write_text(_ALEMBIC_INI, encoding="utf-8")
        result = install(app, directory=directory, key_type=geneva.key_type)
        config = Config(str(directory / "alembic.ini"))
        config.set_main_option("script_location", str(directory))
        with engine.connect() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            if connection.in_transaction():
                connection.commit()
    reset_column_caches()
    return [path.stem.split("_geneva_drive_", 1)[1] for path in result.written]


def drop_schema(app: Flask) -> None:
    """Drop our tables and ``alembic_version`` if they exist. Commits.

    Must be called inside ``app``'s app context.

    Args:
        app: The Flask app.
    """
    geneva = app.extensions["geneva"].geneva
    geneva.db.session.remove()
    engine = geneva.db.engine
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as connection:
        for table in (*OUR_TABLES, VERSION_TABLE):
            connection.execute(sa.text(f"DROP TABLE IF EXISTS {quote(table)}"))
    reset_column_caches()
