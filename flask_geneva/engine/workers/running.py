"""The executions a registered worker process is running, and their release (R-WRK-18).

A live worker's ``in_progress`` executions are never recovered for age alone
(R-WRK-06). But a run can end without its finalize committing while the
process lives on: finalize failed (a lock timeout, a database failover between
the body and finalize), or a ``BaseException`` that is no flow-control signal
(``asyncio.CancelledError``) escaped the step (R-EXE-35). The execution then
stays ``in_progress`` and names a worker that keeps heartbeating.

So each registration keeps the ids of the executions its process is running
(:class:`RunningExecutions`): the executor adds an id before the claim commits
and removes it once the run ended, committed or not. After each heartbeat the
registration releases (:func:`release_finished`) the worker's ``in_progress``
executions that it is not running and that started more than
``GENEVA_WORKER_DEAD_AFTER`` ago: their ``worker_id`` becomes NULL and their
``job_id`` the released marker naming the worker, and the next dispatcher run
recovers them (R-FLT-11), not the age rule's hour.

The candidates are read from the database *before* the set: a claim committed
before that read had its id added before it committed, so an id missing from
the set read afterwards belongs to a run that has ended.

No Flask, no Celery, no SQL of its own (:mod:`flask_geneva.db.workers`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import workers as worker_rows

__all__ = ["RunningExecutions", "release_finished", "release_logged"]

_log = module_logger("flask_geneva.workers")


class RunningExecutions:
    """A thread-safe set of the execution ids this process is running (R-WRK-18).

    One per registration, hence per process: a prefork child has its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[Any] = set()

    def add(self, execution_id: Any) -> bool:
        """Add ``execution_id``; False if it was already there (another run's)."""
        with self._lock:
            if execution_id in self._ids:
                return False
            self._ids.add(execution_id)
            return True

    def discard(self, execution_id: Any) -> None:
        """Remove ``execution_id`` (nothing if absent)."""
        with self._lock:
            self._ids.discard(execution_id)

    def snapshot(self) -> frozenset[Any]:
        """The ids running now."""
        with self._lock:
            return frozenset(self._ids)

    @contextmanager
    def holding(self, execution_id: Any) -> Iterator[None]:
        """Hold ``execution_id`` as running for the block (tests, benchmarks)."""
        added = self.add(execution_id)
        try:
            yield
        finally:
            if added:
                self.discard(execution_id)


def release_finished(
    connection: sa.Connection,
    execution_table: sa.Table,
    worker_id: str,
    running: RunningExecutions,
    *,
    margin: timedelta,
) -> list[Any]:
    """Release the worker's ``in_progress`` executions it no longer runs (R-WRK-18).

    Runs in the caller's transaction on ``connection`` (the heartbeat thread's
    own, after the heartbeat committed). Logs a WARNING naming the released ids.

    Args:
        connection: A connection of the registration's own pool.
        execution_table: The step executions table.
        worker_id: The registered worker's id.
        running: The ids this process is running.
        margin: ``GENEVA_WORKER_DEAD_AFTER``: only executions started longer
            ago than this, by the database's clock, are released.

    Returns:
        The ids released.
    """
    candidates = worker_rows.held_executions(
        connection, execution_table, worker_id, started_before=margin
    )
    if not candidates:
        return []
    # Read after the candidates: see the module docstring.
    running_now = running.snapshot()
    finished = [i for i in candidates if i not in running_now]
    if not finished:
        return []
    released = worker_rows.release_executions(
        connection, execution_table, worker_id, finished
    )
    if released:
        _log.warning(
            "worker %s released %d in_progress execution(s) it no longer runs "
            "(their run ended without finalize committing); the next dispatcher "
            "run recovers them (R-WRK-18, R-FLT-11): %s",
            worker_id,
            released,
            ", ".join(str(i) for i in finished),
        )
    return finished if released else []


def release_logged(
    engine: sa.Engine,
    execution_table: sa.Table,
    worker_id: str,
    running: RunningExecutions,
    *,
    margin: timedelta,
) -> list[Any]:
    """:func:`release_finished` in a transaction of its own on ``engine``.

    A failure (a database blip, a lock wait) is logged as a warning and
    returns no id: the next heartbeat tries again.
    """
    try:
        with engine.begin() as connection:
            return release_finished(
                connection, execution_table, worker_id, running, margin=margin
            )
    except sa.exc.SQLAlchemyError as error:
        _log.warning(
            "worker %s could not release finished executions (retried at the "
            "next heartbeat): %s: %s",
            worker_id,
            type(error).__name__,
            error,
        )
        return []
