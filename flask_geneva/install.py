"""Schema installation: what ``flask geneva install`` does, as plain functions.

``flask geneva install`` never changes the database (R-MIG-01). It writes Alembic
revision files into the host's Flask-Migrate directory, one per logical schema unit
(R-MIG-02), chained after the current head; ``flask db upgrade`` then applies them.

- Each revision is rendered from a template in ``flask_geneva/migration_templates``
  and only needs Alembic and SQLAlchemy, so files written by an old version keep
  working after flask_geneva is upgraded.
- Each revision carries its unit name (``GENEVA_DRIVE_UNIT``, message and file slug
  ``geneva_drive_<unit>``); re-running install writes only the missing units
  (R-MIG-03), and every unit checks the live schema before changing it (R-MIG-04).
- The key type (bigint or UUID) is detected from the host's tables (R-DM-20/21) and
  must agree with the ``key_type`` the app passes to :class:`~flask_geneva.Geneva`.

:func:`register_autogenerate_filter` keeps ``flask db migrate``/``flask db check``
from proposing changes to what only our migrations manage: the MySQL/MariaDB
generated key columns and the dialect-specific indexes.
"""

from __future__ import annotations

import os
import re
import string
from collections import Counter
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from alembic.util import rev_id
from flask import appcontext_pushed

from flask_geneva import clock
from flask_geneva.exceptions import InstallError

if TYPE_CHECKING:
    from flask import Flask

__all__ = [
    "KEY_TYPES",
    "KEY_TYPE_CHOICES",
    "UNITS",
    "InstallResult",
    "KeyTypeDetection",
    "SchemaUnit",
    "detect_key_type",
    "include_object",
    "install",
    "installed_units",
    "migrations_directory",
    "register_autogenerate_filter",
    "render_revision",
    "resolve_key_type",
    "write_revisions",
]

WORKFLOWS_TABLE = "geneva_drive_workflows"
STEP_EXECUTIONS_TABLE = "geneva_drive_step_executions"
OUR_TABLES = frozenset({WORKFLOWS_TABLE, STEP_EXECUTIONS_TABLE})

KEY_TYPES = ("bigint", "uuid")
"""Key types the schema can be written with (R-DM-20)."""

KEY_TYPE_CHOICES = ("auto", *KEY_TYPES)
"""Values of ``flask geneva install --key-type``."""


@dataclass(frozen=True)
class SchemaUnit:
    """One logical schema change, written as one Alembic revision (R-MIG-02).

    Attributes:
        name: Stable unit name; the revision's marker is ``geneva_drive_<name>``.
        title: One-line description used in the revision's docstring.
        template: File name of the body template in ``migration_templates``.
    """

    name: str
    title: str
    template: str

    @property
    def slug(self) -> str:
        """The stable marker: revision message and file name slug (R-MIG-03)."""
        return f"geneva_drive_{self.name}"


UNITS: tuple[SchemaUnit, ...] = (
    SchemaUnit(
        "create_workflows",
        "create the geneva_drive_workflows table",
        "01_create_workflows.py.tmpl",
    ),
    SchemaUnit(
        "create_step_executions",
        "create the geneva_drive_step_executions table",
        "02_create_step_executions.py.tmpl",
    ),
    SchemaUnit(
        "add_finished_at",
        "add step_executions.finished_at with its index and backfill it",
        "03_add_finished_at.py.tmpl",
    ),
    SchemaUnit(
        "add_error_class_name",
        "add step_executions.error_class_name",
        "04_add_error_class_name.py.tmpl",
    ),
    SchemaUnit(
        "add_step_execution_metadata",
        "add step_executions.metadata",
        "05_add_step_execution_metadata.py.tmpl",
    ),
    SchemaUnit(
        "add_workflow_metadata",
        "add workflows.metadata",
        "06_add_workflow_metadata.py.tmpl",
    ),
    SchemaUnit(
        "allow_null_hero",
        "allow NULL hero_type and hero_id on workflows",
        "07_allow_null_hero.py.tmpl",
    ),
    SchemaUnit(
        "add_in_progress_index",
        "add the in-progress started_at index on step_executions",
        "08_add_in_progress_index.py.tmpl",
    ),
    SchemaUnit(
        "add_resumable_support",
        "add step_executions.cursor and continues_from_id (resumable steps)",
        "09_add_resumable_support.py.tmpl",
    ),
)
"""The schema units in the order they are written and applied (R-MIG-02)."""

