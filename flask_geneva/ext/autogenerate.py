"""Autogenerate hygiene: hide from Alembic what only our migrations manage.

:func:`register_autogenerate_filter` keeps ``flask db migrate``/``flask db check``
from proposing changes to the MySQL/MariaDB generated key columns and the
dialect-specific indexes of our two tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

import sqlalchemy as sa
from flask import appcontext_pushed

from flask_geneva.db.install.units import OUR_TABLES
from flask_geneva.db.install.units import STEP_EXECUTIONS_TABLE
from flask_geneva.db.install.units import WORKFLOWS_TABLE

if TYPE_CHECKING:
    from flask import Flask

__all__ = ["include_object", "register_autogenerate_filter"]

# Objects only our migrations manage, hidden from autogenerate: the MySQL/MariaDB
# generated key columns (not in the ORM metadata) and the indexes whose definition
# differs per dialect (partial on PostgreSQL/SQLite, generated-column or composite
# on MySQL/MariaDB).
_DIALECT_SPECIFIC_INDEXES = frozenset(
    {
        "index_geneva_drive_workflows_unique_ongoing",
        "index_geneva_drive_step_executions_one_active",
        "index_geneva_drive_step_executions_in_progress_started_at",
        "index_geneva_drive_workflows_deadline",
    }
)
_GENERATED_COLUMNS = frozenset(
    {
        (WORKFLOWS_TABLE, "ongoing_unique_key"),
        (STEP_EXECUTIONS_TABLE, "active_unique_key"),
    }
)


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
        dialects = info.get("geneva_dialects")
        if (
            not reflected
            and dialects
            and connection is not None
            and connection.dialect.name not in dialects
        ):
            # One name, one form per dialect (the deadline index, R-DL-10):
            # only the form this database builds is compared.
            return False
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
