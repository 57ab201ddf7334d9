"""What operators see of the worker registry: live, dead, warnings (R-WRK-09).

``flask geneva status``, the admin overview's health panel and the housekeeping
gauges read :func:`worker_overview`. Liveness is judged as recovery judges it
(:mod:`flask_geneva.db.workers`, R-WRK-14/15/17).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core.config import GenevaConfig
from flask_geneva.db import workers as worker_rows
from flask_geneva.db.context import models_of
from flask_geneva.engine.workers.registry import registry_table

__all__ = [
    "dead_after_warning",
    "suspended_recovery_warning",
    "worker_overview",
]


def worker_overview(
    session: orm.Session, *, config: GenevaConfig
) -> dict[str, Any] | None:
    """Live and dead workers and abandoned executions, for operators (R-WRK-09).

    Ends the session's read transaction.

    Args:
        session: A session bound to the models.
        config: The validated settings (``GENEVA_WORKER_DEAD_AFTER``).

    Liveness is judged by the database's clock and the newest heartbeat of any
    worker (R-WRK-14/15). When no worker heartbeat for ``GENEVA_WORKER_DEAD_AFTER``
    (a database outage, every worker stopped), ``warning`` says that recovery
    of the executions of the workers last seen alive is suspended until one
    heartbeats again. A worker that recorded a longer dead-after than
    ``GENEVA_WORKER_DEAD_AFTER`` is judged with its own (R-WRK-17);
    ``dead_after_warnings`` names each such worker (:func:`dead_after_warning`).

    Returns:
        None without the worker registry; else ``{"alive": n, "dead": n,
        "abandoned_executions": n, "newest_heartbeat_age_seconds": float or
        None, "warning": str or None, "dead_after_warnings": [str],
        "workers": [...]}``, each worker a dict of its columns (times in ISO
        8601), ``dead_after_seconds`` (its own dead-after, None when not
        recorded or without the ``add_worker_dead_after`` unit), ``alive`` and
        ``in_progress``.
    """
    workers = registry_table(session)
    if workers is None:
        session.rollback()
        return None
    execution_table = models_of(session).StepExecution.__table__
    dead_after = config.worker_dead_after
    connection = session.connection()
    rows = worker_rows.workers_with_executions(
        connection, workers, execution_table, dead_after=dead_after
    )
    abandoned = worker_rows.count_abandoned(
        connection, workers, execution_table, dead_after=dead_after
    )
    newest_age = worker_rows.newest_heartbeat_age(connection, workers)
    session.rollback()
    listed = []
    warnings = []
    for row in rows:
        alive = bool(row.alive)
        own_ms = getattr(row, worker_rows.DEAD_AFTER_COLUMN, None)
        own = None if own_ms is None else timedelta(milliseconds=own_ms)
        warning = dead_after_warning(
            row.id, row.node_name or row.hostname, own, dead_after=dead_after
        )
        if warning is not None:
            warnings.append(warning)
        listed.append(
            {
                "id": row.id,
                "hostname": row.hostname,
                "pid": row.pid,
                "node_name": row.node_name,
                "queues": row.queues.split(",") if row.queues else [],
                "library_version": row.library_version,
                "started_at": row.started_at.isoformat(),
                "last_heartbeat_at": row.last_heartbeat_at.isoformat(),
                "dead_after_seconds": None if own is None else own.total_seconds(),
                "alive": alive,
                "in_progress": int(row.in_progress or 0),
            }
        )
    alive_count = sum(1 for worker in listed if worker["alive"])
    return {
        "alive": alive_count,
        "dead": len(listed) - alive_count,
        "abandoned_executions": abandoned,
        "newest_heartbeat_age_seconds": (
            None if newest_age is None else newest_age.total_seconds()
        ),
        "warning": suspended_recovery_warning(newest_age, dead_after=dead_after),
        "dead_after_warnings": warnings,
        "workers": listed,
    }


def dead_after_warning(
    worker_id: str, name: str, own: timedelta | None, *, dead_after: timedelta
) -> str | None:
    """The operator warning for a worker with a longer dead-after (R-WRK-17).

    Its executions are judged with its own dead-after, so recovery after its
    death is slower than this process's setting says: the settings of the
    processes differ (a rolling deploy, a beat or web process with others).

    Args:
        worker_id: The worker's id.
        name: Its Celery node name, else its host name.
        own: The dead-after the worker recorded; None when it recorded none.
        dead_after: This process's ``GENEVA_WORKER_DEAD_AFTER``.

    Returns:
        None unless ``own`` is longer than ``dead_after``; else the text.
    """
    if own is None or own <= dead_after:
        return None
    return (
        f"worker {worker_id} ({name}) heartbeats with dead-after "
        f"{own.total_seconds():g} s, this process uses "
        f"{dead_after.total_seconds():g} s: its executions are judged with "
        f"{own.total_seconds():g} s (GENEVA_WORKER_DEAD_AFTER should be the same "
        "in every process)"
    )


def suspended_recovery_warning(
    newest_age: timedelta | None, *, dead_after: timedelta
) -> str | None:
    """The operator warning when no worker heartbeat recently (R-WRK-14).

    Args:
        newest_age: The age of the newest heartbeat of any worker, by the
            database's clock; None when no worker is registered (no warning:
            nothing heartbeats, and nothing is recovered by liveness either).
        dead_after: ``GENEVA_WORKER_DEAD_AFTER``.

    Returns:
        None while some worker heartbeat within ``dead_after``; else the text.
    """
    if newest_age is None or newest_age < dead_after:
        return None
    return (
        f"no worker has heartbeat for {newest_age.total_seconds():.0f} s: "
        "recovery of abandoned executions is suspended until one does "
        "(GENEVA_WORKER_DEAD_AFTER "
        f"{dead_after.total_seconds():g} s; a database outage or stopped workers)"
    )
