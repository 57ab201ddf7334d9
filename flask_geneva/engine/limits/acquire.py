"""Taking a limit's slots in the executor's Phase 1 (R-LIM-10..15).

:func:`claim_slots` runs with the workflow and the execution locked, after
the preconditions and the ``wait_for`` gate passed, just before the claim, in
the same transaction. For each ``(limit, key)`` of the step, in sorted order:

1. a grant this execution was woken with is taken (``granted - 1``,
   ``running + 1``, its waiter row deleted);
2. else one guarded ``UPDATE`` takes a free slot when nobody waits (the fast
   path, :func:`flask_geneva.db.limits.try_acquire`);
3. else, under the key row's lock, the free slots go to the waiters ahead
   (:func:`flask_geneva.engine.limits.wake.pump`), and a slot still free is
   taken.

Refused on one key: what this attempt took is given back, and the execution
parks on that key: it stays ``scheduled`` with ``job_id = "geneva:limited"``,
no broker message and no worker, in the key's queue (R-LIM-11).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from datetime import timedelta
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import publications
from flask_geneva.db import counter_releases
from flask_geneva.db import limit_starts
from flask_geneva.db import limits as limit_rows
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import session_sync
from flask_geneva.dsl.job_options import priority_of
from flask_geneva.dsl.limits import resolve_limit_keys
from flask_geneva.engine.limits.wake import LimitTables
from flask_geneva.engine.limits.wake import drop_waiter
from flask_geneva.engine.limits.wake import pump
from flask_geneva.engine.limits.wake import take_back_grant

__all__ = [
    "NOT_INSTALLED_MESSAGE",
    "Parked",
    "claim_inline",
    "claim_slots",
    "installed",
    "parked",
    "pass_on_chain_holds",
    "tables_of",
]

NOT_INSTALLED_MESSAGE = (
    "Step '{step}' of {type} declares a limit, but the database lacks the "
    "add_flow_limits install unit: run `flask geneva install` and then "
    "`flask db upgrade` (a limit is never ignored, R-LIM-50)."
)


@dataclasses.dataclass(frozen=True)
class Parked:
    """The execution waits for a slot of ``(limit_name, limit_key)`` (R-LIM-11).

    Attributes:
        limit_name: The limit it waits for.
        limit_key: The key.
        counts: The key's counters when it parked (for the log line).
    """

    limit_name: str
    limit_key: str
    counts: limit_rows.KeyCounts


def installed(session: orm.Session) -> bool:
    """Whether the database has the ``add_flow_limits`` unit (R-LIM-50)."""
    return column_detection.optional_columns(session).flow_limits


def parked(session: orm.Session, execution: Any) -> bool:
    """Whether ``execution`` waits in a limit's queue (R-LIM-11)."""
    if not installed(session):
        return False
    # Not by job_id: resume() re-publishes a waiter under a task id (R-EXT-21).
    holds = execution.limit_holds
    return isinstance(holds, dict) and bool(holds.get("waits"))


def pass_on_chain_holds(session: orm.Session, execution: Any) -> Any:
    """The slots a resumable step's successor keeps, or None (R-LIM-26).

    Called when the executor continues ``execution``'s chain: the pairs of
    its ``hold_across_chain`` limits are marked ``"passed_on"`` in its
    ``limit_holds`` (written with its own UPDATE, so the write path does not
    give them back) and returned as the successor's ``limit_holds``, written
    with its INSERT. No statement of its own.
    """
    if not installed(session):
        return None
    holds = execution.limit_holds
    if not isinstance(holds, dict) or not holds.get("chain"):
        return None
    chain = [list(pair) for pair in holds["chain"]]
    execution.limit_holds = {**holds, "passed_on": chain}
    return {"held": chain}