_UNITS_BY_NAME = {unit.name: unit for unit in UNITS}
_PRELUDE_TEMPLATE = "_prelude.py.tmpl"

# Objects only our migrations manage, hidden from autogenerate: the MySQL/MariaDB
# generated key columns (not in the ORM metadata) and the indexes whose definition
# differs per dialect (partial on PostgreSQL/SQLite, generated-column or composite
# on MySQL/MariaDB).
_DIALECT_SPECIFIC_INDEXES = frozenset(
    {
        "index_geneva_drive_workflows_unique_ongoing",
        "index_geneva_drive_step_executions_one_active",
        "index_geneva_drive_step_executions_in_progress_started_at",
    }
)
_GENERATED_COLUMNS = frozenset(
    {
        (WORKFLOWS_TABLE, "ongoing_unique_key"),
        (STEP_EXECUTIONS_TABLE, "active_unique_key"),
    }
)

# R-DM-20: SQL types that count as UUID keys. [PORT] char(32) is what SQLAlchemy's
# ``Uuid`` type creates on databases without a native UUID type.
_UUID_TYPE = re.compile(r"^(uuid|char\(36\)|varchar\(36\)|char\(32\))(\s|$)")
_IGNORED_TABLE_PREFIXES = ("alembic_", "schema_", "ar_", "geneva_drive_")


# -- key type (R-DM-20/21) ------------------------------------------------------------


@dataclass(frozen=True)
class KeyTypeDetection:
    """What the existing schema says about the key type (R-DM-20/21).

    Attributes:
        key_type: ``"bigint"`` or ``"uuid"``.
        uuid_columns: Names of the tables whose ``id`` column counts as UUID.
        other_columns: Names of the tables whose ``id`` column does not.
        server_default: SQL default expression for new UUID ``id`` columns, or None
            (then the ORM generates ``uuid4()`` values client-side).
        reason: Human-readable explanation, used in messages.
    """

    key_type: str
    uuid_columns: tuple[str, ...] = ()
    other_columns: tuple[str, ...] = ()
    server_default: str | None = None
    reason: str = ""


def detect_key_type(bind: sa.Engine | sa.Connection) -> KeyTypeDetection:
    """Detect the key type from the ``id`` columns of the existing tables (R-DM-20).

    Tables whose name starts with ``alembic_``, ``schema_``, ``ar_`` or
    ``geneva_drive_`` are not counted. An ``id`` column counts as UUID when its SQL
    type is ``uuid``, ``char(36)``, ``varchar(36)`` or (port addition, SQLAlchemy's
    non-native ``Uuid``) ``char(32)``. The key type is UUID iff UUID columns
    outnumber the others. When UUID is chosen on PostgreSQL, the most frequent
    default expression of those columns becomes the new ``id`` server default if it
    is strictly more frequent than the runner-up (R-DM-21).

    If ``geneva_drive_workflows`` already exists, its ``id`` type wins: the schema
    was decided by an earlier install.

    Only reads the catalog; needs no app context.

    Args:
        bind: An engine or connection to the host's database.

    Returns:
        The detection result.
    """
    if isinstance(bind, sa.Engine):
        with bind.connect() as connection:
            return detect_key_type(connection)
    dialect = bind.dialect.name
    id_columns = _id_columns(bind)
    existing = [entry for entry in id_columns if entry[0] == WORKFLOWS_TABLE]
    if existing:
        key_type = "uuid" if _is_uuid_type(existing[0][1]) else "bigint"
        return KeyTypeDetection(
            key_type,
            reason=f"the existing {WORKFLOWS_TABLE}.id column is {existing[0][1]}",
        )
    counted = [
        entry
        for entry in id_columns
        if not entry[0].lower().startswith(_IGNORED_TABLE_PREFIXES)
    ]
    uuid_tables = tuple(
        table for table, sql_type, _ in counted if _is_uuid_type(sql_type)
    )
    other_tables = tuple(
        table for table, sql_type, _ in counted if not _is_uuid_type(sql_type)
    )
    if not counted:
        return KeyTypeDetection("bigint", reason="the database has no tables yet")
    reason = f"{len(uuid_tables)} of {len(counted)} existing `id` columns are UUIDs"
    if len(uuid_tables) <= len(other_tables):
        return KeyTypeDetection("bigint", uuid_tables, other_tables, reason=reason)
    server_default = None
    if dialect == "postgresql":
        # Only where the column type is a native uuid: elsewhere our ``Uuid`` keys
        # are CHAR(32) hex, which a default like uuid() (36 chars) does not fit.
        defaults = Counter(
            default.strip()
            for _, sql_type, default in counted
            if _is_uuid_type(sql_type) and default
        ).most_common(2)
        if defaults and (len(defaults) == 1 or defaults[0][1] > defaults[1][1]):
            server_default = defaults[0][0]
    return KeyTypeDetection(
        "uuid", uuid_tables, other_tables, server_default, reason=reason
    )


