"""The key type of the schema, bigint or UUID (R-DM-20/21/22).

:func:`detect_key_type` reads the host's catalog; :func:`resolve_key_type` combines
``--key-type`` with the detection and checks it against the app's
``Geneva(db, key_type=...)``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from flask_geneva.db.install.units import KEY_TYPE_CHOICES
from flask_geneva.db.install.units import WORKFLOWS_TABLE
from flask_geneva.exceptions import InstallError

__all__ = ["KeyTypeDetection", "detect_key_type", "resolve_key_type"]

# R-DM-20: SQL types that count as UUID keys. [PORT] char(32) is what SQLAlchemy's
# ``Uuid`` type creates on databases without a native UUID type.
_UUID_TYPE = re.compile(r"^(uuid|char\(36\)|varchar\(36\)|char\(32\))(\s|$)")
_IGNORED_TABLE_PREFIXES = ("alembic_", "schema_", "ar_", "geneva_drive_")


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
