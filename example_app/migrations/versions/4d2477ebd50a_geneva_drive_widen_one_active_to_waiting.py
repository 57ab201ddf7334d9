"""geneva_drive_widen_one_active_to_waiting

flask_geneva schema unit 16 of 17: widen the one-active index to waiting executions (PostgreSQL, SQLite).

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: 4d2477ebd50a
Revises: 4241adbbb36d
Create Date: 2026-12-03 05:29:30+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = '4d2477ebd50a'
down_revision = '4241adbbb36d'
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = 'widen_one_active_to_waiting'
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


# One execution per workflow may be scheduled, in_progress or waiting
# (R-WSIG-16); this unit lets PostgreSQL and SQLite enforce it (R-DM-17). On
# MySQL/MariaDB (no partial indexes) it does nothing: widening the generated
# column there means ALTER TABLE ... MODIFY, which rewrites the whole table; the
# engine keeps the rule under the workflow lock there, as before.
ONE_ACTIVE = "index_geneva_drive_step_executions_one_active"
BUILDING = "index_geneva_drive_step_executions_one_active_building"
NARROW = ("scheduled", "in_progress")
WIDE = ("scheduled", "in_progress", "waiting")


def _predicate(states):
    listed = ",".join(f"'{state}'" for state in states)
    return sa.text(f"{_q('state')} IN ({listed})")


def _index_sql(name):
    # The live definition of an index, or None (online only).
    bind = op.get_bind()
    if _dialect().name == "postgresql":
        return bind.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :name"),
            {"name": name},
        ).scalar()
    return bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"),
        {"name": name},
    ).scalar()


def _is_wide(offline):
    if context.is_offline_mode():
        return offline
    definition = _index_sql(ONE_ACTIVE)
    return definition is not None and "waiting" in definition


def _refuse_duplicates():
    # Names the workflows that already break the wider rule, before building.
    if context.is_offline_mode():
        return
    rows = op.get_bind().execute(
        sa.text(
            f"SELECT {_q('workflow_id')} FROM {STEP_EXECUTIONS} "
            f"WHERE {_q('state')} IN ('scheduled','in_progress','waiting') "
            f"GROUP BY {_q('workflow_id')} HAVING COUNT(*) > 1 "
            f"ORDER BY {_q('workflow_id')} LIMIT 101"
        )
    ).scalars().all()
    if rows:
        shown = ", ".join(str(row) for row in rows[:100])
        more = " and more" if len(rows) > 100 else ""
        raise RuntimeError(
            "geneva_drive_widen_one_active_to_waiting: these workflows have more "
            "than one scheduled, in_progress or waiting execution, so the wider "
            f"one-active index cannot be built: {shown}{more}. Cancel the extra "
            "executions (keep one per workflow), then upgrade again (R-DM-17)."
        )


def _replace(states):
    # Swaps the one-active index for one over `states`.
    if _dialect().name == "postgresql":
        # Built without blocking writes; CONCURRENTLY cannot run inside a
        # transaction (R-MIG-08). The old index guards its rule until the new
        # one is valid, and a leftover of a failed build is dropped first.
        with op.get_context().autocommit_block():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {BUILDING}")
            op.create_index(
                BUILDING,
                STEP_EXECUTIONS,
                ["workflow_id"],
                unique=True,
                postgresql_where=_predicate(states),
                postgresql_concurrently=True,
            )
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ONE_ACTIVE}")
            op.execute(f"ALTER INDEX {BUILDING} RENAME TO {ONE_ACTIVE}")
        return
    op.execute(f"DROP INDEX IF EXISTS {ONE_ACTIVE}")
    op.create_index(
        ONE_ACTIVE,
        STEP_EXECUTIONS,
        ["workflow_id"],
        unique=True,
        sqlite_where=_predicate(states),
    )


def upgrade():
    if _is_mysql() or _is_wide(offline=False):
        return
    _refuse_duplicates()
    _replace(WIDE)


def downgrade():
    if _is_mysql() or not _is_wide(offline=True):
        return
    _replace(NARROW)
