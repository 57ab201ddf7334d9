"""Write the missing flask_geneva revisions into a migrations directory (R-MIG-01).

Reads the database catalog to choose the key type (R-DM-20/21) and writes the
revision files of the units not yet present; never changes the schema.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import sqlalchemy as sa

from flask_geneva.db.install.key_type import KeyTypeDetection
from flask_geneva.db.install.key_type import detect_key_type
from flask_geneva.db.install.key_type import resolve_key_type
from flask_geneva.db.install.revisions import installed_units
from flask_geneva.db.install.revisions import migrations_directory
from flask_geneva.db.install.revisions import write_revisions
from flask_geneva.db.install.units import KEY_TYPE_CHOICES
from flask_geneva.db.install.units import UNITS
from flask_geneva.db.install.units import SchemaUnit
from flask_geneva.exceptions import InstallError

__all__ = ["InstallResult", "write_missing_revisions"]


@dataclass
class InstallResult:
    """What :func:`install` did.

    Attributes:
        directory: The Flask-Migrate directory.
        key_type: The key type of the schema.
        key_type_reason: Why that key type was chosen.
        written: Revision files written, in chain order.
        already_present: Names of the units that were already written.
    """

    directory: Path
    key_type: str
    key_type_reason: str
    written: list[Path] = field(default_factory=list)
    already_present: list[str] = field(default_factory=list)


def write_missing_revisions(
    directory: str | os.PathLike[str],
    *,
    engine: sa.Engine,
    app_key_type: str,
    key_type: str = "auto",
    units: Sequence[SchemaUnit] | None = None,
) -> InstallResult:
    """Write the missing flask_geneva revisions into ``directory`` (R-MIG-01).

    Reads the database catalog to detect the key type (R-DM-20/21) but never
    changes the schema. :func:`flask_geneva.ext.schema_install.install` calls it
    with the app's migrations directory, engine and key type.

    Args:
        directory: The Flask-Migrate (Alembic) directory.
        engine: The engine of the app's database, read for key-type detection
            only (no connection is made when ``key_type`` is explicit and no
            server default is needed).
        app_key_type: The key type the extension was built with
            (``Geneva(db, key_type=...)``): ``"bigint"``, ``"uuid"`` or ``"auto"``.
        key_type: ``"auto"`` (detect), ``"bigint"`` or ``"uuid"``.
        units: Restrict to these units (default: all).

    Returns:
        What was written.

    Raises:
        InstallError: No migrations directory; several heads; the key type
            disagrees with ``app_key_type``; or the database cannot be read for
            detection.
    """
    path = migrations_directory(directory)
    # Validate the choice before touching the database.
    if key_type not in KEY_TYPE_CHOICES:
        resolve_key_type(key_type, app_key_type=app_key_type, detect=None)

    def detect() -> KeyTypeDetection:
        try:
            return detect_key_type(engine)
        except sa.exc.SQLAlchemyError as exc:
            message = str(exc).splitlines()[0]
            raise InstallError(
                f"cannot read the database to detect the key type ({message}); "
                "pass --key-type bigint or --key-type uuid"
            ) from exc

    def detect_quietly() -> KeyTypeDetection:
        # An explicit --key-type uuid only asks the database for a server default.
        try:
            return detect()
        except InstallError:
            return KeyTypeDetection("uuid")

    chosen = resolve_key_type(
        key_type,
        app_key_type=app_key_type,
        detect=detect if key_type == "auto" else detect_quietly,
    )
    before = installed_units(path)
    written = write_revisions(
        path,
        key_type=chosen.key_type,
        id_server_default=chosen.server_default,
        units=units,
    )
    return InstallResult(
        directory=path,
        key_type=chosen.key_type,
        key_type_reason=chosen.reason,
        written=written,
        already_present=[unit.name for unit in UNITS if unit.name in before],
    )
