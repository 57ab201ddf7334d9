"""Granting freed slots to waiters, in the releasing transaction (R-LIM-13).

:func:`pump` runs in every transaction that holds a key row and may have
freed a slot: a release, a claim's slow path, a dropped waiter, the
dispatcher's pass. It grants each free slot to the next eligible waiter
(priority, then waiting time, then arrival; a paused workflow's waiter keeps
its place and is skipped, R-LIM-14) and requests the waiter's task, which is
published after the commit (R-TXN-02). The granted execution's own rows are
not touched: the releasing transaction never locks another workflow's rows
(R-LIM-30). The woken task's Phase 1 finds its waiter row granted and takes the
slot (:mod:`flask_geneva.engine.limits.acquire`).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db import limit_starts
from flask_geneva.db import limits as limit_rows
from flask_geneva.db.context import context_of
from flask_geneva.engine import publishing

__all__ = ["LimitTables", "drop_waiter", "publish_grant", "pump", "take_back_grant"]

#: "No cap" for a rate-only limit's grants: bounded by the rate's room.
_UNBOUNDED = 1_000_000


@dataclasses.dataclass(frozen=True)
class LimitTables:
    """The three tables a limit statement reads or writes."""

    keys: Any
    waiters: Any
    workflows: Any
    executions: Any
    starts: Any


def pump(
    session: orm.Session,
    tables: LimitTables,
    name: str,
    key: str,
    counts: limit_rows.KeyCounts,
    now: datetime,
    *,
    claimant: Any = None,
) -> tuple[limit_rows.KeyCounts, bool]:
    """Grant the free slots of ``(name, key)`` to the next eligible waiters.

    The caller holds the key row (:func:`flask_geneva.db.limits.lock_key`) and
    passes its counters as they are now.

    Args:
        session: The session whose transaction holds the key row.
        tables: The limit tables.
        name: The limit's name.
        key: The key.
        counts: The key row's counters, current in this transaction.
        now: The grant time (aware UTC).
        claimant: The execution id of the caller's own Phase 1, if it is a
            waiter of this key: granted like the others but not published (the
            caller claims the grant at once).

    Returns:
        ``(counts after the grants, whether claimant was granted)``.
    """
    cap = counts.concurrency
    if counts.waiting <= 0:
        return counts, False
    free = _UNBOUNDED if cap is None else cap - counts.running - counts.granted
    if free <= 0:
        return counts, False
    not_before = None
    if counts.rate is not None and counts.per_ms is not None:
        per = timedelta(milliseconds=counts.per_ms)
        room, frees_at = limit_starts.rate_room(
            session, tables.starts, name, key, counts.rate, per
        )
        room -= counts.granted
        if room <= 0:
            if counts.granted > 0:
                return counts, False  # a woken waiter's claim wakes the next
            # The window is full: the head waiter is woken when it frees up
            # (R-LIM-24), one at a time.
            free, not_before = 1, frees_at or now
        else:
            free = min(free, room)
    heads = limit_rows.eligible_waiters(
        session, tables.waiters, tables.workflows, name, key, free, tables.executions
    )
    if not heads:
        return counts, False
    limit_rows.grant_waiters(
        session, tables.waiters, [w.id for w in heads], now, not_before=not_before
    )
    limit_rows.change_counts(
        session,
        tables.keys,
        name,
        key,
        now,
        granted=len(heads),
        waiting=-len(heads),
    )
    mine = False
    for waiter in heads:
        if (
            claimant is not None
            and waiter.execution_id == claimant
            and not_before is None
        ):
            mine = True
        else:
            publish_grant(session, waiter, not_before=not_before)
    counts = dataclasses.replace(
        counts,
        granted=counts.granted + len(heads),
        waiting=counts.waiting - len(heads),
    )
    return counts, mine


def publish_grant(
    session: orm.Session,
    waiter: limit_rows.Waiter,
    *,
    not_before: datetime | None = None,
) -> None:
    """Request the task of a granted waiter, sent after the commit (R-LIM-13).

    Its queue and priority are those recorded when it parked; the execution
    row keeps ``job_id = "geneva:limited"`` (its Phase 1 reads the grant from
    the waiter row). A grant for a later time (a rate window, R-LIM-24) is
    published with that eta, or left to the dispatcher when it is beyond
    ``GENEVA_MAX_BROKER_DELAY`` or the backend cannot hold an eta (R-DSP-01).
    The task carries the step's time limits when the waiter was read with its
    workflow type and step name (R-STO-03).
    """
    context = context_of(session)
    config = context.settings
    now = clock.now()
    eta = not_before if not_before is not None and not_before > now else None
    if publishing.left_to_dispatcher(
        eta, now, config=config, backend=context.publisher
    ):
        return  # the dispatcher publishes it when it is due (R-LIM-16)
    publication = publishing.step_publication(
        config,
        step_execution_id=waiter.execution_id,
        task_id=str(uuid.uuid4()),
        queue=waiter.queue,
        # 0 is "no priority given" (R-PRI-02): the broker's default, as
        # published for an unlimited step without one.
        priority=waiter.priority or None,
        eta=eta,
        # Read with the waiter row: no statement of its own (R-STO-03).
        timeout=publishing.step_timeout(
            context.models.workflow_classes, waiter.workflow_type, waiter.step_name
        ),
    )
    publishing.request_publication(
        session,
        publication,
        backend=context.publisher,
        defer=publishing.deferral_active(config.enqueue_after_commit),
    )


def drop_waiter(
    session: orm.Session,
    tables: LimitTables,
    name: str,
    key: str,
    execution_id: Any,
    now: datetime,
) -> None:
    """Take ``execution_id`` out of the queue of ``(name, key)`` (R-LIM-21).

    A granted waiter returns its slot, which goes to the next waiter.
    """
    counts = limit_rows.lock_key(session, tables.keys, name, key)
    waiter = limit_rows.waiter_of(session, tables.waiters, execution_id)
    if waiter is None:
        return
    limit_rows.delete_waiter(session, tables.waiters, waiter.id)
    if counts is None:
        return
    if waiter.granted_at is not None:
        limit_rows.change_counts(session, tables.keys, name, key, now, granted=-1)
        counts = dataclasses.replace(counts, granted=counts.granted - 1)
    else:
        limit_rows.change_counts(session, tables.keys, name, key, now, waiting=-1)
        counts = dataclasses.replace(counts, waiting=counts.waiting - 1)
    pump(session, tables, name, key, counts, now)


def take_back_grant(
    session: orm.Session,
    tables: LimitTables,
    waiter: limit_rows.Waiter,
    counts: limit_rows.KeyCounts,
    now: datetime,
) -> limit_rows.KeyCounts:
    """Make a granted waiter an ordinary one again, keeping its place (R-LIM-14,
    R-LIM-16, R-LIM-24); its key row is held by the caller.

    Returns:
        The key's counters after (``granted - 1``, ``waiting + 1``); the caller
        grants the slot on (:func:`pump`) when it is done with the key.
    """
    name, key = waiter.limit_name, waiter.limit_key
    limit_rows.return_grant(session, tables.waiters, waiter.id)
    limit_rows.change_counts(
        session, tables.keys, name, key, now, granted=-1, waiting=1
    )
    return dataclasses.replace(
        counts, granted=counts.granted - 1, waiting=counts.waiting + 1
    )
