"""geneva_drive_allow_null_hero

flask_geneva schema unit 7 of 9: allow NULL hero_type and hero_id on workflows.

Written by `flask geneva install` (flask_geneva 0.1.0.dev0). The file only needs
Alembic and SQLAlchemy, so it keeps working when flask_geneva changes. Each step
looks at the live schema first and skips what is already there, so it is safe to
run against a database that already has the change (R-MIG-04).

Revision ID: a5903b15df63
Revises: 23db8359f46c
Create Date: 2026-11-29 20:54:19+00:00
"""

import sqlalchemy as sa
from alembic import context
from alembic import op
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision = "a5903b15df63"
down_revision = "23db8359f46c"
branch_labels = None
depends_on = None

# `flask geneva install` reads these to find the units already written (R-MIG-03).
GENEVA_DRIVE_UNIT = "allow_null_hero"
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


HERO_COLUMNS = ("hero_type", "hero_id")
UNIQUE_ONGOING = "index_geneva_drive_workflows_unique_ongoing"
SWAP_TABLE = "_geneva_drive_workflows_swap"


def upgrade():
    # Workflows without a hero (R-MIG-07). Skipped when the columns already allow
    # NULL, which is the case for every table created by unit 1.
    if context.is_offline_mode():
        if _dialect().name == "sqlite":
            return  # the SQLite table swap needs to read the live schema
        _alter_hero_columns(nullable=True)
        return
    infos = [_column(WORKFLOWS, name) for name in HERO_COLUMNS]
    if all(info is None or info["nullable"] for info in infos):
        return
    if _dialect().name == "sqlite":
        _swap_sqlite_table()
    else:
        _alter_hero_columns(nullable=True)


def _alter_hero_columns(nullable):
    for name in HERO_COLUMNS:
        info = _column(WORKFLOWS, name)
        existing_type = (
            info["type"]
            if info
            else (sa.String(255) if name == "hero_type" else _key_type())
        )
        op.alter_column(WORKFLOWS, name, nullable=nullable, existing_type=existing_type)


def _swap_sqlite_table():
    # SQLite cannot change NULL-ability in place: copy into a new table and swap.
    # Dropping the old table with foreign keys enforced would cascade-delete every
    # step execution, so enforcement is switched off around the swap; the PRAGMA
    # only works outside a transaction.
    enforced = bool(op.get_bind().exec_driver_sql("PRAGMA foreign_keys").scalar())
    if enforced:
        _set_foreign_keys("OFF")
    bind = op.get_bind()
    inspector = _inspector()
    infos = inspector.get_columns(WORKFLOWS)
    primary_key = set(inspector.get_pk_constraint(WORKFLOWS)["constrained_columns"])
    table_sql = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
        (WORKFLOWS,),
    ).scalar()
    columns = []
    for info in infos:
        default = info.get("default")
        columns.append(
            sa.Column(
                info["name"],
                info["type"],
                primary_key=info["name"] in primary_key,
                nullable=True if info["name"] in HERO_COLUMNS else info["nullable"],
                server_default=None if default is None else sa.text(default),
            )
        )
    op.create_table(
        SWAP_TABLE,
        *columns,
        sqlite_autoincrement="AUTOINCREMENT" in (table_sql or "").upper(),
    )
    names = ", ".join(_q(info["name"]) for info in infos)
    op.execute(
        f"INSERT INTO {_q(SWAP_TABLE)} ({names}) SELECT {names} FROM {_q(WORKFLOWS)}"
    )
    op.drop_table(WORKFLOWS)
    op.rename_table(SWAP_TABLE, WORKFLOWS)
    op.create_index("index_geneva_drive_workflows_on_type", WORKFLOWS, ["type"])
    op.create_index("index_geneva_drive_workflows_on_state", WORKFLOWS, ["state"])
    op.create_index(
        "index_geneva_drive_workflows_on_hero_type_and_hero_id",
        WORKFLOWS,
        ["hero_type", "hero_id"],
    )
    op.create_index(
        UNIQUE_ONGOING,
        WORKFLOWS,
        ["type", "hero_type", "hero_id"],
        unique=True,
        sqlite_where=sa.text(
            f"{_q('state')} NOT IN ('finished','canceled') "
            f"AND {_q('allow_multiple')} = 0"
        ),
    )
    problems = bind.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise RuntimeError(
            f"foreign key check failed after rebuilding {WORKFLOWS}: {problems[:5]}"
        )
    if enforced:
        _set_foreign_keys("ON")


def _set_foreign_keys(value):
    # The PRAGMA is ignored inside a transaction. An engine whose "begin" listener
    # always emits BEGIN opens one even in autocommit mode, so end it first.
    with op.get_context().autocommit_block():
        dbapi_connection = op.get_bind().connection.dbapi_connection
        if dbapi_connection.in_transaction:
            dbapi_connection.execute("COMMIT")
        dbapi_connection.execute(f"PRAGMA foreign_keys={value}")
        if dbapi_connection.execute("PRAGMA foreign_keys").fetchone()[0] != (
            value == "ON"
        ):
            raise RuntimeError(f"could not set PRAGMA foreign_keys={value}")


def downgrade():
    if _dialect().name == "sqlite":
        raise RuntimeError(
            f"revision {revision} ({GENEVA_DRIVE_UNIT}) cannot be reverted on SQLite: "
            "its table swap is irreversible (R-MIG-07). To remove the flask_geneva "
            f"tables anyway, run `flask db stamp {down_revision or 'base'}` and "
            "downgrade again"
        )
    if not context.is_offline_mode() and not _has_table(WORKFLOWS, offline=True):
        return
    _alter_hero_columns(nullable=False)
