"""``flask geneva install``: write the schema migrations (R-MIG-01..05).

The work is done by :func:`flask_geneva.ext.schema_install.install`; this module turns
its result into lines and its :class:`~flask_geneva.exceptions.InstallError` into
a one-line Click error.
"""

from __future__ import annotations

import click
from flask import current_app
from flask.cli import with_appcontext

from flask_geneva.db.install.units import UNITS
from flask_geneva.exceptions import InstallError
from flask_geneva.ext.schema_install import install

__all__ = ["install_command"]


@click.command("install")
@with_appcontext
@click.option(
    "-d",
    "--directory",
    default=None,
    help="Flask-Migrate directory (default: the one Migrate was configured with, "
    "usually 'migrations').",
)
@click.option(
    "--key-type",
    type=click.Choice(["auto", "bigint", "uuid"]),
    default="auto",
    show_default=True,
    help="Primary/foreign key type of the tables; 'auto' detects it from the "
    "existing tables.",  # R-DM-20
)
def install_command(directory: str | None, key_type: str) -> None:
    """Write the flask_geneva schema revisions into the migrations directory.

    Only revisions not already present are written; the database is not changed.
    Run `flask db upgrade` afterwards.
    """
    try:
        result = install(
            current_app,
            directory=directory,
            key_type=key_type,
        )
    except InstallError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Key type: {result.key_type} ({result.key_type_reason}).")
    if result.already_present:
        click.echo(
            f"Already present: {len(result.already_present)} of "
            f"{len(UNITS)} flask_geneva revisions."
        )
    if not result.written:
        click.echo(
            f"Nothing to write: every flask_geneva revision is in {result.directory}."
        )
        click.echo("Run `flask db upgrade` if you have not applied them yet.")
        return
    for path in result.written:
        click.echo(f"  wrote {path}")
    click.echo(
        f"Wrote {len(result.written)} revision(s). "
        "Run `flask db upgrade` to apply them."
    )
