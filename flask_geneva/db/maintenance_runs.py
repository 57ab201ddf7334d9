"""The maintenance runs table and every SQL statement on it (R-HK-40..45).

``geneva_drive_maintenance_runs`` holds one row per periodic job
(``"dispatcher"``, ``"housekeeping"``): when its latest run started and
finished, how it ended, what it counted and which process ran it. The engine
(:mod:`flask_geneva.engine.operators.maintenance_runs`) writes it at the start and the
end of
every run; ``flask geneva status`` and the admin's overview read it. The table
is optional: without the ``add_maintenance_runs`` install unit nothing here is
called (R-HK-45).

The start of a run is one upsert (``INSERT ... ON CONFLICT (name) DO UPDATE``
on PostgreSQL and SQLite, ``INSERT ... ON DUPLICATE KEY UPDATE`` on
MySQL/MariaDB), so two runs starting at once never fail on the primary key;
the end of a run is an UPDATE guarded by the run's id, so a run that a later
one superseded does not overwrite the later one's row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import table_once
from flask_geneva.db.states import MAINTENANCE_RUNS_TABLE

__all__ = [
    "RUNNING",
    "RunStart",
    "maintenance_runs_table",
    "record_finish",
    "record_start",
    "run_rows",
]

#: ``outcome`` of a run that has not finished (yet, or ever: its process died).
RUNNING = "running"
#: Longest stored error text, in characters.
ERROR_LENGTH = 1000


@dataclasses.dataclass(frozen=True)
class RunStart:
    """What is recorded when a periodic job starts (R-HK-40).

    Attributes:
        name: The job: ``"dispatcher"`` or ``"housekeeping"``.
        run_id: A fresh UUID string naming this run.
        started_at: When it started (aware UTC).
        hostname: The machine's host name.
        pid: The operating-system process id.
        node_name: The Celery node name (``celery@host``) when a Celery task
            runs it, else None.
    """

    name: str
    run_id: str
    started_at: datetime
    hostname: str
    pid: int
    node_name: str | None


def maintenance_runs_table(metadata: sa.MetaData) -> sa.Table:
    """The maintenance runs table, defined once per metadata (R-HK-40)."""
    return table_once(
        metadata,
        MAINTENANCE_RUNS_TABLE,
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("node_name", sa.String(255), nullable=True),
        sa.Column("last_succeeded_at", UTCDateTime(), nullable=True),
    )


def record_start(connection: sa.Connection, table: sa.Table, start: RunStart) -> None:
    """Upsert the job's row as running (R-HK-40, R-HK-41).

    The row's previous run is replaced (finish, outcome, summary and error
    cleared); ``last_succeeded_at`` is kept. Safe when two runs start at once:
    the database resolves the conflict on the primary key.

    Raises:
        NotImplementedError: The dialect is none of PostgreSQL, SQLite,
            MySQL/MariaDB.
        sqlalchemy.exc.SQLAlchemyError: The database refused the write.
    """
    values: dict[str, Any] = {
        "run_id": start.run_id,
        "started_at": start.started_at,
        "finished_at": None,
        "outcome": RUNNING,
        "summary": None,
        "error": None,
        "hostname": start.hostname[:255],
        "pid": start.pid,
        "node_name": None if start.node_name is None else start.node_name[:255],
    }
    dialect = connection.dialect.name
    statement: Any
    if dialect == "postgresql":
        pg_insert = postgresql.insert(table).values(name=start.name, **values)
        statement = pg_insert.on_conflict_do_update(
            index_elements=[table.c.name],
            set_={key: pg_insert.excluded[key] for key in values},
        )
    elif dialect == "sqlite":
        lite_insert = sqlite.insert(table).values(name=start.name, **values)
        statement = lite_insert.on_conflict_do_update(
            index_elements=[table.c.name],
            set_={key: lite_insert.excluded[key] for key in values},
        )
    elif dialect in ("mysql", "mariadb"):
        my_insert = mysql.insert(table).values(name=start.name, **values)
        statement = my_insert.on_duplicate_key_update(
            {key: my_insert.inserted[key] for key in values}
        )
    else:
        raise NotImplementedError(
            f"maintenance runs are recorded on postgresql, sqlite, mysql and "
            f"mariadb, not on {dialect!r}"
        )
    connection.execute(statement)


def record_finish(
    connection: sa.Connection,
    table: sa.Table,
    *,
    name: str,
    run_id: str,
    finished_at: datetime,
    outcome: str,
    summary: str | None,
    error: str | None,
) -> bool:
    """Record how the run ended, if its row still names it (R-HK-41).

    Args:
        connection: The connection to write with.
        table: The maintenance runs table.
        name: The job.
        run_id: The run's id, as :func:`record_start` wrote it.
        finished_at: When it ended (aware UTC).
        outcome: ``"succeeded"`` or ``"failed"``.
        summary: The run's counts as JSON text, or None.
        error: ``"<class>: <message>"`` of a failed run, or None.

    Returns:
        False when a later run replaced the row (nothing written).
    """
    values: dict[str, Any] = {
        "finished_at": finished_at,
        "outcome": outcome,
        "summary": summary,
        "error": None if error is None else error[:ERROR_LENGTH],
    }
    if outcome == "succeeded":
        values["last_succeeded_at"] = finished_at
    result = connection.execute(
        sa.update(table)
        .where(table.c.name == name, table.c.run_id == run_id)
        .values(**values)
    )
    return bool(result.rowcount)


def run_rows(connection: sa.Connection, table: sa.Table) -> Sequence[Any]:
    """Every job's latest run, by name (for status and the admin, R-HK-42)."""
    return connection.execute(sa.select(table).order_by(table.c.name)).all()
