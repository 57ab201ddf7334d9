"""geneva_drive_add_list_indexes

flask_geneva schema unit 23 of 23: index the admin lists' keyset sort and executions by error class.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: 32769a8c62c0
Revises: 81066e52024e
Create Date: 2026-12-07 05:30:47+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = '32769a8c62c0'
down_revision = '81066e52024e'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'add_list_indexes'
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


# The admin's lists at scale (R-ADM-151, R-ADM-154, R-DM-02).
#
# The workflows list sorted by transitioned_at is read from a row's
# (transitioned_at, id) key, and its NULL rows (the ongoing workflows) by id.
# An index on (transitioned_at, id) serves both parts as one index range, where
# the transitioned_at index alone makes PostgreSQL read every ongoing workflow
# (or walk the primary key past every finished one) to find a page of NULL
# rows. It replaces that index: housekeeping's cleanup (R-HK-14) reads the same
# leading column.
KEYSET_INDEX = "index_geneva_drive_workflows_on_transitioned_at_and_id"
KEYSET_COLUMNS = ["transitioned_at", "id"]
OLD_INDEX = "index_geneva_drive_workflows_on_transitioned_at"
OLD_COLUMNS = ["transitioned_at"]
# The executions list's error class filter and its count read the few
# executions with an error class from this partial index instead of scanning
# every execution. MariaDB has no partial indexes and an index over every
# execution would slow every write for one filter: none there (as R-DM-16).
ERROR_CLASS_INDEX = "index_geneva_drive_step_executions_on_error_class_name"


def _create(table, name, columns, **where):
    if _dialect().name == "postgresql":
        # Built without blocking writes; CONCURRENTLY cannot run inside a
        # transaction (R-MIG-08).
        with op.get_context().autocommit_block():
            op.create_index(
                name, table, columns, postgresql_concurrently=True, **where
            )
    else:
        op.create_index(name, table, columns, **where)


def _drop(table, name):
    if _dialect().name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(name, table_name=table, postgresql_concurrently=True)
    else:
        op.drop_index(name, table_name=table)


def upgrade():
    # The new index first: the cleanup and the sort always have one.
    if not _has_index(WORKFLOWS, KEYSET_INDEX, offline=False):
        _create(WORKFLOWS, KEYSET_INDEX, KEYSET_COLUMNS)
    if _has_index(WORKFLOWS, OLD_INDEX, offline=True):
        _drop(WORKFLOWS, OLD_INDEX)
    if _is_mysql() or _has_index(STEP_EXECUTIONS, ERROR_CLASS_INDEX, offline=False):
        return
    where = sa.text(f"{_q('error_class_name')} IS NOT NULL")
    _create(
        STEP_EXECUTIONS,
        ERROR_CLASS_INDEX,
        ["error_class_name"],
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade():
    if not _is_mysql() and _has_index(STEP_EXECUTIONS, ERROR_CLASS_INDEX, offline=True):
        _drop(STEP_EXECUTIONS, ERROR_CLASS_INDEX)
    if not _has_index(WORKFLOWS, OLD_INDEX, offline=False):
        _create(WORKFLOWS, OLD_INDEX, OLD_COLUMNS)
    if _has_index(WORKFLOWS, KEYSET_INDEX, offline=True):
        _drop(WORKFLOWS, KEYSET_INDEX)