def _is_uuid_type(sql_type: str) -> bool:
    return _UUID_TYPE.match(sql_type.strip().lower()) is not None


def _id_columns(connection: sa.Connection) -> list[tuple[str, str, str | None]]:
    """``(table, declared SQL type, default)`` of every ``id`` column, from the catalog.

    Raw catalog queries rather than the inspector: reflection turns declared types it
    does not know (``UUID`` on SQLite and MariaDB) into warnings and NullType.
    """
    dialect = connection.dialect.name
    if dialect == "sqlite":
        rows = []
        tables = connection.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%'"
        ).scalars()
        for table in list(tables):
            quoted = connection.dialect.identifier_preparer.quote_identifier(table)
            for pragma in connection.exec_driver_sql(f"PRAGMA table_info({quoted})"):
                if pragma[1] == "id":
                    rows.append((table, str(pragma[2] or ""), pragma[4]))
        return rows
    if dialect == "postgresql":
        result = connection.execute(
            sa.text(
                "SELECT c.table_name, c.data_type, c.character_maximum_length, "
                "c.column_default FROM information_schema.columns c "
                "JOIN information_schema.tables t ON t.table_schema = c.table_schema "
                "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE' "
                "WHERE c.table_schema = current_schema() AND c.column_name = 'id'"
            )
        )
        aliases = {"character varying": "varchar", "character": "char"}
        return [
            (
                table,
                aliases.get(data_type, data_type)
                + (f"({length})" if length is not None else ""),
                default,
            )
            for table, data_type, length, default in result
        ]
    if dialect in ("mysql", "mariadb"):
        result = connection.execute(
            sa.text(
                "SELECT c.table_name, c.column_type, c.column_default "
                "FROM information_schema.columns c "
                "JOIN information_schema.tables t ON t.table_schema = c.table_schema "
                "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE' "
                "WHERE c.table_schema = DATABASE() AND c.column_name = 'id'"
            )
        )
        return [
            (str(table), str(sql_type), default) for table, sql_type, default in result
        ]
    inspector = sa.inspect(connection)
    rows = []
    for table in inspector.get_table_names():
        for info in inspector.get_columns(table):
            if info["name"] == "id":
                sql_type = info["type"].compile(dialect=connection.dialect)
                rows.append((table, sql_type, info.get("default")))
    return rows


def resolve_key_type(
    requested: str,
    *,
    app_key_type: str,
    detect: Callable[[], KeyTypeDetection] | None,
) -> KeyTypeDetection:
    """Choose the key type to write and check it against the app's models.

    Args:
        requested: ``"auto"``, ``"bigint"`` or ``"uuid"`` (``--key-type``).
        app_key_type: The ``key_type`` the app's ``Geneva(db, key_type=...)`` uses.
        detect: Callable running :func:`detect_key_type`; None when the database
            cannot be read (then ``requested`` must not be ``"auto"``).

    Returns:
        The chosen key type (with the UUID server default, when detected).

    Raises:
        InstallError: ``requested`` is not an allowed value; ``"auto"`` without a
            database; or the chosen key type differs from ``app_key_type`` (the ORM
            and the schema must agree, R-DM-22).
    """
    if requested not in KEY_TYPE_CHOICES:
        raise InstallError(
            f"--key-type must be one of {', '.join(KEY_TYPE_CHOICES)}, "
            f"got {requested!r}"
        )
    if requested == "auto":
        if detect is None:
            raise InstallError(
                "cannot detect the key type without a database; pass --key-type "
                "bigint or --key-type uuid"
            )
        detection = detect()
        if detection.key_type != app_key_type:
            raise InstallError(
                f"the detected key type is {detection.key_type!r} "
                f"({detection.reason}) but the app's models use "
                f"Geneva(db, key_type={app_key_type!r}); pass "
                f"key_type={detection.key_type!r} to Geneva(...) so the ORM and the "
                f"schema agree, or run install with --key-type {app_key_type}"
            )
        return detection
    if requested != app_key_type:
        raise InstallError(
            f"--key-type {requested} does not match the app's models, which use "
            f"Geneva(db, key_type={app_key_type!r}); pass key_type={requested!r} to "
            "Geneva(...) so the ORM and the schema agree, or run install with "
            f"--key-type {app_key_type}"
        )
    uuid_detection = detect() if detect is not None and requested == "uuid" else None
    server_default = (
        uuid_detection.server_default if uuid_detection is not None else None
    )
    return KeyTypeDetection(
        requested, server_default=server_default, reason=f"--key-type {requested}"
    )


