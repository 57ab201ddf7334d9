"""geneva_drive_add_schedules

flask_geneva schema unit 20 of 21: create the schedules and schedule fires tables (recurring starts).

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: e25856542498
Revises: f31927619b6a
Create Date: 2026-12-06 20:40:12+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = 'e25856542498'
down_revision = 'f31927619b6a'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'add_schedules'
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


SCHEDULES = "geneva_drive_schedules"
SCHEDULE_FIRES = "geneva_drive_schedule_fires"
FIRES_STATE_INDEX = "index_geneva_drive_schedule_fires_on_state"


def _exact_text(length):
    # Schedule names compare byte for byte (R-SCHED-10): MySQL's and MariaDB's
    # default collations fold case and accents and pad trailing spaces.
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
    # Schedules (R-SCHED-10): one state row per schedule (paused, the last
    # fire and its outcome) and one row per fire, whose primary key
    # (schedule_name, fire_at) lets exactly one dispatcher fire a time; the
    # fire's progress over its heroes makes the fan-out resumable; the
    # schedule's row keeps its latest operator actions (who paused, resumed or
    # ran it now, when and via what).
    if not _has_table(SCHEDULES, offline=False):
        op.create_table(
            SCHEDULES,
            sa.Column("name", _exact_text(255), primary_key=True),
            sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
            sa.Column("paused_at", _timestamp(), nullable=True),
            sa.Column("fire_after", _timestamp(), nullable=False),
            sa.Column("last_fire_at", _timestamp(), nullable=True),
            sa.Column("last_outcome", sa.String(16), nullable=True),
            sa.Column("last_error", sa.Text(), nullable=True),
            sa.Column("updated_at", _timestamp(), nullable=False),
            # The latest operators' actions, a JSON list (R-SCHED-35).
            sa.Column("operator_actions", _json_document(), nullable=True),
        )
    if not _has_table(SCHEDULE_FIRES, offline=False):
        op.create_table(
            SCHEDULE_FIRES,
            sa.Column("schedule_name", _exact_text(255), nullable=False),
            sa.Column("fire_at", _timestamp(), nullable=False),
            sa.Column("kind", sa.String(16), nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("hero_cursor", sa.Text(), nullable=True),
            sa.Column("started", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("skipped", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("error", sa.Text(), nullable=True),
            sa.Column("created_at", _timestamp(), nullable=False),
            sa.Column("updated_at", _timestamp(), nullable=False),
            sa.Column("finished_at", _timestamp(), nullable=True),
            sa.PrimaryKeyConstraint("schedule_name", "fire_at"),
        )
    if not _has_index(SCHEDULE_FIRES, FIRES_STATE_INDEX, offline=False):
        op.create_index(FIRES_STATE_INDEX, SCHEDULE_FIRES, ["state"])


def downgrade():
    if _has_table(SCHEDULE_FIRES, offline=True):
        op.drop_table(SCHEDULE_FIRES)
    if _has_table(SCHEDULES, offline=True):
        op.drop_table(SCHEDULES)
