"""The ``flask geneva`` group's answer to a database without geneva's tables.

A command run before ``flask geneva install`` and ``flask db upgrade`` failed with
the driver's error ("no such table: geneva_drive_workflows") and a traceback of
some thirty frames. :class:`GenevaGroup` turns such an error, a missing table of
geneva's as each driver reports it, into a one-line Click error naming the table,
the database and the two commands to run (R-CLI-04); any other database error
propagates unchanged. The diagnosis reads only the error: on SQLite a second
connection could not even look, while the failed one still holds the write lock.
"""

from __future__ import annotations

import re
from typing import Any

import click
from flask.cli import AppGroup
from flask.cli import ScriptInfo
from sqlalchemy import exc as sa_exc

__all__ = ["GenevaGroup"]

#: PostgreSQL's SQLSTATE ``undefined_table``.
_UNDEFINED_TABLE = "42P01"
#: MySQL/MariaDB's ``ER_NO_SUCH_TABLE``.
_NO_SUCH_TABLE = 1146
#: A table of geneva's, as the drivers' messages name it.
_GENEVA_TABLE = re.compile(r"geneva_drive_[a-z_]+")


class GenevaGroup(AppGroup):
    """``AppGroup`` whose commands report missing geneva tables in one line."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; explain a database error caused by a missing table."""
        try:
            return super().invoke(ctx)
        except sa_exc.DBAPIError as error:
            table = _missing_geneva_table(error)
            if table is None:
                raise
            raise click.ClickException(
                f"the flask_geneva table {table} does not exist{_database(ctx)}: "
                f"run `flask geneva install` (once, to write the migrations) and "
                f"then `flask db upgrade`"
            ) from error


def _missing_geneva_table(error: sa_exc.DBAPIError) -> str | None:
    """The geneva table ``error`` says is missing, or None for any other error."""
    original = error.orig
    text = str(original)
    args: tuple[Any, ...] = tuple(getattr(original, "args", ()))
    missing = (
        getattr(original, "sqlstate", None) == _UNDEFINED_TABLE  # psycopg 3
        or getattr(original, "pgcode", None) == _UNDEFINED_TABLE  # psycopg 2
        or (bool(args) and args[0] == _NO_SUCH_TABLE)  # PyMySQL, mysqlclient
        or text.startswith("no such table")  # sqlite3
    )
    found = _GENEVA_TABLE.search(text) if missing else None
    return found.group(0) if found else None


def _database(ctx: click.Context) -> str:
    """`` in <url>`` of the app's database, password hidden; "" if unknown."""
    try:
        app = ctx.ensure_object(ScriptInfo).load_app()
        with app.app_context():
            url = app.extensions["geneva"].geneva.db.engine.url
        return f" in {url.render_as_string(hide_password=True)}"
    except Exception:  # noqa: BLE001 - naming the database is a courtesy
        return ""
