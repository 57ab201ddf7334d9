"""geneva_drive_add_dispatch_index

flask_geneva schema unit 24 of 24: index the deferred executions the dispatcher publishes.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: e702e022a9ff
Revises: 32769a8c62c0
Create Date: 2026-12-07 05:40:47+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = 'e702e022a9ff'
down_revision = '32769a8c62c0'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'add_dispatch_index'
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


# The dispatcher's deferred pass at scale (R-DSP-02, R-DM-18): it reads the
# deferred executions due within the broker horizon, oldest first. Through the
# (state, scheduled_for) index it read every scheduled execution due by then
# (those of paused workflows and those published with an eta as well) to find
# the few deferred ones; this partial index holds the deferred scheduled rows
# only, in the pass's order. MariaDB has no partial indexes and an index over
# every execution would slow every write: none there (as R-DM-16).
INDEX = "index_geneva_drive_step_executions_deferred"
COLUMNS = ["scheduled_for", "id"]


def upgrade():
    if _is_mysql() or _has_index(STEP_EXECUTIONS, INDEX, offline=False):
        return
    where = sa.text(
        f"{_q('state')} = 'scheduled' AND {_q('job_id')} = 'geneva:deferred'"
    )
    if _dialect().name == "postgresql":
        # Built without blocking writes; CONCURRENTLY cannot run inside a
        # transaction (R-MIG-08).
        with op.get_context().autocommit_block():
            op.create_index(
                INDEX,
                STEP_EXECUTIONS,
                COLUMNS,
                postgresql_where=where,
                postgresql_concurrently=True,
            )
        return
    op.create_index(INDEX, STEP_EXECUTIONS, COLUMNS, sqlite_where=where)


def downgrade():
    if _is_mysql() or not _has_index(STEP_EXECUTIONS, INDEX, offline=True):
        return
    if _dialect().name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(
                INDEX, table_name=STEP_EXECUTIONS, postgresql_concurrently=True
            )
        return
    op.drop_index(INDEX, table_name=STEP_EXECUTIONS)
