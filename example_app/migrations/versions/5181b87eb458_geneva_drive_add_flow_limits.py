"""geneva_drive_add_flow_limits

flask_geneva schema unit 18 of 19: create the limit keys, waiters and starts tables (flow control by limits).

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: 5181b87eb458
Revises: 177c93c3e629
Create Date: 2026-12-06 16:10:22+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = '5181b87eb458'
down_revision = '177c93c3e629'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'add_flow_limits'
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


LIMIT_KEYS = "geneva_drive_limit_keys"
LIMIT_WAITERS = "geneva_drive_limit_waiters"
LIMIT_STARTS = "geneva_drive_limit_starts"
WAITERS_QUEUE_INDEX = "index_geneva_drive_limit_waiters_queue"
WAITERS_WORKFLOW_INDEX = "index_geneva_drive_limit_waiters_on_workflow_id"


def _exact_text(length):
    # Limit names and keys compare byte for byte (R-LIM-05, R-LIM-10). MySQL's
    # and MariaDB's default collations fold case and accents, pad trailing
    # spaces and (utf8mb4_general_ci) weigh every emoji alike, so "Acme" and
    # "acme" would share one key row; utf8mb4_bin still pads.
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


def upgrade():
    # Flow control by limits (R-LIM-10/11): one counter row per (limit, key),
    # the per-key mutex; the executions waiting for a slot, in priority order
    # then first come first served; and what each execution holds or waits for.
    if not _has_table(LIMIT_KEYS, offline=False):
        op.create_table(
            LIMIT_KEYS,
            sa.Column("limit_name", _exact_text(64), nullable=False),
            sa.Column("limit_key", _exact_text(255), nullable=False),
            sa.Column("running", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("granted", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("waiting", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("concurrency", sa.Integer(), nullable=True),
            sa.Column("rate", sa.Integer(), nullable=True),
            sa.Column("per_ms", sa.BigInteger(), nullable=True),
            sa.Column(
                "rate_seq", sa.BigInteger(), nullable=False, server_default="0"
            ),
            sa.Column("updated_at", _timestamp(), nullable=False),
            sa.PrimaryKeyConstraint("limit_name", "limit_key"),
        )
    if not _has_table(LIMIT_WAITERS, offline=False):
        op.create_table(
            LIMIT_WAITERS,
            sa.Column(
                "id",
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                primary_key=True,
                autoincrement=True,
            ),
            sa.Column("limit_name", _exact_text(64), nullable=False),
            sa.Column("limit_key", _exact_text(255), nullable=False),
            sa.Column("execution_id", _key_type(), nullable=False, unique=True),
            sa.Column("workflow_id", _key_type(), nullable=False),
            sa.Column("priority", sa.Integer(), nullable=False),
            sa.Column("neg_priority", sa.Integer(), nullable=False),
            sa.Column("queue", sa.String(255), nullable=True),
            sa.Column("waiting_since", _timestamp(), nullable=False),
            sa.Column("granted_at", _timestamp(), nullable=True),
            sa.Column("not_before", _timestamp(), nullable=True),
        )
    if not _has_table(LIMIT_STARTS, offline=False):
        # A rate-limited key's last `rate` start times (R-LIM-23), a ring.
        op.create_table(
            LIMIT_STARTS,
            sa.Column("limit_name", _exact_text(64), nullable=False),
            sa.Column("limit_key", _exact_text(255), nullable=False),
            sa.Column("slot", sa.Integer(), nullable=False),
            sa.Column("started_at", _timestamp(), nullable=False),
            sa.PrimaryKeyConstraint("limit_name", "limit_key", "slot"),
        )
    if not _has_index(LIMIT_WAITERS, WAITERS_QUEUE_INDEX, offline=False):
        op.create_index(
            WAITERS_QUEUE_INDEX,
            LIMIT_WAITERS,
            [
                "limit_name",
                "limit_key",
                "granted_at",
                "neg_priority",
                "waiting_since",
                "id",
            ],
        )
    if not _has_index(LIMIT_WAITERS, WAITERS_WORKFLOW_INDEX, offline=False):
        op.create_index(WAITERS_WORKFLOW_INDEX, LIMIT_WAITERS, ["workflow_id"])
    if not _has_column(STEP_EXECUTIONS, "limit_holds", offline=False):
        op.add_column(
            STEP_EXECUTIONS,
            sa.Column("limit_holds", _json_document(), nullable=True),
        )


def downgrade():
    if _has_column(STEP_EXECUTIONS, "limit_holds", offline=True):
        op.drop_column(STEP_EXECUTIONS, "limit_holds")
    if _has_table(LIMIT_STARTS, offline=True):
        op.drop_table(LIMIT_STARTS)
    if _has_table(LIMIT_WAITERS, offline=True):
        op.drop_table(LIMIT_WAITERS)
    if _has_table(LIMIT_KEYS, offline=True):
        op.drop_table(LIMIT_KEYS)
