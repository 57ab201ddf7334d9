"""The ``flask geneva`` command group (SPEC §2.5, §15.7).

``flask geneva install`` writes the schema migrations into the host's Flask-Migrate
directory (R-MIG-01..05). Errors are reported as one-line Click errors.
"""

from __future__ import annotations

import click
from flask import current_app
from flask.cli import AppGroup
from flask.cli import with_appcontext

__all__ = ["geneva_group"]

geneva_group = AppGroup("geneva", help="flask_geneva: durable workflows.")


@geneva_group.command("install")
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
    "existing tables (R-DM-20).",
)
def install_command(directory: str | None, key_type: str) -> None:
    """Write the flask_geneva schema revisions into the migrations directory.

    Only revisions not already present are written; the database is not changed.
    Run `flask db upgrade` afterwards.
    """
    from flask_geneva import install as installer
    from flask_geneva.exceptions import InstallError

    try:
        result = installer.install(
            current_app._get_current_object(),  # type: ignore[attr-defined]
            directory=directory,
            key_type=key_type,
        )
    except InstallError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Key type: {result.key_type} ({result.key_type_reason}).")
    if result.already_present:
        click.echo(
            f"Already present: {len(result.already_present)} of "
            f"{len(installer.UNITS)} flask_geneva revisions."
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


@geneva_group.command("dispatch")
@with_appcontext
def dispatch_command() -> None:
    """Publish deferred executions that are due soon (R-DSP-02).

    Steps that wait longer than GENEVA_MAX_BROKER_DELAY are kept out of the
    broker; run this (or the `flask_geneva.dispatch_due` beat task) periodically.
    """
    from flask_geneva import dispatcher

    count = dispatcher.dispatch_due()
    click.echo(f"dispatched {count} step execution(s)")
