"""``flask geneva install`` for an app: its migrations directory, engine and key type.

Reads what the Flask app knows (the extension's key type, ``Migrate``'s
directory, the database engine) and hands it to
:func:`flask_geneva.db.install.install.write_missing_revisions`, which writes
the missing revision files (R-MIG-01) and never changes the schema.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from flask import Flask

from flask_geneva.db.install.install import InstallResult
from flask_geneva.db.install.install import write_missing_revisions
from flask_geneva.db.install.units import SchemaUnit
from flask_geneva.exceptions import InstallError

__all__ = ["InstallResult", "install"]

#: Flask-Migrate's default directory.
DEFAULT_MIGRATIONS_DIRECTORY = "migrations"


def install(
    app: Flask,
    *,
    directory: str | os.PathLike[str] | None = None,
    key_type: str = "auto",
    units: Sequence[SchemaUnit] | None = None,
) -> InstallResult:
    """Write the missing flask_geneva revisions into the app's migrations (R-MIG-01).

    Reads the database catalog to detect the key type (R-DM-20/21) but never
    changes the schema.

    Args:
        app: The Flask app with ``geneva.init_app(app)`` done.
        directory: Flask-Migrate directory; default is the one ``Migrate`` was
            configured with, else ``migrations``.
        key_type: ``"auto"`` (detect), ``"bigint"`` or ``"uuid"``.
        units: Restrict to these units (default: all).

    Returns:
        What was written.

    Raises:
        InstallError: flask_geneva is not registered on ``app``; no migrations
            directory; several heads; the key type disagrees with
            ``Geneva(db, key_type=...)``; or the database cannot be read for
            detection.
    """
    state = app.extensions.get("geneva")
    if state is None:
        raise InstallError(
            "flask_geneva is not registered on this app; call geneva.init_app(app)"
        )
    if directory is None:
        migrate_state = app.extensions.get("migrate")
        directory = (
            getattr(migrate_state, "directory", None) or DEFAULT_MIGRATIONS_DIRECTORY
        )
    geneva = state.geneva
    with app.app_context():
        engine = geneva.db.engine
    return write_missing_revisions(
        directory,
        engine=engine,
        app_key_type=geneva.key_type,
        key_type=key_type,
        units=units,
    )
