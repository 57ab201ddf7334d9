"""Hourly outcome counts, counted once by housekeeping (R-ADM-58).

The admin's outcome chart (R-ADM-54) shows the completed and failed step
executions per workflow class in each of the last 24 UTC hours. Counting them
from the executions reads every execution that ended in the last day and looks
up its workflow's class: about 2.6 s on PostgreSQL at 1,000,000 workflows
(``bench/admin.py``), on the first render of every process. With the optional
install unit ``add_outcome_hours``, each housekeeping run
(:func:`roll_up_outcome_hours`) counts every settled hour of the window that is
not counted yet and stores its counts in ``geneva_drive_outcome_hours``
(:mod:`flask_geneva.db.outcome_hours`); the admin reads those rows
(:func:`counted_hours`) and counts only the other hours from the executions.
Nothing is written on the step execution path.

An hour is *settled* once it ended :data:`SETTLE` ago: an execution's
``finished_at`` is the time of the transaction that ended it (R-SE-02), which
commits within seconds. An execution whose ending commits later than that, or
an execution of a counted hour deleted by hand, is not reflected in that hour's
stored counts. Two housekeeping runs counting the same hour at once store it
once: the second one's INSERT fails on the primary key and is rolled back.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import outcome_hours as outcome_hour_rows
from flask_geneva.db.context import models_of
from flask_geneva.db.queries import admin_stats as admin_stats_queries
from flask_geneva.db.states import OUTCOME_HOURS_TABLE

__all__ = [
    "HOURS",
    "KEEP_FOR",
    "SETTLE",
    "counted_hours",
    "outcome_hours_table",
    "roll_up_outcome_hours",
    "settled_end",
]

_log = module_logger("flask_geneva.housekeeping")

#: Hours in the admin's window, the current hour included (R-ADM-54).
HOURS = 24
#: An hour is counted for good once it ended at least this long ago.
SETTLE = timedelta(minutes=5)
#: Stored hours older than this (from the current hour's start) are deleted.
KEEP_FOR = timedelta(hours=48)

_HOUR = timedelta(hours=1)


def settled_end(now: datetime) -> datetime:
    """The end of the latest hour settled at ``now``: every hour ending by it is.

    Args:
        now: Aware UTC.
    """
    return (now - SETTLE).replace(minute=0, second=0, microsecond=0)


def outcome_hours_table(session: orm.Session) -> sa.Table | None:
    """The outcome hours table, or None without the ``add_outcome_hours`` unit.

    Detected once per engine with the optional columns (R-DM-30); a failed
    detection is logged and counts as absent.
    """
    return column_detection.installed_table(
        session,
        OUTCOME_HOURS_TABLE,
        flag="outcome_hours",
        what="outcome hours",
        log=_log,
    )


def counted_hours(
    session: orm.Session, start: datetime, end: datetime
) -> dict[datetime, list[tuple[str, str, int]]]:
    """The stored counts of the hours counted in ``[start, end)`` (R-ADM-58).

    Only reads. Empty without the unit.

    Args:
        session: The reading session (the admin's).
        start: The first hour's start (aware UTC, on the hour).
        end: The range's end (aware UTC, exclusive).

    Returns:
        ``{hour start: [(workflow type, state, executions), ...]}`` for every
        counted hour; an hour counted with nothing ended in it maps to ``[]``.
    """
    table = outcome_hours_table(session)
    if table is None:
        return {}
    marker = (outcome_hour_rows.MARKER_TYPE, outcome_hour_rows.MARKER_STATE)
    rows = outcome_hour_rows.counted_rows(session.connection(), table, start, end)
    result: dict[datetime, list[tuple[str, str, int]]] = {
        hour: [] for hour, type_name, state, _ in rows if (type_name, state) == marker
    }
    for hour, type_name, state, count in rows:
        if hour in result and (type_name, state) != marker:
            result[hour].append((type_name, state, count))
    return result


def roll_up_outcome_hours(session: orm.Session, *, now: datetime | None = None) -> int:
    """Count and store every settled, uncounted hour of the window (R-ADM-58).

    Housekeeping calls it on every run. Commits the session's open
    transaction first; each hour is written in a transaction of its own. An
    hour another process stored first is skipped (its INSERT fails on the
    primary key and is rolled back); any database error is logged and ends
    the roll-up, never the caller. Stored hours older than :data:`KEEP_FOR`
    are deleted. Without the unit it does nothing.

    Args:
        session: The housekeeping session, bound to the models.
        now: The current time (aware UTC); default :func:`flask_geneva.core.clock.now`.

    Returns:
        How many hours this call stored.
    """
    if session.in_transaction():
        session.commit()
    table = outcome_hours_table(session)
    if table is None:
        return 0
    now = clock.now() if now is None else now
    current = now.replace(minute=0, second=0, microsecond=0)
    first = current - (HOURS - 1) * _HOUR
    end = settled_end(now)
    stored = 0
    try:
        done = set(counted_hours(session, first, end))
        missing = [hour for hour in _hours(first, end) if hour not in done]
        for start, last in consecutive_runs(missing, _HOUR):
            stop = last + _HOUR
            stored += _count_and_store(session, table, start, stop)
        connection = session.connection()
        outcome_hour_rows.delete_hours_before(connection, table, current - KEEP_FOR)
        session.commit()
    except sa.exc.SQLAlchemyError as error:
        session.rollback()
        _log.warning("could not roll up the outcome hours: %s", error)
    return stored


def _count_and_store(
    session: orm.Session, table: sa.Table, start: datetime, stop: datetime
) -> int:
    """Count the hours of ``[start, stop)`` in one read, store each: how many."""
    models = models_of(session)
    hours = list(_hours(start, stop))
    edges = [*hours, stop]
    counted: dict[datetime, list[tuple[str, str, int]]] = {hour: [] for hour in hours}
    for type_name, bucket, state, count in admin_stats_queries.outcome_counts(
        session, models.StepExecution, models.Workflow, edges
    ):
        counted[hours[bucket]].append((type_name, state, count))
    session.commit()
    stored = 0
    for hour in hours:
        try:
            outcome_hour_rows.record_hour(
                session.connection(), table, hour, counted[hour]
            )
            session.commit()
        except sa.exc.IntegrityError:
            # Another run stored this hour first: its counts stand.
            session.rollback()
            _log.info("the outcome hour %s was stored by another run", hour)
            continue
        stored += 1
    return stored


def _hours(start: datetime, end: datetime) -> list[datetime]:
    """Hour starts from ``start`` (on the hour) to before ``end``."""
    hours = []
    hour = start
    while hour < end:
        hours.append(hour)
        hour += _HOUR
    return hours


def consecutive_runs(items: list[Any], step: Any) -> list[tuple[Any, Any]]:
    """``(first, last)`` of each run of ascending ``items`` ``step`` apart.

    Hour starts (``step`` one hour) or bucket indexes (``step`` 1): the ranges
    counted or stored together, one statement per run.
    """
    runs: list[tuple[Any, Any]] = []
    for item in items:
        if runs and runs[-1][1] + step == item:
            runs[-1] = (runs[-1][0], item)
        else:
            runs.append((item, item))
    return runs
