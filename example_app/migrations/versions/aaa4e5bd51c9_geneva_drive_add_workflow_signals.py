"""geneva_drive_add_workflow_signals

flask_geneva schema unit 13 of 17: create geneva_drive_signals and add the waiting columns to step_executions.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: aaa4e5bd51c9
Revises: 343134510fc8
Create Date: 2026-12-03 05:29:30+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = 'aaa4e5bd51c9'
down_revision = '343134510fc8'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'add_workflow_signals'
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


SIGNALS = "geneva_drive_signals"
SIGNAL_STATE_INDEX = "index_geneva_drive_signals_on_workflow_state_created"
SIGNAL_KEY_INDEX = "index_geneva_drive_signals_on_workflow_and_key"
WAIT_DEADLINE_INDEX = "index_geneva_drive_step_executions_on_state_and_wait_deadline"


def upgrade():
    # Workflow signals (R-WSIG-02..04): external events delivered to a workflow,
    # buffered until a `wait_for` step claims them. No foreign key to the
    # workflows table: housekeeping deletes a cleaned-up workflow's signals
    # first, in batches, on every database alike.
    if not _has_table(SIGNALS, offline=False):
        id_options = {}
        if KEY_TYPE == "uuid" and ID_SERVER_DEFAULT is not None:
            id_options["server_default"] = sa.text(ID_SERVER_DEFAULT)
        op.create_table(
            SIGNALS,
            sa.Column("id", _key_type(), primary_key=True, **id_options),
            sa.Column("workflow_id", _key_type(), nullable=False),
            sa.Column("name", sa.String(255), nullable=False),
            sa.Column("payload", _json_document(), nullable=True),
            sa.Column("idempotency_key", sa.String(255), nullable=True),
            sa.Column("state", sa.String(32), nullable=False, server_default="pending"),
            sa.Column("step_name", sa.String(255), nullable=True),
            sa.Column("matcher_error", sa.Text(), nullable=True),
            sa.Column("created_at", _timestamp(), nullable=False),
            sa.Column("claimed_at", _timestamp(), nullable=True),
            sa.Column("consumed_at", _timestamp(), nullable=True),
            sa.Column("updated_at", _timestamp(), nullable=False),
        )
    if not _has_index(SIGNALS, SIGNAL_STATE_INDEX, offline=False):
        op.create_index(
            SIGNAL_STATE_INDEX, SIGNALS, ["workflow_id", "state", "created_at"]
        )
    if not _has_index(SIGNALS, SIGNAL_KEY_INDEX, offline=False):
        # NULL keys never collide (every dialect): only keyed deliveries dedupe.
        op.create_index(
            SIGNAL_KEY_INDEX, SIGNALS, ["workflow_id", "idempotency_key"], unique=True
        )
    # A parked execution (state 'waiting') names the signal it claimed, when it
    # parked and until when it waits (R-WSIG-10..15).
    if not _has_column(STEP_EXECUTIONS, "signal_id", offline=False):
        op.add_column(
            STEP_EXECUTIONS, sa.Column("signal_id", _key_type(), nullable=True)
        )
    if not _has_column(STEP_EXECUTIONS, "waiting_since", offline=False):
        op.add_column(
            STEP_EXECUTIONS, sa.Column("waiting_since", _timestamp(), nullable=True)
        )
    if not _has_column(STEP_EXECUTIONS, "wait_deadline", offline=False):
        op.add_column(
            STEP_EXECUTIONS, sa.Column("wait_deadline", _timestamp(), nullable=True)
        )
    if not _has_index(STEP_EXECUTIONS, WAIT_DEADLINE_INDEX, offline=False):
        op.create_index(
            WAIT_DEADLINE_INDEX, STEP_EXECUTIONS, ["state", "wait_deadline"]
        )


def downgrade():
    if _has_index(STEP_EXECUTIONS, WAIT_DEADLINE_INDEX, offline=True):
        op.drop_index(WAIT_DEADLINE_INDEX, table_name=STEP_EXECUTIONS)
    for column in ("wait_deadline", "waiting_since", "signal_id"):
        if _has_column(STEP_EXECUTIONS, column, offline=True):
            op.drop_column(STEP_EXECUTIONS, column)
    if _has_table(SIGNALS, offline=True):
        op.drop_table(SIGNALS)
