"""The overview's throughput counts; settled buckets counted once per process
(R-ADM-130).

The throughput charts count the executions that finished in each minute of the
last hour and each hour of the last day, per outcome
(:func:`flask_geneva.db.queries.throughput.finished_counts`). A day's read
grows with the daily volume: on PostgreSQL about 140 ms for 41,000 executions
(``bench/admin.py --workflows 100000``), on every auto-refresh (R-ADM-49).

A bucket that ended more than :data:`SETTLE` ago no longer changes (an
execution's ``finished_at`` is the time of the transaction that ended it,
R-SE-02, as the 24-hour outcome charts rely on, R-ADM-54). So each settled
bucket is counted once per process and kept while it is in the window; each
render reads, in one statement, from the first bucket not kept to the window's
end: after the first render, the last few minutes of the hour chart and the
current hour of the day chart. Executions of a kept bucket deleted or
committed late (more than :data:`SETTLE` after their ``finished_at``) are not
reflected until it leaves the window. The admin writes nothing (R-ADM-32).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.admin.outcome_cache import SETTLE
from flask_geneva.admin.outcome_cache import cache_source
from flask_geneva.db.queries import throughput as throughput_queries

__all__ = ["SETTLE", "finished_counts", "forget_kept_buckets"]

_lock = threading.Lock()
#: (source, unit, bucket start) -> [(outcome, count)] of a settled bucket.
_kept: dict[tuple[str, str, datetime], list[tuple[str, int]]] = {}


def forget_kept_buckets() -> None:
    """Drop every kept bucket (tests; a process that purged recent executions)."""
    with _lock:
        _kept.clear()


def finished_counts(
    session: orm.Session,
    execution_cls: Any,
    edges: Sequence[datetime],
    *,
    unit: str,
    now: datetime,
) -> list[tuple[datetime, str, int]]:
    """Executions finished per bucket of ``edges`` and outcome (R-ADM-130).

    The rows of :func:`flask_geneva.db.queries.throughput.finished_counts`
    over ``[edges[0], edges[-1])``, the settled buckets taken from this
    process's memory once counted.

    Args:
        session: The admin's session.
        execution_cls: The StepExecution model.
        edges: Ascending aware UTC bucket edges, a ``unit`` apart.
        unit: ``"minute"`` or ``"hour"``.
        now: The request's time (aware UTC).

    Returns:
        ``(bucket start, outcome, count)`` rows.
    """
    source = cache_source(session, execution_cls)
    buckets = len(edges) - 1
    with _lock:
        for key in [
            key
            for key in _kept
            if key[0] == source and key[1] == unit and key[2] < edges[0]
        ]:
            del _kept[key]
        kept = {
            index: _kept[(source, unit, edges[index])]
            for index in range(buckets)
            if (source, unit, edges[index]) in _kept
        }
    result = [
        (edges[index], outcome, count)
        for index, rows in kept.items()
        for outcome, count in rows
    ]
    missing = [index for index in range(buckets) if index not in kept]
    if not missing:
        return result
    first = missing[0]
    index_of = {edges[index]: index for index in range(first, buckets)}
    counted: dict[int, list[tuple[str, int]]] = {index: [] for index in missing}
    for start, outcome, count in throughput_queries.finished_counts(
        session, execution_cls, start=edges[first], end=edges[-1], unit=unit
    ):
        index = index_of.get(start)
        if index is None or index in kept:  # a kept bucket read again: counted
            continue
        counted[index].append((outcome, count))
        result.append((start, outcome, count))
    settled = [index for index in counted if edges[index + 1] <= now - SETTLE]
    with _lock:
        for index in settled:
            _kept[(source, unit, edges[index])] = counted[index]
    return result