def claim_inline(
    session: orm.Session,
    workflow: Any,
    finished: Any,
    following: Any,
    now: datetime,
) -> dict[str, Any] | None:
    """The slots for claiming ``following`` inline, or None to publish it (R-LIM-15).

    Finalize holds the workflow and ``finished`` (the execution it completes)
    locked. Each concurrency limit of ``following`` is taken as Phase 1's fast
    path takes it, when nobody waits for it: a slot ``finished`` holds for
    the same limit and key is kept (one guarded ``UPDATE`` checks that no
    waiter is queued; ``finished`` marks it ``"passed_on"``, so its UPDATE
    does not give it back), any other is taken with the one-statement take.
    The slots ``finished`` holds that ``following`` does not want are given
    back here, in the same ``(limit, key)`` order (R-LIM-30), and marked
    ``"given_back"``. A waiter
    queued, a full key, a rate limit, a key that cannot be resolved or the
    unit missing: what was taken is given back and None is returned; the
    step is then published and takes its slots in its own Phase 1, behind
    the waiters.

    Returns:
        The inline claim's ``limit_holds``, or None.
    """
    if not installed(session) or any(
        limit.rate is not None or limit.concurrency is None
        for limit in following.limits
    ):
        return None
    try:
        wanted = resolve_limit_keys(workflow, following)
    except Exception:  # noqa: BLE001 - its own Phase 1 reports it (R-LIM-19)
        return None
    tables = tables_of(session)
    limits = {limit.name: limit for limit in following.limits}
    holds = finished.limit_holds if isinstance(finished.limit_holds, dict) else {}
    held = {(str(pair[0]), str(pair[1])) for pair in holds.get("held") or ()}
    if (
        held == set(wanted)
        and session_sync.bind_of(session).dialect.name == "postgresql"
    ):
        # Every slot is kept: the statement that inserts the claimed
        # execution checks that nobody waits (CTEs its INSERT reads), so the
        # keep costs no statement of its own (R-LIM-15).
        session.info[counter_releases.KEEPS] = [
            counter_releases.CounterKeep(tables.keys, name, key, now)
            for name, key in wanted
        ]
        finished.limit_holds = {**holds, "passed_on": [list(p) for p in wanted]}
        return _held([(name, key, None) for name, key in wanted], limits)
    kept: list[list[str]] = []
    given_back: list[list[str]] = []
    taken: list[tuple[str, str]] = []
    # One pass in (limit, key) order over what the next step wants and what
    # the finished one gives back, so that key rows are locked in that order
    # (R-LIM-30): the give-backs happen here, not in the write's statement.
    for name, key in sorted({*wanted, *held}):
        if (name, key) not in wanted:
            give_back(session, tables, name, key, now)
            given_back.append([name, key])
            continue
        if (name, key) in held:
            if limit_rows.keep_if_no_waiters(session, tables.keys, name, key, now):
                kept.append([name, key])
                continue
        elif _take_first_free(session, tables, name, key, limits[name], now):
            taken.append((name, key))
            continue
        for taken_name, taken_key in reversed(taken):
            give_back(session, tables, taken_name, taken_key, now)
        if given_back:
            finished.limit_holds = {**holds, "given_back": given_back}
        return None
    markers = {"passed_on": kept, "given_back": given_back}
    if kept or given_back:
        finished.limit_holds = {
            **holds,
            **{name: pairs for name, pairs in markers.items() if pairs},
        }
    return _held([(name, key, None) for name, key in wanted], limits)


def _take_first_free(
    session: orm.Session,
    tables: LimitTables,
    name: str,
    key: str,
    limit: Any,
    now: datetime,
) -> bool:
    """The one-statement take; a key's first use creates its row first."""
    cap = limit.concurrency
    if limit_rows.try_acquire(session, tables.keys, name, key, cap, now):
        return True
    if limit_rows.lock_key(session, tables.keys, name, key) is not None:
        return False  # full, or waiters queued
    limit_rows.create_key(session, tables.keys, name, key, cap, now)
    return limit_rows.try_acquire(session, tables.keys, name, key, cap, now)


def tables_of(session: orm.Session) -> LimitTables:
    """The limit tables of the session's models."""
    keys, waiters, workflows, executions = limit_rows.limit_tables(session)
    starts = limit_starts.limit_starts_table(keys.metadata)
    return LimitTables(keys, waiters, workflows, executions, starts)


