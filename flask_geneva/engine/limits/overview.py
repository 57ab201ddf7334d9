"""Limits at a glance: the status line and the gauges (R-LIM-43, R-LIM-44).

``flask geneva status`` and the admin overview print one line, ``limits: 3 keys
busy, 14 waiting, oldest 3 min 12 s``; housekeeping sends four gauges per limit
name. Both read the per-limit sums of
:func:`flask_geneva.db.queries.limits.limit_totals` (two grouped statements) and
nothing at all without the ``add_flow_limits`` unit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.durations import format_interval
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.engine.limits.acquire import installed

__all__ = ["LIMIT_GAUGES", "limit_gauges", "limit_status", "status_line"]

#: The per-limit gauges (tags ``{"limit": name}``) and their
#: :class:`~flask_geneva.db.queries.limits.LimitTotals` field (R-LIM-44).
LIMIT_GAUGES = (
    ("geneva_drive.limit_running", "running"),
    ("geneva_drive.limit_waiting", "waiting"),
    ("geneva_drive.limit_granted", "granted"),
    ("geneva_drive.limit_oldest_wait_seconds", "oldest_wait_seconds"),
)


def _age(moment: datetime | None, now: datetime) -> float:
    if moment is None:
        return 0.0
    return max(0.0, (now - clock.ensure_aware(moment)).total_seconds())


def limit_status(session: orm.Session) -> dict[str, Any] | None:
    """The limits' part of ``status`` (R-LIM-43); None without the unit.

    Args:
        session: A session bound to the models (plain reads; the caller ends
            the transaction).

    Returns:
        ``{"keys_busy", "running", "granted", "waiting",
        "oldest_wait_seconds", "limits": {name: {"keys", "keys_busy",
        "running", "granted", "waiting", "oldest_wait_seconds"}}}``, the
        oldest wait being the longest-waiting ungranted waiter's (0.0 without
        one).
    """
    if not installed(session):
        return None
    now = clock.now()
    per_limit: dict[str, dict[str, Any]] = {}
    for totals in limit_reads.limit_totals(session):
        per_limit[totals.limit_name] = {
            "keys": totals.keys,
            "keys_busy": totals.busy_keys,
            "running": totals.running,
            "granted": totals.granted,
            "waiting": totals.waiting,
            "oldest_wait_seconds": _age(totals.oldest_waiting_since, now),
        }
    values = per_limit.values()
    return {
        "keys_busy": sum(v["keys_busy"] for v in values),
        "running": sum(v["running"] for v in values),
        "granted": sum(v["granted"] for v in values),
        "waiting": sum(v["waiting"] for v in values),
        "oldest_wait_seconds": max(
            (v["oldest_wait_seconds"] for v in values), default=0.0
        ),
        "limits": per_limit,
    }


def status_line(status: dict[str, Any] | None) -> str | None:
    """``"limits: 3 keys busy, 14 waiting, oldest 3 min 12 s"`` (R-LIM-43).

    Args:
        status: What :func:`limit_status` returned.

    Returns:
        The line, or None without the unit or when no key is busy. ``oldest``
        is left out when nothing waits.
    """
    if status is None or not status["keys_busy"]:
        return None
    busy = status["keys_busy"]
    line = (
        f"limits: {busy} key{'s' if busy != 1 else ''} busy, "
        f"{status['waiting']} waiting"
    )
    if status["waiting"]:
        oldest = format_interval(int(status["oldest_wait_seconds"]))
        line += f", oldest {oldest}"
    return line


def limit_gauges(session: orm.Session) -> list[tuple[str, float, dict[str, str]]]:
    """``(gauge name, value, tags)`` of the limit gauges (R-LIM-44).

    Per limit name with key rows (tags ``{"limit": name}``, never a key: the
    keys are unbounded): ``geneva_drive.limit_running``,
    ``geneva_drive.limit_waiting``, ``geneva_drive.limit_granted`` and
    ``geneva_drive.limit_oldest_wait_seconds``. Empty without the unit.
    """
    status = limit_status(session)
    if status is None:
        return []
    return [
        (gauge, float(values[field]), {"limit": name})
        for name, values in sorted(status["limits"].items())
        for gauge, field in LIMIT_GAUGES
    ]
