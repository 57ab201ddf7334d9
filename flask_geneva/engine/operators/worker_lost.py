"""What a recovered ``in_progress`` execution records about its lost worker (R-HK-29).

Recovery (housekeeping's and the dispatcher's, R-HK-24..27 and R-WRK-06, and the
operator's ``recover()``, R-HK-28) ends an execution whose worker stopped before
its outcome was committed. Without more, the row reads ``completed``/``recovered``
with no error, as if the step had completed. :func:`record_worker_lost` records a
:class:`~flask_geneva.exceptions.WorkerLostError` on it instead: its class in
``error_class_name``, a message naming the worker (id, Celery node, host, pid)
and its last heartbeat, or, for an execution that names no worker, since when it
was in progress; the same details, structured, under the metadata key
``recovery``. The admin and ``flask geneva show`` print the error as any other.
An execution of a step with a ``timeout`` that ran past it records a
:class:`~flask_geneva.exceptions.StepTimeout` instead, and recovery hands it to
the step's exception policies
(:mod:`~flask_geneva.engine.operators.timeout_recovery`, R-STO-20).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import publications
from flask_geneva.core.durations import format_interval
from flask_geneva.db import error_recording
from flask_geneva.db import workers as worker_rows
from flask_geneva.engine.timeouts import recovery as step_timeouts
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.exceptions import StepTimeout
from flask_geneva.exceptions import WorkerLostError

__all__ = ["LostWorker", "RecoveredBy", "lost_worker", "record_worker_lost"]

#: The metadata key of the structured details (R-HK-29).
RECOVERY_KEY = "recovery"


@dataclass(frozen=True)
class RecoveredBy:
    """Who recovers an execution, as the record names it (R-HK-29).

    Attributes:
        by: ``"housekeeping"``, ``"dispatcher"`` or ``"operator"``.
        actor: The operator (``recover(actor=...)``), or None.
        via: ``"api"``, ``"cli"`` or ``"admin"`` for an operator, else None.
    """

    by: str = "housekeeping"
    actor: str | None = None
    via: str | None = None

    def sentence(self) -> str:
        """``"recovered by housekeeping"``, ``"recovered by bob via cli"``…"""
        if self.by == "operator":
            return f"recovered by {self.actor or 'an operator'} via {self.via}"
        if self.by == "dispatcher":
            return "recovered by the dispatcher"
        return f"recovered by {self.by}"


@dataclass(frozen=True)
class LostWorker:
    """What recovery found about an ``in_progress`` execution's end (R-HK-29).

    Attributes:
        error: The :class:`~flask_geneva.exceptions.WorkerLostError`, or the
            :class:`~flask_geneva.exceptions.StepTimeout` of a step that ran
            past its timeout (R-STO-20); never raised.
        details: The metadata ``recovery`` record.
    """

    error: Exception
    details: dict[str, Any]

    @property
    def timed_out(self) -> bool:
        """Whether the step ran past its timeout (R-STO-20, R-STO-21)."""
        return isinstance(self.error, StepTimeout)

    def record(self, execution: Any, *, columns: bool = True) -> None:
        """Write the error and the ``recovery`` record on ``execution``.

        Args:
            execution: The locked execution.
            columns: Record the error as R-SE-20 does (its columns and the
                metadata ``exception``, no backtrace); False writes the
                metadata ``exception`` only, as for a reattempted execution
                (R-SE-21).
        """
        if columns:
            error_recording.record_error(execution, self.error, backtrace=False)
        else:
            details = error_recording.exception_details(self.error)
            details["backtrace"] = []
            execution.write_metadata("exception", details)
        execution.write_metadata(RECOVERY_KEY, self.details)


def record_worker_lost(
    session: orm.Session,
    execution: Any,
    recovered_by: RecoveredBy,
    *,
    step_timeout: timedelta | None = None,
    now: datetime | None = None,
) -> LostWorker:
    """Record on ``execution`` that its worker was lost (R-HK-29, R-STO-20).

    :func:`lost_worker`, then :meth:`LostWorker.record` with the error columns.

    Returns:
        What was recorded.
    """
    lost = lost_worker(
        session, execution, recovered_by, step_timeout=step_timeout, now=now
    )
    lost.record(execution)
    return lost


def lost_worker(
    session: orm.Session,
    execution: Any,
    recovered_by: RecoveredBy,
    *,
    step_timeout: timedelta | None = None,
    now: datetime | None = None,
) -> LostWorker:
    """What recovery records on ``execution``, whose worker was lost (R-HK-29).

    Called by recovery for an ``in_progress`` execution, under its row lock,
    before the transition that ends it; reads the worker's registry row and
    writes nothing. The error is a
    :class:`~flask_geneva.exceptions.WorkerLostError` whose message names the
    worker and its last heartbeat; the ``recovery`` record is ``{"cause":
    "worker_lost" | "stuck" | "released", "by", "worker": {"id", "node_name",
    "hostname", "pid", "last_heartbeat_at"} | None, "in_progress_since"}``,
    with ``actor`` and ``via`` for an operator, and ``released_by`` (the
    worker's id) for an execution its live worker released (R-FLT-11).

    When the step has a ``timeout`` and the execution ran past it
    (:func:`~flask_geneva.engine.timeouts.recovery.ran_past_timeout`: its
    worker heartbeat after the timeout, or, without a known heartbeat, the
    timeout has passed), the error is a
    :class:`~flask_geneva.exceptions.StepTimeout` instead, the cause
    ``"timeout"`` with ``timeout_seconds`` (R-STO-20).

    Args:
        session: The recovering session (reads the worker's row).
        execution: The locked ``in_progress`` execution.
        recovered_by: Who recovers it.
        step_timeout: The step's ``timeout``, or None.
        now: The recovery's time (default :func:`flask_geneva.core.clock.now`).
    """
    worker = _worker_details(session, execution)
    released_by = _released_by(execution)
    started = execution.started_at
    timed_out = step_timeouts.ran_past_timeout(
        step_timeout,
        started,
        last_heartbeat_at=None if worker is None else worker["last_heartbeat"],
        now=clock.now() if now is None else now,
    )
    if worker is None and released_by is not None:
        # R-FLT-11: its live worker released it, the run having ended without
        # its outcome (a finalize that could not reach the database).
        cause = "released"
        lost = (
            f"worker {released_by} released it while alive: its run ended "
            f"without the outcome being recorded (in progress since "
            f"{_format(started)})"
        )
    elif worker is None:
        cause = "stuck"
        lost = (
            f"worker presumed lost: in progress since {_format(started)} and no "
            "worker is recorded for it (claimed outside a registered worker, or "
            "without the worker registry)"
        )
    elif worker["last_heartbeat"] is None:
        cause = "worker_lost"
        lost = (
            f"worker {worker['id']} is no longer registered (last heartbeat "
            "unknown): it was lost"
        )
    else:
        cause = "worker_lost"
        lost = (
            f"worker {worker['id']}{_worker_name(worker)} was lost, last heartbeat "
            f"{_format(worker['last_heartbeat'])}"
        )
    message = (
        f"{lost}; the step's outcome was never recorded: it may have run in part "
        f"or in full; {recovered_by.sentence()}"
    )
    error: Exception = WorkerLostError(message)
    if timed_out and step_timeout is not None:
        cause = "timeout"
        error = StepTimeout(
            f"step '{execution.step_name}' ran past its timeout of "
            f"{format_interval(step_timeout)} (in progress since {_format(started)}) "
            f"and its worker stopped (Celery's hard time limit kills the process "
            f"GENEVA_STEP_TIMEOUT_GRACE after the timeout): {message}",
            step_name=execution.step_name,
            timeout_seconds=step_timeout.total_seconds(),
        )
    details: dict[str, Any] = {
        "cause": cause,
        "by": recovered_by.by,
        "worker": None if worker is None else _stored(worker),
        "in_progress_since": _iso(started),
    }
    if released_by is not None:
        details["released_by"] = released_by
    if cause == "timeout" and step_timeout is not None:
        details["timeout_seconds"] = step_timeout.total_seconds()
    if recovered_by.by == "operator":
        details.update(actor=recovered_by.actor, via=recovered_by.via)
    return LostWorker(error, details)


def _released_by(execution: Any) -> str | None:
    """The id of the live worker that released ``execution``, or None (R-FLT-11)."""
    job_id = execution.job_id
    prefix = publications.RELEASED_JOB_ID_PREFIX
    if isinstance(job_id, str) and job_id.startswith(prefix):
        return job_id[len(prefix) :]
    return None


def _worker_details(session: orm.Session, execution: Any) -> dict[str, Any] | None:
    """The execution's worker as its registry row has it, or None without one.

    ``last_heartbeat`` (and every column but ``id``) is None when the worker
    has no row any more (deregistered or pruned, R-WRK-07).
    """
    table = worker_registry.registry_table(session)
    if table is None or execution.worker_id is None:
        return None
    worker_id = execution.worker_id
    row = worker_rows.worker_row(session.connection(), table, worker_id)
    if row is None:
        return {"id": worker_id, "last_heartbeat": None}
    return {
        "id": worker_id,
        "node_name": row.node_name,
        "hostname": row.hostname,
        "pid": row.pid,
        "last_heartbeat": row.last_heartbeat_at,
    }


def _worker_name(worker: dict[str, Any]) -> str:
    """`` (celery@web-1, host web-1, pid 42)``, or ``""`` without a row."""
    if "hostname" not in worker:
        return ""
    parts = [f"host {worker['hostname']}", f"pid {worker['pid']}"]
    if worker["node_name"]:
        parts.insert(0, str(worker["node_name"]))
    return f" ({', '.join(parts)})"


def _stored(worker: dict[str, Any]) -> dict[str, Any]:
    stored = {key: value for key, value in worker.items() if key != "last_heartbeat"}
    stored["last_heartbeat_at"] = _iso(worker["last_heartbeat"])
    return stored


def _utc(value: datetime) -> datetime:
    # Stored times are naive UTC (R-DM-23); aware ones are converted.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _format(value: datetime | None) -> str:
    if value is None:
        return "an unknown time"
    return f"{_utc(value):%Y-%m-%d %H:%M:%S} UTC"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else _utc(value).isoformat()