def claim_slots(
    session: orm.Session, workflow: Any, execution: Any, step: Any, now: datetime
) -> dict[str, Any] | Parked:
    """Take one slot of each limit of ``step`` for ``execution``, or park it.

    Args:
        session: The session whose transaction holds the workflow and the
            execution locked (R-EXE-10).
        workflow: The locked workflow (the key functions read it).
        execution: The locked ``scheduled`` execution.
        step: Its step definition. Without limits (a deploy removed them
            while the execution waited) it only leaves its queue.
        now: The claim time (aware UTC).

    Returns:
        The claim's ``limit_holds`` (R-LIM-20): ``{"held": [[limit name, key],
        ...]}`` (empty without limits), with ``"rate_starts": {limit name:
        database time}`` for rate limits; or :class:`Parked` when the execution
        was parked (its rows are changed; the caller commits).

    Raises:
        LimitKeyError: A key function raised or returned a value that cannot
            be a key (R-LIM-05); the caller applies the step's policies.
    """
    tables = tables_of(session)
    wanted = resolve_limit_keys(workflow, step)
    limits = {limit.name: limit for limit in step.limits}
    holds = execution.limit_holds if isinstance(execution.limit_holds, dict) else {}
    waiter = None
    if holds.get("waits"):
        waiter = limit_rows.waiter_of(session, tables.waiters, execution.id)
    stale = None
    if waiter is not None and (waiter.limit_name, waiter.limit_key) not in wanted:
        # It parked on a key it no longer wants (its key function now gives
        # another value, or a deploy changed the step's limits): it leaves
        # that queue, at that key's place in the lock order (R-LIM-21, R-LIM-30).
        stale = (waiter.limit_name, waiter.limit_key)
    # A resumable successor holds its chain's slots already (R-LIM-26).
    inherited = (
        {(str(pair[0]), str(pair[1])) for pair in holds.get("held") or ()}
        if not holds.get("waits")
        else set()
    )
    taken: list[tuple[str, str, limit_starts.RateStart | None]] = []
    pairs = {*wanted, *inherited, *([stale] if stale else [])}
    for name, key in sorted(pairs):
        if (name, key) == stale:
            assert waiter is not None  # noqa: S101 - stale is its key
            drop_waiter(
                session, tables, waiter.limit_name, waiter.limit_key, execution.id, now
            )
            waiter = None
            continue
        if (name, key) in inherited:
            if (name, key) in wanted:
                taken.append((name, key, None))  # held: no statement
            else:
                give_back(session, tables, name, key, now)  # its key changed
            continue
        mine = (
            waiter
            if waiter is not None
            and (waiter.limit_name, waiter.limit_key) == (name, key)
            else None
        )
        took = _take(session, tables, limits[name], key, now, execution.id, mine)
        if mine is not None and took is not None:
            waiter = None  # its row is gone: it took the slot
        if took is not None:
            taken.append((name, key, took.rate_start))
            continue
        for taken_name, taken_key, rate_start in reversed(taken):
            if rate_start is not None:
                limit_starts.undo_rate_start(
                    session,
                    tables.keys,
                    tables.starts,
                    taken_name,
                    taken_key,
                    rate_start,
                )
            give_back(session, tables, taken_name, taken_key, now)
        return _park(session, tables, workflow, execution, step, name, key, waiter, now)
    return _held(taken, limits)


def _held(
    taken: list[tuple[str, str, limit_starts.RateStart | None]],
    limits: dict[str, Any],
) -> dict[str, Any]:
    """``limit_holds`` of a claim: the pairs held, those its chain keeps
    (``"chain"``, R-LIM-26), and the database times of its rate starts
    (``{"limit name": iso time}``, R-LIM-23)."""
    held: dict[str, Any] = {"held": [[name, key] for name, key, _ in taken]}
    chain = [
        [name, key]
        for name, key, _ in taken
        if getattr(limits.get(name), "hold_across_chain", False)
    ]
    if chain:
        held["chain"] = chain
    rate_starts = {
        name: start.started_at.isoformat()
        for name, _, start in taken
        if start is not None and start.started_at is not None
    }
    if rate_starts:
        held["rate_starts"] = rate_starts
    return held


