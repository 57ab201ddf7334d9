"""What a waiting execution waits for, in words (R-LIM-41, R-LIM-42).

An execution over a limit's cap stays ``scheduled`` with ``limit_holds =
{"waits": [name, key], ...}`` (R-LIM-11); parked, its ``job_id`` is
``"geneva:limited"``, but ``resume()`` re-publishes a paused workflow's waiter
under a task id (R-EXT-21), so a waiter is recognized by ``limit_holds``. The
workflow page, the execution page and ``flask geneva show`` say why it does not
run, e.g. "waiting for a partner-api slot (key acme, 2 of 2 running, 14
waiting, position 3) since 2 min", "waiting for the partner-api rate (key
acme, 100 starts in the last 1 min, 14 waiting, position 3; next start at
12:00:04 UTC) since 2 min" when the key's rate window is full, or, once
granted, "granted a partner-api slot (key acme) 2 s ago (its task is on its
way)" or "granted a partner-api start (key acme) at 12:00:04 UTC (the rate's
window)"; the executions list says "waiting for partner-api"
(:func:`waited_limit`). Only reads, through
:mod:`flask_geneva.db.queries.limits`.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.durations import format_interval
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.engine.limits.acquire import installed

__all__ = ["clock_time", "limit_key_text", "waited_limit", "waiting_sentence"]

_SCHEDULED = "scheduled"


def waited_limit(execution: Any) -> tuple[str, str] | None:
    """``(limit name, key)`` the execution waits for, from its row alone.

    Reads ``state`` and, for a ``scheduled`` row, ``limit_holds`` (which must
    be loaded, or the ``add_flow_limits`` unit installed). Not ``job_id``:
    ``resume()`` re-publishes a waiter under a task id (R-EXT-21, R-LIM-41).

    Args:
        execution: A step execution.

    Returns:
        The pair, or None when the execution is not a limit's waiter.
    """
    if execution.state != _SCHEDULED:
        return None
    holds = execution.limit_holds
    if not isinstance(holds, dict):
        return None
    waits = holds.get("waits")
    if not isinstance(waits, list | tuple) or len(waits) != 2:
        return None
    return str(waits[0]), str(waits[1])


def limit_key_text(key: str) -> str:
    """How a key reads in a sentence: ``key acme``; the global key has none."""
    return f"key {key}" if key else "global key"


def _ago(moment: datetime | None, now: datetime) -> str:
    """Whole seconds between ``moment`` and ``now`` in words (``"3 min 12 s"``)."""
    if moment is None:
        return "an unknown time"
    seconds = (now - clock.ensure_aware(moment)).total_seconds()
    return format_interval(max(0, int(seconds)))


def _article(name: str) -> str:
    return "an" if name[:1].lower() in "aeiou" else "a"


def clock_time(moment: datetime, now: datetime) -> str:
    """``12:00:04 UTC``, with the date when it is not ``now``'s UTC day.

    Args:
        moment: A time (aware, or naive UTC).
        now: The reference time.

    Returns:
        The time to the second in UTC (R-LIM-41).
    """
    moment = clock.ensure_aware(moment).astimezone(UTC)
    if moment.date() == clock.ensure_aware(now).astimezone(UTC).date():
        return moment.strftime("%H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def waiting_sentence(
    session: orm.Session, execution: Any, *, now: datetime | None = None
) -> str | None:
    """Why a limit's waiter does not run, in one sentence (R-LIM-41).

    * Not granted: ``"waiting for a partner-api slot (key acme, 2 of 2 running,
      14 waiting, position 3) since 2 min"``: the key's counters read now, its
      place among the key's ungranted waiters in grant order (priority, then
      waiting since, then arrival; R-LIM-12) and how long it has waited.
      ``1 granted`` is added when slots are on their way to other waiters; the
      global key reads ``global key``.
    * Not granted, the key's rate window full (R-LIM-23): ``"waiting for the
      partner-api rate (key acme, 100 starts in the last 1 min, 14 waiting,
      position 3; next start at 12:00:04 UTC) since 2 min"`` (``2 of 2
      running`` added for a limit with a concurrency too).
    * Granted: ``"granted a partner-api slot (key acme) 2 s ago (its task is
      on its way)"``; granted for a later time by a full rate window
      (R-LIM-24): ``"granted a partner-api start (key acme) at 12:00:04 UTC
      (the rate's window)"``.

    A waiter is recognized by ``limit_holds``, whatever its ``job_id``
    (``resume()`` re-publishes it under a task id, R-EXT-21). A waiter whose
    workflow is paused gets ``"; its workflow is paused: passed over until it
    is resumed"`` (R-LIM-14).

    Args:
        session: A session bound to the models (plain reads; the caller ends
            the transaction).
        execution: A step execution (``limit_holds`` is read only for a
            ``scheduled`` one, and only with the unit).
        now: The reference time; default the clock's now.

    Returns:
        The sentence without a final period, or None when the execution does
        not wait for a limit (or the ``add_flow_limits`` unit is missing).
    """
    if execution.state != _SCHEDULED:
        return None
    if not installed(session):
        return None
    waited = waited_limit(execution)
    if waited is None:
        return None
    name, key = waited
    now = now if now is not None else clock.now()
    slot = f"{_article(name)} {name} slot"
    place = limit_reads.waiter_position(session, execution.id)
    if place is None:
        return (
            f"waiting for {slot} ({limit_key_text(key)}), without a place in its "
            "queue (the next claim or dispatcher pass settles it)"
        )
    if place.granted:
        not_before = place.not_before
        if not_before is not None and clock.ensure_aware(not_before) > now:
            return (
                f"granted {_article(name)} {name} start ({limit_key_text(key)}) at "
                f"{clock_time(not_before, now)} (the rate's window)"
            )
        return (
            f"granted {slot} ({limit_key_text(key)}) {_ago(place.granted_at, now)} "
            "ago (its task is on its way)"
        )
    parts = [limit_key_text(key)]
    counts = limit_reads.key_activity(session, name, key)
    rate_full = counts is not None and counts.rate_full
    if counts is not None:
        if rate_full:
            parts.append(
                f"{counts.rate_used} starts in the last {format_interval(counts.per)}"
            )
        if counts.concurrency is not None:
            parts.append(f"{counts.running} of {counts.concurrency} running")
        elif not rate_full:
            parts.append(f"{counts.running} running")
        if counts.granted:
            parts.append(f"{counts.granted} granted")
        parts.append(f"{counts.waiting} waiting")
    parts.append(f"position {place.position}")
    inside = ", ".join(parts)
    if rate_full:
        assert counts is not None  # noqa: S101 - rate_full read it
        if counts.next_start_at is not None:
            inside += f"; next start at {clock_time(counts.next_start_at, now)}"
        what = f"the {name} rate"
    else:
        what = slot
    sentence = f"waiting for {what} ({inside}) since {_ago(place.waiting_since, now)}"
    workflow = getattr(execution, "workflow", None)
    if getattr(workflow, "state", None) == "paused":
        # Skipped by the grants until resumed (R-LIM-14): say so, so that the
        # wait is not read as the limit's.
        sentence += "; its workflow is paused: passed over until it is resumed"
    return sentence
