"""The ``flask geneva`` group's answer to a database without geneva's tables.

A command run before ``flask geneva install`` and ``flask db upgrade`` failed with
the driver's error ("no such table: geneva_drive_workflows") and a traceback of
some thirty frames. :class:`GenevaGroup` turns a database error of a command into
a one-line Click error naming the missing tables, the database and the two
commands to run, when the core tables are indeed missing (R-CLI-04); any other
database error propagates unchanged.
"""

from __future__ import annotations

from typing import Any

import click
from flask.cli import AppGroup
from flask.cli import ScriptInfo
from sqlalchemy import exc as sa_exc

from flask_geneva.column_detection import missing_core_tables

__all__ = ["GenevaGroup"]


class GenevaGroup(AppGroup):
    """``AppGroup`` whose commands report missing geneva tables in one line."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; explain a database error caused by missing tables."""
        try:
            return super().invoke(ctx)
        except sa_exc.DBAPIError as error:
            message = _missing_tables_message(ctx)
            if message is None:
                raise
            raise click.ClickException(message) from error


def _missing_tables_message(ctx: click.Context) -> str | None:
    """The one-line error when geneva's core tables are missing, else None."""
    try:
        app = ctx.ensure_object(ScriptInfo).load_app()
        with app.app_context():
            engine = app.extensions["geneva"].geneva.db.engine
            missing = missing_core_tables(engine)
            where = engine.url.render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - the diagnosis never hides the command's error
        return None
    if not missing:
        return None
    return (
        f"the flask_geneva tables {', '.join(missing)} do not exist in {where}: "
        f"run `flask geneva install` (once, to write the migrations) and then "
        f"`flask db upgrade`"
    )
