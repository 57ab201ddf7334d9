"""geneva_drive_create_step_executions

flask_geneva schema unit 2 of 9: create the geneva_drive_step_executions table.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: 8fa898961425
Revises: 3f3e35430bb6
Create Date: 2026-11-29 20:54:19+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = "8fa898961425"
down_revision = "3f3e35430bb6"
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = "create_step_executions"
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


ONE_ACTIVE = "index_geneva_drive_step_executions_one_active"
PLAIN_INDEXES = (
    ("index_geneva_drive_step_executions_on_workflow_id", ["workflow_id"]),
    ("index_geneva_drive_step_executions_on_state", ["state"]),
    ("index_geneva_drive_step_executions_on_scheduled_for", ["scheduled_for"]),
    ("index_geneva_drive_step_executions_scheduled", ["state", "scheduled_for"]),
    (
        "index_geneva_drive_step_executions_on_workflow_and_created_at",
        ["workflow_id", "created_at"],
    ),
    (
        "index_geneva_drive_step_executions_on_workflow_id_and_state",
        ["workflow_id", "state"],
    ),
)


def upgrade():
    if not _has_table(STEP_EXECUTIONS, offline=False):
        id_options = {}
        if KEY_TYPE == "uuid" and ID_SERVER_DEFAULT is not None:
            id_options["server_default"] = sa.text(ID_SERVER_DEFAULT)
        op.create_table(
            STEP_EXECUTIONS,
            sa.Column("id", _key_type(), primary_key=True, **id_options),
            sa.Column("workflow_id", _key_type(), nullable=False),
            sa.Column("step_name", sa.String(255), nullable=False),
            sa.Column(
                "state", sa.String(255), nullable=False, server_default="scheduled"
            ),
            sa.Column("outcome", sa.String(255), nullable=True),
            sa.Column("scheduled_for", _timestamp(), nullable=False),
            sa.Column("started_at", _timestamp(), nullable=True),
            sa.Column("completed_at", _timestamp(), nullable=True),
            sa.Column("failed_at", _timestamp(), nullable=True),
            sa.Column("canceled_at", _timestamp(), nullable=True),
            sa.Column("skipped_at", _timestamp(), nullable=True),
            sa.Column("error_class_name", sa.String(255), nullable=True),
            sa.Column("error_message", sa.Text(), nullable=True),
            sa.Column("error_backtrace", sa.Text(), nullable=True),
            sa.Column("job_id", sa.String(255), nullable=True),
            sa.Column("metadata", _json_document(), nullable=True),
            sa.Column("created_at", _timestamp(), nullable=False),
            sa.Column("updated_at", _timestamp(), nullable=False),
            # Created with the table only (R-DM-08). Both key columns are created
            # here with one type, so MySQL/MariaDB get the constraint too.
            sa.ForeignKeyConstraint(
                ["workflow_id"], [f"{WORKFLOWS}.id"], ondelete="CASCADE"
            ),
        )
    for name, columns in PLAIN_INDEXES:
        if not _has_index(STEP_EXECUTIONS, name, offline=False):
            op.create_index(name, STEP_EXECUTIONS, columns)
    if not _has_index(STEP_EXECUTIONS, ONE_ACTIVE, offline=False):
        _create_one_active_index()


def _create_one_active_index():
    # At most one scheduled or in_progress execution per workflow (R-DM-09..11).
    if _is_mysql():
        if not _has_column(STEP_EXECUTIONS, "active_unique_key", offline=False):
            expression = (
                f"CASE WHEN {_q('state')} IN ('scheduled','in_progress') "
                f"THEN CAST({_q('workflow_id')} AS CHAR) ELSE NULL END"
            )
            op.add_column(
                STEP_EXECUTIONS, _mysql_key_column("active_unique_key", expression)
            )
        op.create_index(ONE_ACTIVE, STEP_EXECUTIONS, ["active_unique_key"], unique=True)
        return
    where = sa.text(f"{_q('state')} IN ('scheduled','in_progress')")
    op.create_index(
        ONE_ACTIVE,
        STEP_EXECUTIONS,
        ["workflow_id"],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade():
    # The generated column and every index go with the table (R-MIG-09).
    if _has_table(STEP_EXECUTIONS, offline=True):
        op.drop_table(STEP_EXECUTIONS)
