"""The flask_geneva revision files: rendering, finding and writing them (R-MIG-01..05).

Each revision is rendered from a template in ``migration_templates/`` beside this module
and only needs Alembic and SQLAlchemy, so files written by an old version keep working
after flask_geneva is upgraded. Each carries its unit name (``GENEVA_DRIVE_UNIT``,
message and file slug ``geneva_drive_<unit>``); :func:`write_revisions` writes only
the missing units (R-MIG-03), chained after the single current head.
"""

from __future__ import annotations

import os
import string
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from alembic.util import rev_id

from flask_geneva.core import clock
from flask_geneva.core.version import installed_version
from flask_geneva.db.install.units import KEY_TYPES
from flask_geneva.db.install.units import UNITS
from flask_geneva.db.install.units import SchemaUnit
from flask_geneva.exceptions import InstallError

__all__ = [
    "installed_units",
    "migrations_directory",
    "render_revision",
    "write_revisions",
]

_UNITS_BY_NAME = {unit.name: unit for unit in UNITS}
_PRELUDE_TEMPLATE = "_prelude.py.tmpl"


def migrations_directory(directory: str | os.PathLike[str]) -> Path:
    """Check and return the Flask-Migrate directory ``install`` writes into.

    Args:
        directory: The directory (``--directory``, or the one ``Migrate`` was
            configured with).

    Returns:
        The directory, relative paths resolved against the working directory.

    Raises:
        InstallError: The directory or its ``alembic.ini``/``env.py`` is missing
            (run ``flask db init`` first).
    """
    path = Path(directory)
    try:
        if path.exists() and not path.is_dir():
            raise InstallError(
                f"migrations directory {str(path)!r} is not a directory; pass the "
                "folder `flask db init` created (--directory)"
            )
        if not path.is_dir():
            raise InstallError(
                f"migrations directory {str(path)!r} does not exist; run "
                "`flask db init` first (or pass --directory)"
            )
        missing = [
            required
            for required in ("alembic.ini", "env.py")
            if not (path / required).is_file()
        ]
    except OSError as exc:  # a name too long, a loop of links, no permission
        raise InstallError(
            f"cannot use migrations directory {str(path)[:200]!r}: "
            f"{exc.strerror or exc}"
        ) from None
    if missing:
        raise InstallError(
            f"{str(path)!r} is not an Alembic migrations directory "
            f"(no {missing[0]}); run `flask db init` first (or pass --directory)"
        )
    return path


def _script_directory(directory: Path) -> ScriptDirectory:
    config = Config(str(directory / "alembic.ini"))
    config.set_main_option("script_location", str(directory))
    try:
        return ScriptDirectory.from_config(config)
    except CommandError as exc:
        raise InstallError(
            f"cannot read the migrations in {str(directory)!r}: {exc}"
        ) from exc


def installed_units(directory: str | os.PathLike[str]) -> dict[str, str]:
    """Return ``{unit name: revision id}`` of the units already written (R-MIG-03).

    A revision belongs to a unit when its module sets ``GENEVA_DRIVE_UNIT``, or,
    failing that, when its message or file name is the unit's slug.

    Args:
        directory: The Flask-Migrate directory.

    Raises:
        InstallError: The revisions cannot be loaded.
    """
    scripts = _script_directory(Path(directory))
    found: dict[str, str] = {}
    try:
        revisions = list(scripts.walk_revisions())
    except CommandError as exc:
        raise InstallError(
            f"cannot read the migrations in {str(directory)!r}: {exc}"
        ) from exc
    for script in revisions:
        unit = _unit_of(script)
        if unit is not None:
            found.setdefault(unit, script.revision)
    return found


def _unit_of(script: Any) -> str | None:
    marker = getattr(script.module, "GENEVA_DRIVE_UNIT", None)
    if isinstance(marker, str) and marker in _UNITS_BY_NAME:
        return marker
    stem = Path(script.path).stem
    for unit in UNITS:
        if (script.doc or "").strip() == unit.slug or stem.endswith(unit.slug):
            return unit.name
    return None


def _template(name: str) -> str:
    return (
        resources.files("flask_geneva.db.install")
        .joinpath("migration_templates", name)
        .read_text(encoding="utf-8")
    )


