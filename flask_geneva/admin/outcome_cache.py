"""The 24-hour outcome counts; busy ended hours counted once per process (R-ADM-54).

The overview's and the class pages' charts count the step executions that
completed or failed in each of the last 24 hours, per workflow class
(:func:`flask_geneva.db.queries.admin_stats.outcome_counts`). That read grows with the
daily volume: at 100,000 workflows a day (about 450,000 executions ending a
day) it reads each of them and looks up its class, about half a second on
PostgreSQL on two cores (``bench/admin.py``), on every auto-refresh (R-ADM-49).

An hour that ended more than :data:`SETTLE` ago no longer changes: an execution's
``finished_at`` is the time of the transaction that ended it (R-SE-02), which
commits within seconds. So a busy hour (at least :data:`KEEP_AT_LEAST` ended
executions) is counted once per process and reused while it is in the window;
the current hour, the last :data:`SETTLE` and the quiet hours are read on every
render, in one statement per run of consecutive hours. A quiet system reads
everything live, as before; a busy one reads about one hour per render.
Deleting executions of the last 24 hours (a manual purge; the cleanup keeps
recent workflows) is not reflected in kept hours until they leave the window.

With the install unit ``add_outcome_hours`` (R-ADM-58) the settled hours that
housekeeping already counted are read from ``geneva_drive_outcome_hours``
(:func:`flask_geneva.engine.operators.outcome_rollup.counted_hours`, one small read) and
kept
like busy hours, whatever their volume: a process's first render then counts
from the executions only the hours housekeeping has not stored yet (the
current one, and those that ended since its last run), instead of the whole
day. The admin never writes that table (R-ADM-32).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db.queries import admin_stats as admin_stats_queries
from flask_geneva.engine.operators import outcome_rollup
from flask_geneva.engine.operators.outcome_rollup import SETTLE

__all__ = [
    "KEEP_AT_LEAST",
    "SETTLE",
    "cache_source",
    "forget_kept_hours",
    "outcome_counts",
]

#: Only hours with at least this many ended executions are kept (R-ADM-54).
KEEP_AT_LEAST = 5_000

_log = module_logger("flask_geneva.admin")

_lock = threading.Lock()
#: (database and table, hour start) -> [(type, state, count)] of a kept hour.
_kept: dict[tuple[str, datetime], list[tuple[str, str, int]]] = {}


def forget_kept_hours() -> None:
    """Drop every kept hour (tests; a process that purged recent executions)."""
    with _lock:
        _kept.clear()


def cache_source(session: orm.Session, execution_cls: Any) -> str:
    """Which database and table the counts come from, without the password: the
    key of a process's kept counts (this module's, the throughput charts')."""
    bind = session.get_bind(mapper=execution_cls)
    engine: Any = bind.engine if isinstance(bind, sa.Connection) else bind
    url = engine.url.render_as_string(hide_password=True)
    return f"{url} {execution_cls.__table__.name}"


def outcome_counts(
    session: orm.Session,
    execution_cls: Any,
    workflow_cls: Any,
    edges: Sequence[datetime],
    *,
    now: datetime,
) -> list[tuple[str, int, str, int]]:
    """Completed and failed executions per class and hour bucket (R-ADM-54).

    The same rows as :func:`flask_geneva.db.queries.admin_stats.outcome_counts`,
    with busy hours that ended :data:`SETTLE` before ``now`` taken from this
    process's memory once counted, and settled hours that housekeeping stored
    read from the outcome hours table (R-ADM-58).

    Args:
        session: The admin's session.
        execution_cls: The StepExecution model.
        workflow_cls: The Workflow model.
        edges: Ascending aware UTC bucket edges, at least two.
        now: The request's time (aware UTC).

    Returns:
        ``(workflow type, bucket index, state, count)`` rows.
    """
    source = cache_source(session, execution_cls)
    buckets = len(edges) - 1
    with _lock:
        for key in [key for key in _kept if key[0] == source and key[1] < edges[0]]:
            del _kept[key]
        kept = {
            index: _kept[(source, edges[index])]
            for index in range(buckets)
            if (source, edges[index]) in _kept
        }
    wanted = [
        index
        for index in range(buckets)
        if index not in kept and edges[index + 1] <= now - SETTLE
    ]
    if wanted:
        stored = _stored_hours(session, edges[wanted[0]], edges[wanted[-1] + 1])
        found = {
            index: stored[edges[index]] for index in wanted if edges[index] in stored
        }
        kept.update(found)
        with _lock:
            for index, rows in found.items():
                _kept[(source, edges[index])] = rows
    result = [
        (type_name, index, state, count)
        for index, rows in kept.items()
        for type_name, state, count in rows
    ]
    for first, last in outcome_rollup.consecutive_runs(
        [index for index in range(buckets) if index not in kept], 1
    ):
        counted: dict[int, list[tuple[str, str, int]]] = {
            index: [] for index in range(first, last + 1)
        }
        for type_name, bucket, state, count in admin_stats_queries.outcome_counts(
            session, execution_cls, workflow_cls, edges[first : last + 2]
        ):
            counted[first + bucket].append((type_name, state, count))
            result.append((type_name, first + bucket, state, count))
        settled = [
            index
            for index, rows in counted.items()
            if edges[index + 1] <= now - SETTLE
            and sum(count for _, _, count in rows) >= KEEP_AT_LEAST
        ]
        with _lock:
            for index in settled:
                _kept[(source, edges[index])] = counted[index]
    return result


def _stored_hours(
    session: orm.Session, start: datetime, end: datetime
) -> dict[datetime, list[tuple[str, str, int]]]:
    """The hours housekeeping stored in ``[start, end)``, or ``{}`` when they
    cannot be read (R-ADM-58, R-ADM-31).

    The table is detected once per engine (R-DM-30): when the unit is
    downgraded while the process runs, the read fails; it is then made in a
    savepoint, so the failure leaves the request's transaction usable
    (PostgreSQL aborts a transaction on an error) and every hour is counted
    from the executions, as without the unit.
    """
    try:
        with session.begin_nested():
            return outcome_rollup.counted_hours(session, start, end)
    except sa.exc.SQLAlchemyError as error:
        _log.warning("could not read the stored outcome hours: %s", error)
        return {}
