"""geneva_drive_create_workflows

flask_geneva schema unit 1 of 9: create the geneva_drive_workflows table.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: 3f3e35430bb6
Revises:
Create Date: 2026-11-29 20:54:19+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = "3f3e35430bb6"
down_revision = None
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = "create_workflows"
KEY_TYPE = "bigint"
ID_SERVER_DEFAULT = None

WORKFLOWS = "geneva_drive_workflows"
STEP_EXECUTIONS = "geneva_drive_step_executions"


def _dialect():
    return op.get_context().dialect


def _is_mysql():
    return _dialect().name in ("mysql", "mariadb")


def _q(name):
    # Raw SQL fragments quote every identifier (`cursor` is reserved on MariaDB).
    return _dialect().identifier_preparer.quote_identifier(name)


def _inspector():
    # A fresh inspector per question: earlier steps of this file changed the schema.
    return sa.inspect(op.get_bind())


def _has_table(table, offline):
    if context.is_offline_mode():
        return offline
    return _inspector().has_table(table)


def _column(table, column):
    if context.is_offline_mode() or not _inspector().has_table(table):
        return None
    for info in _inspector().get_columns(table):
        if info["name"] == column:
            return info
    return None


def _has_column(table, column, offline):
    if context.is_offline_mode():
        return offline
    return _column(table, column) is not None


def _has_index(table, index, offline):
    if context.is_offline_mode():
        return offline
    inspector = _inspector()
    if not inspector.has_table(table):
        return False
    return any(info["name"] == index for info in inspector.get_indexes(table))


def _key_type():
    if KEY_TYPE == "uuid":
        return sa.Uuid()
    # SQLite only auto-increments INTEGER PRIMARY KEY columns.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _timestamp():
    # Naive UTC; MySQL/MariaDB keep microseconds only with DATETIME(6) (R-DM-23).
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _json_document(sqlite_type=None):
    # PostgreSQL jsonb; MySQL/MariaDB LONGTEXT holding JSON text (MariaDB's json
    # alias adds a CHECK constraint that breaks on the reserved word `cursor`).
    json_type = sa.Text() if sqlite_type is None else sqlite_type
    return json_type.with_variant(postgresql.JSONB(), "postgresql").with_variant(
        mysql.LONGTEXT(), "mysql", "mariadb"
    )


def _mysql_key_column(name, expression):
    # A STORED generated column, case- and byte-exact, NULL for rows that must not
    # collide; a UNIQUE index on it stands in for a partial unique index.
    return sa.Column(
        name,
        mysql.VARCHAR(767, charset="utf8mb4", collation="utf8mb4_bin"),
        sa.Computed(expression, persisted=True),
        nullable=True,
    )


UNIQUE_ONGOING = "index_geneva_drive_workflows_unique_ongoing"
PLAIN_INDEXES = (
    ("index_geneva_drive_workflows_on_type", ["type"]),
    ("index_geneva_drive_workflows_on_state", ["state"]),
    ("index_geneva_drive_workflows_on_hero_type_and_hero_id", ["hero_type", "hero_id"]),
)


def upgrade():
    if not _has_table(WORKFLOWS, offline=False):
        id_options = {}
        if KEY_TYPE == "uuid" and ID_SERVER_DEFAULT is not None:
            id_options["server_default"] = sa.text(ID_SERVER_DEFAULT)
        op.create_table(
            WORKFLOWS,
            sa.Column("id", _key_type(), primary_key=True, **id_options),
            sa.Column("type", sa.String(255), nullable=False),
            sa.Column("hero_type", sa.String(255), nullable=True),
            sa.Column("hero_id", _key_type(), nullable=True),
            sa.Column("state", sa.String(255), nullable=False, server_default="ready"),
            sa.Column("current_step_name", sa.String(255), nullable=True),
            sa.Column("next_step_name", sa.String(255), nullable=True),
            sa.Column(
                "allow_multiple",
                sa.Boolean(),
                nullable=False,
                server_default=sa.false(),
            ),
            sa.Column("metadata", _json_document(), nullable=True),
            sa.Column("started_at", _timestamp(), nullable=True),
            sa.Column("transitioned_at", _timestamp(), nullable=True),
            sa.Column("created_at", _timestamp(), nullable=False),
            sa.Column("updated_at", _timestamp(), nullable=False),
        )
    for name, columns in PLAIN_INDEXES:
        if not _has_index(WORKFLOWS, name, offline=False):
            op.create_index(name, WORKFLOWS, columns)
    if not _has_index(WORKFLOWS, UNIQUE_ONGOING, offline=False):
        _create_unique_ongoing_index()


def _create_unique_ongoing_index():
    # One ongoing workflow per (type, hero_type, hero_id) unless allow_multiple;
    # a NULL hero column never collides (R-DM-03..06).
    if _is_mysql():
        if not _has_column(WORKFLOWS, "ongoing_unique_key", offline=False):
            separator = "CHAR(31)"  # cannot occur in names, unlike '-' (BTR-14)
            expression = (
                f"CASE WHEN {_q('state')} NOT IN ('finished','canceled') "
                f"AND {_q('allow_multiple')} = 0 "
                f"THEN CONCAT({_q('type')}, {separator}, {_q('hero_type')}, "
                f"{separator}, {_q('hero_id')}) ELSE NULL END"
            )
            op.add_column(
                WORKFLOWS, _mysql_key_column("ongoing_unique_key", expression)
            )
        op.create_index(UNIQUE_ONGOING, WORKFLOWS, ["ongoing_unique_key"], unique=True)
        return
    false = "false" if _dialect().name == "postgresql" else "0"
    where = sa.text(
        f"{_q('state')} NOT IN ('finished','canceled') "
        f"AND {_q('allow_multiple')} = {false}"
    )
    op.create_index(
        UNIQUE_ONGOING,
        WORKFLOWS,
        ["type", "hero_type", "hero_id"],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade():
    # The generated column and every index go with the table (R-MIG-09).
    if _has_table(WORKFLOWS, offline=True):
        op.drop_table(WORKFLOWS)