@dataclasses.dataclass(frozen=True)
class _Took:
    """A slot taken; ``rate_start`` is the rate start recorded, to undo it."""

    rate_start: limit_starts.RateStart | None = None


def _park(
    session: orm.Session,
    tables: LimitTables,
    workflow: Any,
    execution: Any,
    step: Any,
    name: str,
    key: str,
    waiter: limit_rows.Waiter | None,
    now: datetime,
) -> Parked:
    """Queue the execution on ``(name, key)`` (R-LIM-11); it keeps its place
    when it already waits there."""
    holds = execution.limit_holds if isinstance(execution.limit_holds, dict) else {}
    counts = limit_rows.lock_key(session, tables.keys, name, key)
    assert counts is not None  # noqa: S101 - _take created it
    if waiter is not None and (waiter.limit_name, waiter.limit_key) != (name, key):
        drop_waiter(
            session, tables, waiter.limit_name, waiter.limit_key, execution.id, now
        )
        waiter = None
    since = _since(holds, now)
    if waiter is None:
        existing = limit_rows.waiter_of(session, tables.waiters, execution.id)
        if existing is None:
            limit_rows.insert_waiter(
                session,
                tables.waiters,
                name=name,
                key=key,
                execution_id=execution.id,
                workflow_id=workflow.id,
                priority=_priority(workflow, step),
                queue=workflow.job_options_for(step).get("queue"),
                waiting_since=since,
            )
            limit_rows.change_counts(session, tables.keys, name, key, now, waiting=1)
            counts = dataclasses.replace(counts, waiting=counts.waiting + 1)
            # A rate-blocked key wakes its head waiter when the window allows
            # (R-LIM-24): nothing else would (no release is coming).
            pump(session, tables, name, key, counts, now)
    execution.job_id = publications.LIMITED_JOB_ID
    execution.limit_holds = {"waits": [name, key], "since": since.isoformat()}
    return Parked(name, key, counts)


def _take(
    session: orm.Session,
    tables: LimitTables,
    limit: Any,
    key: str,
    now: datetime,
    execution_id: Any,
    mine: limit_rows.Waiter | None,
) -> _Took | None:
    """Take one slot of ``(limit, key)``; None when it is full (R-LIM-10/12/23)."""
    name, cap, rate = limit.name, limit.concurrency, limit.rate
    if (
        mine is None
        and rate is None
        and cap is not None
        and limit_rows.try_acquire(session, tables.keys, name, key, cap, now)
    ):
        return _Took()
    counts = _locked_counts(session, tables, limit, key, now)
    if mine is not None:
        # Read again under the key row's lock: a release may have granted it
        # since Phase 1 read it.
        mine = limit_rows.waiter_of(session, tables.waiters, execution_id)
    if (
        mine is None
        and rate is None
        and counts.running + counts.granted < (cap or 0)
        and not counts.waiting
    ):
        # Created just now, or freed since the fast path looked (a waiter
        # takes its own grant below, never a second slot).
        limit_rows.change_counts(session, tables.keys, name, key, now, running=1)
        return _Took()
    if mine is not None and mine.granted_at is None:
        counts, granted = pump(
            session, tables, name, key, counts, now, claimant=execution_id
        )
        if granted:
            mine = dataclasses.replace(mine, granted_at=now)
    if mine is not None and mine.granted_at is not None:
        rate_start = _rate_start(session, tables, limit, key, counts)
        if rate_start is not None and not rate_start.allowed:
            # Woken before the window allows (its task came early): the grant
            # goes back, the waiter keeps its place and is woken again (R-LIM-24).
            counts = take_back_grant(session, tables, mine, counts, now)
            pump(session, tables, name, key, counts, now)
            return None
        limit_rows.change_counts(
            session, tables.keys, name, key, now, granted=-1, running=1
        )
        limit_rows.delete_waiter(session, tables.waiters, mine.id)
        counts = dataclasses.replace(
            counts, granted=counts.granted - 1, running=counts.running + 1
        )
        # The waiters behind get what is free now: a cap raised since the
        # grant (R-LIM-17), or the next start of a rate window (R-LIM-24).
        pump(session, tables, name, key, counts, now)
        return _Took(rate_start)
    if mine is None:
        counts, _ = pump(session, tables, name, key, counts, now)
        if cap is None or counts.running + counts.granted < cap:
            if counts.waiting and rate is not None:
                return None  # waiters wait for the window first (R-LIM-12)
            rate_start = _rate_start(session, tables, limit, key, counts)
            if rate_start is not None and not rate_start.allowed:
                return None
            limit_rows.change_counts(session, tables.keys, name, key, now, running=1)
            return _Took(rate_start)
    return None


