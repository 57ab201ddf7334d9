"""geneva_drive_add_child_workflows

flask_geneva schema unit 19 of 19: add the child and result columns to workflows and create the child counts.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: ad5321c75df0
Revises: 5181b87eb458
Create Date: 2026-12-06 16:10:22+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = 'ad5321c75df0'
down_revision = '5181b87eb458'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'add_child_workflows'
KEY_TYPE = 'bigint'
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


CHILD_COUNTS = "geneva_drive_child_counts"
UNIQUE_CHILD_INDEX = "index_geneva_drive_workflows_unique_child"
WAKE_DUE_INDEX = "index_geneva_drive_child_counts_on_wake_due_at"
CANCEL_DUE_INDEX = "index_geneva_drive_child_counts_on_cancel_due_at"


def _exact_text(length):
    # Step names and child keys compare byte for byte (R-CHD-11): MySQL's and
    # MariaDB's default collations fold case and accents and pad trailing
    # spaces, so "Acme" and "acme" would be one child.
    if not _is_mysql():
        return sa.String(length)
    dialect = _dialect()
    if getattr(dialect, "is_mariadb", False) or dialect.name == "mariadb":
        collation = "utf8mb4_nopad_bin"
    elif tuple(getattr(dialect, "server_version_info", None) or (8,)) >= (8,):
        collation = "utf8mb4_0900_bin"
    else:
        collation = "utf8mb4_bin"
    return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)


def _workflow_columns():
    # Nullable, without defaults: added without rewriting the table on
    # PostgreSQL (11+) and MariaDB (10.3+, instant ADD COLUMN).
    return (
        sa.Column("parent_workflow_id", _key_type(), nullable=True),
        sa.Column("parent_execution_id", _key_type(), nullable=True),
        sa.Column("parent_step_name", _exact_text(255), nullable=True),
        sa.Column("child_key", _exact_text(255), nullable=True),
        sa.Column("parent_close", sa.String(16), nullable=True),
        sa.Column("child_settled", sa.String(16), nullable=True),
        sa.Column("result", _json_document(), nullable=True),
    )


def upgrade():
    # Child workflows and results (R-CHD-01, R-CHD-10): a child's link to its
    # parent (no foreign keys: a cleaned-up parent leaves its children
    # readable), the workflow's result, and one counter row per parent.
    for column in _workflow_columns():
        if not _has_column(WORKFLOWS, column.name, offline=False):
            op.add_column(WORKFLOWS, column)
    if not _has_table(CHILD_COUNTS, offline=False):
        op.create_table(
            CHILD_COUNTS,
            sa.Column(
                "parent_workflow_id", _key_type(), primary_key=True, autoincrement=False
            ),
            sa.Column("started", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("settled", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("failed", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("waiting_execution_id", _key_type(), nullable=True),
            sa.Column("wake_at_settled", sa.Integer(), nullable=True),
            sa.Column("waiting_queue", sa.String(255), nullable=True),
            sa.Column("waiting_priority", sa.Integer(), nullable=True),
            sa.Column("wake_due_at", _timestamp(), nullable=True),
            sa.Column("cancel_due_at", _timestamp(), nullable=True),
            sa.Column("updated_at", _timestamp(), nullable=False),
        )
    for name, columns in (
        (WAKE_DUE_INDEX, ["wake_due_at"]),
        (CANCEL_DUE_INDEX, ["cancel_due_at"]),
    ):
        if not _has_index(CHILD_COUNTS, name, offline=False):
            op.create_index(name, CHILD_COUNTS, columns)
    if not _has_index(WORKFLOWS, UNIQUE_CHILD_INDEX, offline=False):
        columns = ["parent_workflow_id", "parent_step_name", "child_key"]
        if _dialect().name == "postgresql":
            # Built without blocking writes to the workflows table; CONCURRENTLY
            # cannot run inside a transaction (R-MIG-08).
            with op.get_context().autocommit_block():
                op.create_index(
                    UNIQUE_CHILD_INDEX,
                    WORKFLOWS,
                    columns,
                    unique=True,
                    postgresql_concurrently=True,
                )
        else:
            op.create_index(UNIQUE_CHILD_INDEX, WORKFLOWS, columns, unique=True)


def downgrade():
    if _has_index(WORKFLOWS, UNIQUE_CHILD_INDEX, offline=True):
        if _dialect().name == "postgresql":
            with op.get_context().autocommit_block():
                op.drop_index(
                    UNIQUE_CHILD_INDEX,
                    table_name=WORKFLOWS,
                    postgresql_concurrently=True,
                )
        else:
            op.drop_index(UNIQUE_CHILD_INDEX, table_name=WORKFLOWS)
    if _has_table(CHILD_COUNTS, offline=True):
        op.drop_table(CHILD_COUNTS)
    for column in reversed(_workflow_columns()):
        if _has_column(WORKFLOWS, column.name, offline=True):
            op.drop_column(WORKFLOWS, column.name)