# -- revisions (R-MIG-01..05) ------------------------------------------------------


def migrations_directory(app: Flask, directory: str | os.PathLike[str] | None) -> Path:
    """Return the Flask-Migrate directory ``install`` writes into.

    Args:
        app: The Flask app; its ``app.extensions["migrate"].directory`` is the
            default.
        directory: Explicit directory (``--directory``), or None.

    Returns:
        The directory, relative paths resolved against the working directory.

    Raises:
        InstallError: The directory or its ``alembic.ini``/``env.py`` is missing
            (run ``flask db init`` first).
    """
    if directory is None:
        migrate_state = app.extensions.get("migrate")
        directory = getattr(migrate_state, "directory", None) or "migrations"
    path = Path(directory)
    if not path.is_dir():
        raise InstallError(
            f"migrations directory {str(path)!r} does not exist; run `flask db init` "
            "first (or pass --directory)"
        )
    for required in ("alembic.ini", "env.py"):
        if not (path / required).is_file():
            raise InstallError(
                f"{str(path)!r} is not an Alembic migrations directory "
                f"(no {required}); run `flask db init` first (or pass --directory)"
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
        resources.files("flask_geneva")
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
    from flask_geneva import __version__

    number = UNITS.index(unit) + 1
    prelude = string.Template(_template(_PRELUDE_TEMPLATE)).substitute(
        slug=unit.slug,
        number=number,
        unit_count=len(UNITS),
        title=unit.title,
        version=__version__,
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
    versions.mkdir(parents=True, exist_ok=True)
    taken = {script.revision for script in existing}
    down_revision = heads[0] if heads else None
    written: list[Path] = []
    for unit in UNITS:
        if unit not in wanted or unit.name in present:
            continue
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
        target.write_text(source, encoding="utf-8")
        written.append(target)
        down_revision = revision
    return written


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


def install(
    app: Flask,
    *,
    directory: str | os.PathLike[str] | None = None,
    key_type: str = "auto",
    units: Sequence[SchemaUnit] | None = None,
) -> InstallResult:
    """Write the missing flask_geneva revisions into the app's migrations (R-MIG-01).

    Reads the database catalog to detect the key type (R-DM-20/21) but never changes
    the schema. Pushes an app context if none is active.

    Args:
        app: The Flask app with ``geneva.init_app(app)`` done.
        directory: Flask-Migrate directory; default is the one ``Migrate`` was
            configured with, else ``migrations``.
        key_type: ``"auto"`` (detect), ``"bigint"`` or ``"uuid"``.
        units: Restrict to these units (default: all).

    Returns:
        What was written.

    Raises:
        InstallError: No migrations directory; several heads; the key type
            disagrees with ``Geneva(db, key_type=...)``; or the database cannot be
            read for detection.
    """
    state = app.extensions.get("geneva")
    if state is None:
        raise InstallError(
            "flask_geneva is not registered on this app; call geneva.init_app(app)"
        )
    geneva = state.geneva
    path = migrations_directory(app, directory)
    # Validate the choice before touching the database.
    if key_type not in KEY_TYPE_CHOICES:
        resolve_key_type(key_type, app_key_type=geneva.key_type, detect=None)

    def detect() -> KeyTypeDetection:
        try:
            with app.app_context():
                return detect_key_type(geneva.db.engine)
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
        app_key_type=geneva.key_type,
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


# -- autogenerate hygiene ------------------------------------------------------------


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Alembic ``include_object`` hook hiding what only our migrations manage.

    For our two tables it hides:

    - the MySQL/MariaDB generated columns ``ongoing_unique_key`` and
      ``active_unique_key`` (not in the ORM metadata, R-DM-05/11);
    - on MySQL/MariaDB, the three indexes built there unlike the ORM's partial
      indexes (``..._unique_ongoing``, ``..._one_active``,
      ``..._in_progress_started_at``, R-DM-05/11/12), on both sides;
    - a table, column or index the ORM has but the database lacks: creating it is
      the job of ``flask geneva install`` (a partial installation, R-MIG-03), and a
      host revision would otherwise import flask_geneva's column types.

    Differences in what exists on both sides (types, nullability, changed or extra
    indexes) are still reported, so drift between the ORM and the schema shows.
    Outside a running Alembic environment the dialect-specific indexes are hidden.

    Returns:
        False for a hidden object, True otherwise.
    """
    table = obj if type_ == "table" else getattr(obj, "table", None)
    table_name = getattr(table, "name", None)
    if table_name not in OUR_TABLES:
        return True
    if type_ in ("table", "column") and not reflected and compare_to is None:
        return False
    if type_ == "column":
        return (table_name, name) not in _GENERATED_COLUMNS
    if type_ in ("index", "unique_constraint"):
        info = getattr(obj, "info", None) or {}
        dialect_specific = name in _DIALECT_SPECIFIC_INDEXES or bool(
            info.get("geneva_dialect_specific")
        )
        connection = _migration_connection()
        if dialect_specific and (
            connection is None
            or connection.dialect.name not in ("postgresql", "sqlite")
        ):
            return False
        if not reflected and connection is not None:
            return name in _index_names(connection, str(table_name))
    return True


def _migration_connection() -> sa.Connection | None:
    """The connection Alembic is comparing against, or None outside env.py."""
    from alembic import context

    try:
        connection = context.get_context().connection
    except (NameError, AttributeError):
        # alembic.context is a proxy that exists only while env.py runs.
        return None
    return connection


def _index_names(connection: sa.Connection, table_name: str) -> set[str]:
    inspector = sa.inspect(connection)
    if not inspector.has_table(table_name):
        return set()
    names = {index["name"] for index in inspector.get_indexes(table_name)}
    names.update(
        constraint["name"]
        for constraint in inspector.get_unique_constraints(table_name)
    )
    return {name for name in names if name}


_IncludeObject = Callable[[Any, str | None, str, bool, Any], bool]


def _combined_filter(existing: _IncludeObject | None) -> _IncludeObject:
    if getattr(existing, "_geneva_filter", False):
        return existing  # type: ignore[return-value]

    def combined(
        obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        if not include_object(obj, name, type_, reflected, compare_to):
            return False
        if existing is None:
            return True
        return bool(existing(obj, name, type_, reflected, compare_to))

    combined._geneva_filter = True  # type: ignore[attr-defined]
    combined._geneva_wrapped = existing  # type: ignore[attr-defined]
    return combined


def _wire_migrate(app: Flask) -> bool:
    migrate_state = app.extensions.get("migrate")
    configure_args = getattr(migrate_state, "configure_args", None)
    if not isinstance(configure_args, dict):
        return False
    configure_args["include_object"] = _combined_filter(
        configure_args.get("include_object")
    )
    return True


def _on_appcontext_pushed(sender: Flask, **_: Any) -> None:
    _wire_migrate(sender)


def register_autogenerate_filter(app: Flask) -> None:
    """Add :func:`include_object` to Flask-Migrate's ``context.configure`` arguments.

    Flask-Migrate's ``env.py`` passes ``app.extensions["migrate"].configure_args``
    to Alembic. The filter is installed at once if ``Migrate`` is already set up,
    and again whenever an app context is pushed (every ``flask db`` command pushes
    one), so ``Migrate(app, db)`` may come before or after ``geneva.init_app``. An
    ``include_object`` the host configured is kept and called after ours; one set
    later is wrapped at the next push. Idempotent.

    Args:
        app: The Flask app.
    """
    _wire_migrate(app)
    appcontext_pushed.connect(_on_appcontext_pushed, sender=app, weak=False)