def _locked_counts(
    session: orm.Session, tables: LimitTables, limit: Any, key: str, now: datetime
) -> limit_rows.KeyCounts:
    """Lock (creating it first if missing) the key row; bring its settings up
    to the limit's (R-LIM-17, R-LIM-25)."""
    name = limit.name
    counts = limit_rows.lock_key(session, tables.keys, name, key)
    if counts is None:
        limit_rows.create_key(session, tables.keys, name, key, limit.concurrency, now)
        counts = limit_rows.lock_key(session, tables.keys, name, key)
        assert counts is not None  # noqa: S101 - created above
    if counts.concurrency != limit.concurrency:
        # A deploy changed the cap: the new one holds from now on (R-LIM-17).
        limit_rows.change_counts(
            session, tables.keys, name, key, now, concurrency=limit.concurrency
        )
        counts = dataclasses.replace(counts, concurrency=limit.concurrency)
    if limit.rate is not None:
        per_ms = _per_ms(limit.per)
        if counts.rate != limit.rate or counts.per_ms != per_ms:
            limit_starts.set_rate(
                session, tables.keys, tables.starts, name, key, limit.rate, per_ms, now
            )
            counts = dataclasses.replace(
                counts, rate=limit.rate, per_ms=per_ms, rate_seq=0
            )
    return counts


def _rate_start(
    session: orm.Session,
    tables: LimitTables,
    limit: Any,
    key: str,
    counts: limit_rows.KeyCounts,
) -> limit_starts.RateStart | None:
    """Record a start of a rate-limited key (R-LIM-23); None without a rate."""
    if limit.rate is None:
        return None
    return limit_starts.take_rate_start(
        session, tables.keys, tables.starts, limit.name, key, counts, limit.per
    )


def _per_ms(per: timedelta) -> int:
    return int(per / timedelta(milliseconds=1))


def give_back(
    session: orm.Session,
    tables: LimitTables,
    name: str,
    key: str,
    now: datetime,
    *,
    fast: bool = True,
) -> None:
    """Give back one held slot of ``(name, key)`` and grant it on (R-LIM-20).

    One guarded ``UPDATE`` when nobody waits; else under the key row's lock,
    followed by :func:`pump`. ``fast=False``: that UPDATE was tried already
    (folded into the holder's own statement by the write path) and found
    waiters; go straight to the lock.
    """
    if fast and limit_rows.try_release(session, tables.keys, name, key, now):
        return
    counts = limit_rows.lock_key(session, tables.keys, name, key)
    if counts is None:
        return
    if counts.running > 0:
        limit_rows.change_counts(session, tables.keys, name, key, now, running=-1)
        counts = dataclasses.replace(counts, running=counts.running - 1)
    pump(session, tables, name, key, counts, now)


def _since(holds: dict[str, Any], now: datetime) -> datetime:
    """When the execution first parked: kept across re-parks (R-LIM-12)."""
    value = holds.get("since")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return now
    return now


def _priority(workflow: Any, step: Any) -> int:
    """The merged ``priority`` job option, 0 when unset (R-PRI-02)."""
    return priority_of(workflow.job_options_for(step))