def render_revision(
    unit: SchemaUnit,
    *,
    revision: str,
    down_revision: str | None,
    key_type: str,
    id_server_default: str | None = None,
) -> str:
    """Render one unit's revision file (R-MIG-02/04).

    Args:
        unit: The unit to render.
        revision: Its Alembic revision id.
        down_revision: The revision it follows, or None for a root.
        key_type: ``"bigint"`` or ``"uuid"``.
        id_server_default: SQL default expression of UUID ``id`` columns, or None.

    Returns:
        The Python source of the revision file.

    Raises:
        InstallError: ``key_type`` is not ``"bigint"`` or ``"uuid"``.
    """
    if key_type not in KEY_TYPES:
        raise InstallError(
            f"key_type must be one of {', '.join(KEY_TYPES)}, got {key_type!r}"
        )
    number = UNITS.index(unit) + 1
    prelude = string.Template(_template(_PRELUDE_TEMPLATE)).substitute(
        slug=unit.slug,
        number=number,
        unit_count=len(UNITS),
        title=unit.title,
        version=installed_version(),
        revision=revision,
        down_revision_text=down_revision or "",
        create_date=clock.now().isoformat(sep=" ", timespec="seconds"),
        revision_repr=repr(revision),
        down_revision_repr=repr(down_revision),
        unit_repr=repr(unit.name),
        key_type_repr=repr(key_type),
        id_server_default_repr=repr(id_server_default),
    )
    return prelude + _template(unit.template)


def write_revisions(
    directory: str | os.PathLike[str],
    *,
    key_type: str,
    id_server_default: str | None = None,
    units: Sequence[SchemaUnit] | None = None,
) -> list[Path]:
    """Write the revision files of the units not yet present (R-MIG-01..03).

    New revisions are chained after the single current head, in unit order.

    Args:
        directory: The Flask-Migrate directory (with ``alembic.ini``).
        key_type: ``"bigint"`` or ``"uuid"``.
        id_server_default: SQL default for UUID ``id`` columns (R-DM-21), or None.
        units: Units to consider (default: all of :data:`UNITS`); units already
            written are skipped.

    Returns:
        Paths of the files written, in chain order (empty when all are present).

    Raises:
        InstallError: The migrations have several heads, cannot be loaded, or
            were written with another key type.
    """
    path = Path(directory)
    scripts = _script_directory(path)
    try:
        heads = scripts.get_heads()
        existing = list(scripts.walk_revisions())
    except CommandError as exc:
        raise InstallError(
            f"cannot read the migrations in {str(path)!r}: {exc}"
        ) from exc
    if len(heads) > 1:
        raise InstallError(
            f"the migrations in {str(path)!r} have {len(heads)} heads "
            f"({', '.join(sorted(heads))}); run `flask db merge heads` first so the "
            "flask_geneva revisions can follow a single head"
        )
    present: dict[str, Any] = {}
    for script in existing:
        unit_name = _unit_of(script)
        if unit_name is not None:
            present.setdefault(unit_name, script)
    for unit_name, script in present.items():
        written_key_type = getattr(script.module, "KEY_TYPE", key_type)
        if written_key_type != key_type:
            raise InstallError(
                f"revision {script.revision} ({unit_name}) was written with key type "
                f"{written_key_type!r}, but this install uses {key_type!r}; pass "
                f"key_type={written_key_type!r} to Geneva(...) (or --key-type "
                f"{written_key_type})"
            )
    wanted = UNITS if units is None else tuple(units)
    versions = Path(scripts.versions)
    written: list[Path] = []
    try:
        versions.mkdir(parents=True, exist_ok=True)
        _write_chain(
            versions,
            [u for u in UNITS if u in wanted and u.name not in present],
            taken={script.revision for script in existing},
            down_revision=heads[0] if heads else None,
            key_type=key_type,
            id_server_default=id_server_default,
            written=written,
        )
    except OSError as exc:
        # No half-written chain: a later run would follow a head missing units.
        for target in written:
            target.unlink(missing_ok=True)
        raise InstallError(
            f"cannot write the revisions into {str(versions)!r} "
            f"({exc.strerror or exc}); nothing was written"
        ) from None
    return written


def _write_chain(
    versions: Path,
    units: Sequence[SchemaUnit],
    *,
    taken: set[str],
    down_revision: str | None,
    key_type: str,
    id_server_default: str | None,
    written: list[Path],
) -> None:
    """Write ``units`` as a chain after ``down_revision``, appending each file
    to ``written`` as soon as it exists (so a failure can remove them)."""
    for unit in units:
        revision = rev_id()
        while revision in taken:
            revision = rev_id()
        taken.add(revision)
        source = render_revision(
            unit,
            revision=revision,
            down_revision=down_revision,
            key_type=key_type,
            id_server_default=id_server_default,
        )
        target = versions / f"{revision}_{unit.slug}.py"
        written.append(target)
        target.write_text(source, encoding="utf-8")
        down_revision = revision
