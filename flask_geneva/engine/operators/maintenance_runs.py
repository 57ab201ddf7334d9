"""When the dispatcher and housekeeping last ran, and whether that is too long ago.

Every dispatcher run (:func:`flask_geneva.engine.operators.dispatcher.run_dispatcher`)
and every
housekeeping run (:func:`flask_geneva.engine.operators.housekeeping.run_housekeeping`)
is
wrapped in :func:`recorded_run`: its start is upserted into
``geneva_drive_maintenance_runs`` (which process, when), its end updates that
row (outcome, counts, error) (R-HK-40, R-HK-41). :func:`last_runs` reads the
rows for ``flask geneva status`` and the admin's overview and words the
warnings an operator must see: a job that has not run for two of its intervals,
a job never recorded, a last run that failed (R-HK-42, R-HK-43). A successful
run also sets the gauge ``geneva_drive.<job>_last_success`` (R-HK-44).

Recording never breaks a run: a failed write is logged and the run goes on.
Without the ``add_maintenance_runs`` install unit nothing is written and
:func:`last_runs` returns None (R-HK-45).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.config import GenevaConfig
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import maintenance_runs as maintenance_rows
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.maintenance_runs import RunStart
from flask_geneva.db.states import MAINTENANCE_RUNS_TABLE

__all__ = [
    "DISPATCHER",
    "HOUSEKEEPING",
    "JOBS",
    "RunRecord",
    "duration_text",
    "last_runs",
    "recorded_run",
]

_log = module_logger("flask_geneva.maintenance")

#: The job names, as stored in ``name``.
DISPATCHER = "dispatcher"
HOUSEKEEPING = "housekeeping"
JOBS = (DISPATCHER, HOUSEKEEPING)

_SETTINGS = {
    DISPATCHER: "GENEVA_DISPATCH_INTERVAL",
    HOUSEKEEPING: "GENEVA_HOUSEKEEPING_INTERVAL",
}
_HOW_TO_RUN = {
    DISPATCHER: (
        "is Celery beat running with flask_geneva.beat_schedule() (or "
        "`flask geneva dispatch` from cron)?"
    ),
    HOUSEKEEPING: (
        "is Celery beat running with flask_geneva.beat_schedule() (or "
        "`flask geneva housekeeping` from cron)?"
    ),
}


class RunRecord:
    """What a run reports about itself while :func:`recorded_run` records it.

    Attributes:
        summary: The run's counts (JSON-ready), stored when it ends.
        recorded: Whether the start was written (False without the table or
            when the write failed).
    """

    def __init__(self) -> None:
        self.summary: dict[str, Any] = {}
        self.recorded = False


@contextlib.contextmanager
def recorded_run(
    session: orm.Session,
    name: str,
    *,
    config: GenevaConfig,
    node_name: str | None = None,
) -> Iterator[RunRecord]:
    """Record one run of the periodic job ``name`` around the ``with`` block.

    Commits the session's open transaction, then writes the start (an upsert,
    R-HK-40) in a transaction of its own; when the block ends, writes how it
    ended: ``succeeded`` with :attr:`RunRecord.summary`, or ``failed`` with the
    exception's class and message (the exception propagates). A process killed
    inside the block leaves the row ``running`` (R-HK-41). A successful run
    sets the gauge ``geneva_drive.<name>_last_success`` to its end as Unix
    seconds, table or not (R-HK-44).

    Args:
        session: The session the run works in.
        name: :data:`DISPATCHER` or :data:`HOUSEKEEPING`.
        config: The validated settings (``GENEVA_METRICS``).
        node_name: The Celery node name when a task runs the job.

    Raises:
        ValueError: ``name`` is not one of :data:`JOBS`.
    """
    if name not in JOBS:
        raise ValueError(f"unknown maintenance job {name!r}; allowed: {JOBS}")
    if session.in_transaction():
        session.commit()
    record = RunRecord()
    table = _table(session)
    start = RunStart(
        name=name,
        run_id=str(uuid.uuid4()),
        started_at=clock.now(),
        hostname=socket.gethostname(),
        pid=os.getpid(),
        node_name=node_name,
    )
    if table is not None:
        record.recorded, _ = _write(
            session,
            lambda connection: maintenance_rows.record_start(connection, table, start),
        )
    try:
        yield record
    except Exception as error:
        if table is not None and record.recorded:
            session.rollback()
            _finish(session, table, start, record, "failed", _error_text(error))
        raise
    if table is not None and record.recorded:
        _finish(session, table, start, record, "succeeded", None)
    _emit_last_success(config, name)


def _table(session: orm.Session) -> sa.Table | None:
    return column_detection.installed_table(
        session,
        MAINTENANCE_RUNS_TABLE,
        flag="maintenance_runs",
        what="maintenance runs",
        log=_log,
    )


def _write(
    session: orm.Session, write: Callable[[sa.Connection], Any]
) -> tuple[bool, Any]:
    """Run ``write`` in a transaction of its own: ``(written, its result)``.

    A failure is logged and rolled back, never raised (the run goes on).
    """
    try:
        result = write(session.connection())
        session.commit()
    except (sa.exc.SQLAlchemyError, NotImplementedError) as error:
        session.rollback()
        _log.warning("could not record the maintenance run: %s", error)
        return False, None
    return True, result


def _finish(
    session: orm.Session,
    table: sa.Table,
    start: RunStart,
    record: RunRecord,
    outcome: str,
    error: str | None,
) -> None:
    if session.in_transaction():
        session.commit()
    summary = json.dumps(record.summary, sort_keys=True, default=str)
    written, current = _write(
        session,
        lambda connection: maintenance_rows.record_finish(
            connection,
            table,
            name=start.name,
            run_id=start.run_id,
            finished_at=clock.now(),
            outcome=outcome,
            summary=summary,
            error=error,
        ),
    )
    if written and not current:
        _log.info(
            "a later %s run replaced the record of run %s", start.name, start.run_id
        )


def _error_text(error: BaseException) -> str:
    message = str(error).split("\n", 1)[0]
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _emit_last_success(config: GenevaConfig, name: str) -> None:
    metrics = config.metrics
    if metrics is None:
        return
    gauge = f"geneva_drive.{name}_last_success"
    try:
        metrics.gauge(gauge, clock.now().timestamp(), None)
    except Exception as error:  # noqa: BLE001 - R-MET-06: a metrics hook never breaks a run
        _log.warning("metrics hook raised %r for gauge %s; ignored", error, gauge)


def last_runs(session: orm.Session, *, config: GenevaConfig) -> dict[str, Any] | None:
    """The latest run of each job and the warnings about them (R-HK-42, R-HK-43).

    Ends the session's read transaction.

    Args:
        session: A session bound to the models.
        config: The validated settings (the two intervals).

    Returns:
        None without the ``add_maintenance_runs`` unit (R-HK-45); else
        ``{"dispatcher": run or None, "housekeeping": run or None, "warnings":
        [str, ...]}``, each run a dict with ``outcome`` (``running``,
        ``succeeded``, ``failed``), ``started_at``, ``finished_at``,
        ``last_succeeded_at`` (ISO 8601 or None), ``summary`` (dict or None),
        ``error``, ``hostname``, ``pid``, ``node_name``, ``age_seconds`` (since
        the start), ``interval_seconds`` and ``overdue`` (no start within two
        intervals).
    """
    table = _table(session)
    if table is None:
        session.rollback()
        return None
    found = maintenance_rows.run_rows(session.connection(), table)
    rows = {row.name: row for row in found}
    session.rollback()
    now = clock.now()
    intervals = {
        DISPATCHER: config.dispatch_interval,
        HOUSEKEEPING: config.housekeeping_interval,
    }
    result: dict[str, Any] = {"warnings": []}
    for name in JOBS:
        row = rows.get(name)
        interval = intervals[name]
        result[name] = None if row is None else _run_dict(row, now, interval)
        result["warnings"].extend(_warnings(name, result[name], interval))
    return result


def _run_dict(row: Any, now: datetime, interval: timedelta) -> dict[str, Any]:
    age = now - row.started_at
    summary = None
    if row.summary:
        try:
            summary = json.loads(row.summary)
        except ValueError:
            summary = None
    return {
        "outcome": row.outcome,
        "started_at": row.started_at.isoformat(),
        "finished_at": None if row.finished_at is None else row.finished_at.isoformat(),
        "last_succeeded_at": (
            None if row.last_succeeded_at is None else row.last_succeeded_at.isoformat()
        ),
        "summary": summary,
        "error": row.error,
        "hostname": row.hostname,
        "pid": row.pid,
        "node_name": row.node_name,
        "age_seconds": round(age.total_seconds(), 3),
        "interval_seconds": interval.total_seconds(),
        "overdue": age > 2 * interval,
    }


def _warnings(name: str, run: dict[str, Any] | None, interval: timedelta) -> list[str]:
    setting = f"{_SETTINGS[name]} = {duration_text(interval.total_seconds())}"
    if run is None:
        return [f"No {name} run is recorded yet: {_HOW_TO_RUN[name]} ({setting})"]
    found = []
    if run["overdue"]:
        found.append(
            f"The {name} has not run for {duration_text(run['age_seconds'])}, "
            f"more than two intervals ({setting}): {_HOW_TO_RUN[name]}"
        )
    if run["outcome"] == "failed":
        found.append(f"The last {name} run failed: {run['error']}")
    if run["outcome"] == "running" and run["age_seconds"] > interval.total_seconds():
        found.append(
            f"The {name} run started {duration_text(run['age_seconds'])} ago on "
            f"{run['hostname']} (pid {run['pid']}) is still running, longer than "
            f"one interval ({setting}): it may have been killed; check that process"
        )
    return found


def duration_text(seconds: float) -> str:
    """``seconds`` in words an operator reads at a glance: ``"2 min 5 s"``.

    Args:
        seconds: A non-negative number of seconds (negative counts as 0).
    """
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"
