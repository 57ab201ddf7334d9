"""Column types of the two tables: UTC datetimes, JSON documents, key types (SPEC §2).

``JSONDocument`` reads stored text that does not parse as :class:`InvalidJSON` instead
of raising, so one bad row does not break a load (R-SE-32, R-ADM-31).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

from flask_geneva.core import clock
from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "ExactText",
    "InvalidJSON",
    "JSONDocument",
    "UTCDateTime",
    "as_dict",
    "exact_collation",
    "primary_key_type",
    "table_once",
]


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A ``DATETIME(6)`` column that stores naive UTC and returns aware UTC.

    Naive datetimes are rejected on write (``ValueError``): every timestamp the
    library handles is aware (R-DM-23). SQLite and MariaDB would otherwise hand back
    naive values, and SQLite string comparison needs one uniform format.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime())

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime, got {value!r}")
        if value.tzinfo is UTC:
            return value.replace(tzinfo=None)  # clock.now()'s: nothing to convert
        return clock.ensure_aware(value).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def exact_collation(dialect: Any) -> str:
    """The binary, no-pad utf8mb4 collation of a MySQL or MariaDB server.

    MariaDB's and MySQL's default collations fold case and accents, pad
    trailing spaces, and (``utf8mb4_general_ci``) weigh every emoji alike;
    ``utf8mb4_bin`` still pads. MariaDB has ``utf8mb4_nopad_bin``, MySQL 8
    ``utf8mb4_0900_bin``; MySQL 5.7 has only ``utf8mb4_bin``.
    """
    if getattr(dialect, "is_mariadb", False) or dialect.name == "mariadb":
        return "utf8mb4_nopad_bin"
    version = getattr(dialect, "server_version_info", None) or (8,)
    return "utf8mb4_0900_bin" if tuple(version) >= (8,) else "utf8mb4_bin"


class ExactText(sa.types.TypeDecorator[str]):
    """A ``VARCHAR`` compared exactly, byte for byte, on every database.

    PostgreSQL's and SQLite's default comparisons already are; on MySQL and
    MariaDB the column gets :func:`exact_collation`, so two texts that differ
    by case, an accent, an emoji or a trailing space are two values (two
    limit keys, R-LIM-05, R-LIM-10).
    """

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(
                mysql.VARCHAR(
                    self.length,
                    charset="utf8mb4",
                    collation=exact_collation(dialect),
                )
            )
        return dialect.type_descriptor(sa.String(self.length))


class InvalidJSON(str):
    """Stored JSON text that does not parse; readers treat it as empty (R-SE-32)."""

    __slots__ = ()


class _SQLiteJSONText(sa.Text):
    """Text that SQLite DDL names ``JSON``; values pass through as strings.

    Declaring the column ``JSON`` keeps the schema the install migration writes
    (and ``flask db check`` clean), while decoding stays in
    :class:`JSONDocument`, which turns unparsable text into :class:`InvalidJSON`
    instead of raising while a row loads (R-ADM-31).
    """

    __visit_name__ = "JSON"


class JSONDocument(sa.types.TypeDecorator[Any]):
    """JSON stored as ``jsonb`` on PostgreSQL, ``LONGTEXT`` on MySQL/MariaDB, else TEXT.

    On text columns the value is encoded with :func:`json.dumps` in Python (BTR-14);
    text that does not parse comes back as :class:`InvalidJSON`. Python ``None`` is
    stored as SQL NULL.

    Args:
        sqlite_type_name: ``"TEXT"`` or ``"JSON"``: the column's declared type on
            SQLite. Either way the value is stored as JSON text and decoded here.
    """

    impl = sa.Text
    cache_ok = True

    def __init__(self, *, sqlite_type_name: str = "TEXT") -> None:
        super().__init__()
        self.sqlite_type_name = sqlite_type_name

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.JSONB(none_as_null=True))
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.LONGTEXT())
        if dialect.name == "sqlite" and self.sqlite_type_name == "JSON":
            return dialect.type_descriptor(_SQLiteJSONText())
        return dialect.type_descriptor(sa.Text())

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return json.dumps(value, separators=(",", ":"))

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Any:
        if value is None or not isinstance(value, str | bytes):
            return value
        if dialect.name == "postgresql":
            return value
        try:
            return json.loads(value)
        except ValueError:
            return InvalidJSON(value)


def primary_key_type(key_type: str) -> sa.types.TypeEngine[Any]:
    """Return the type of primary keys and key references (R-DM-20..22).

    Args:
        key_type: ``"bigint"`` or ``"uuid"``.

    Returns:
        ``BIGINT`` (``INTEGER`` on SQLite, which autoincrements only that) or ``UUID``.

    Raises:
        StepConfigurationError: ``key_type`` is neither; the message lists both.
    """
    if key_type == "bigint":
        # SQLite autoincrements only INTEGER PRIMARY KEY columns.
        return sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    if key_type == "uuid":
        return sa.Uuid()
    raise StepConfigurationError(
        f"key_type must be 'bigint' or 'uuid', got {key_type!r}"
    )


def table_once(
    metadata: sa.MetaData, name: str, *columns: sa.schema.SchemaItem
) -> sa.Table:
    """Return the table ``name`` of ``metadata``, defining it from ``columns`` once.

    :func:`flask_geneva.models.factory.build_models` calls the table functions of
    the optional tables with the host's ``db.metadata``, so ``db.create_all()``
    creates them, and the install unit of each matches its definition.

    Args:
        metadata: The host's metadata.
        name: The table's name (one of :mod:`flask_geneva.db.states`).
        columns: Its columns, used only if ``metadata`` has no such table yet.
    """
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    return sa.Table(name, metadata, *columns)


def as_dict(value: Any) -> dict[str, Any]:
    """Return a JSON column value as a new dict, or ``{}`` when it is not a mapping."""
    return dict(value) if isinstance(value, Mapping) else {}
