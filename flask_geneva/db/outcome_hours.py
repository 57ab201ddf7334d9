"""The outcome hours table and every SQL statement on it (R-ADM-58).

``geneva_drive_outcome_hours`` holds, for each whole UTC hour that housekeeping
counted (:mod:`flask_geneva.engine.operators.outcome_rollup`), the number of step
executions of
each workflow class that completed or failed in it, plus one marker row per
counted hour (``workflow_type`` and ``state`` empty, ``executions`` the hour's
total): an hour with a marker and no other row counted zero. The admin's
overview reads these rows instead of counting the executions again (R-ADM-54).
The table is optional: without the ``add_outcome_hours`` install unit nothing
here is called.

An hour is written by one INSERT of all its rows, marker first, in a
transaction of its own; the primary key ``(hour_start, workflow_type, state)``
makes a second writer of the same hour fail as a whole, so two housekeeping
runs counting at once never count an hour twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from flask_geneva.db.column_types import UTCDateTime
from flask_geneva.db.column_types import table_once
from flask_geneva.db.states import OUTCOME_HOURS_TABLE

__all__ = [
    "MARKER_STATE",
    "MARKER_TYPE",
    "counted_rows",
    "delete_hours_before",
    "outcome_hours_table",
    "record_hour",
]

#: ``workflow_type`` and ``state`` of an hour's marker row.
MARKER_TYPE = ""
MARKER_STATE = ""


def outcome_hours_table(metadata: sa.MetaData) -> sa.Table:
    """The counted outcome hours table, defined once per metadata (R-ADM-58)."""
    return table_once(
        metadata,
        OUTCOME_HOURS_TABLE,
        sa.Column("hour_start", UTCDateTime(), primary_key=True),
        sa.Column("workflow_type", sa.String(255), primary_key=True),
        sa.Column("state", sa.String(16), primary_key=True),
        sa.Column("executions", sa.BigInteger(), nullable=False),
    )


def counted_rows(
    connection: sa.Connection, table: sa.Table, start: datetime, end: datetime
) -> list[tuple[datetime, str, str, int]]:
    """The rows of the counted hours starting in ``[start, end)``, markers included.

    Args:
        connection: The connection to read with.
        table: The outcome hours table.
        start: The first hour's start (aware UTC).
        end: The end of the range (aware UTC, exclusive).

    Returns:
        ``(hour_start, workflow type, state, executions)`` rows; a marker has
        :data:`MARKER_TYPE` and :data:`MARKER_STATE`.
    """
    query = sa.select(
        table.c.hour_start, table.c.workflow_type, table.c.state, table.c.executions
    ).where(table.c.hour_start >= start, table.c.hour_start < end)
    return [
        (hour, str(type_name), str(state), int(count))
        for hour, type_name, state, count in connection.execute(query)
    ]


def record_hour(
    connection: sa.Connection,
    table: sa.Table,
    hour_start: datetime,
    counts: Sequence[tuple[str, str, int]],
) -> None:
    """Insert one hour's marker and counts in one statement (R-ADM-58).

    Args:
        connection: The connection to write with (the caller commits).
        table: The outcome hours table.
        hour_start: The hour's start (aware UTC, on the hour).
        counts: ``(workflow type, state, executions)`` of the hour.

    Raises:
        sqlalchemy.exc.IntegrityError: The hour is already recorded (another
            process counted it first); nothing of this call is written once
            the caller rolls back.
    """
    total = sum(count for _, _, count in counts)
    rows = [
        {
            "hour_start": hour_start,
            "workflow_type": MARKER_TYPE,
            "state": MARKER_STATE,
            "executions": total,
        },
        *(
            {
                "hour_start": hour_start,
                "workflow_type": type_name,
                "state": state,
                "executions": count,
            }
            for type_name, state, count in sorted(counts)
        ),
    ]
    connection.execute(sa.insert(table), rows)


def delete_hours_before(
    connection: sa.Connection, table: sa.Table, before: datetime
) -> int:
    """Delete the rows of hours starting before ``before``; their number."""
    result = connection.execute(sa.delete(table).where(table.c.hour_start < before))
    return int(result.rowcount or 0)
