"""Executions written out of a state that may hold a limit's slot (R-LIM-20..22).

The write path (:mod:`flask_geneva.db.write_path`) writes every state change of
a step execution (R-DM-41). Those out of ``in_progress`` (a holder), or out of
``scheduled`` other than to ``in_progress`` (a waiter, or a resumable
successor holding its chain's slots), are collected here with their
``limit_holds`` before and after the write (:class:`ExecutionLeft`), the
held slots' guarded give-back is prepared so that it goes out with the row's
own UPDATE (:class:`~flask_geneva.db.row_updates.CounterRelease`), and the
registered listeners are called in the same transaction once the rows are
written. The engine registers the listener that gives the rest back and wakes
the next waiters (:mod:`flask_geneva.engine.limits.release`) without this
data layer importing it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db import counter_releases
from flask_geneva.db.states import LIMIT_KEYS_TABLE

__all__ = [
    "UNLOADED",
    "ExecutionLeft",
    "ExecutionsLeft",
    "left_executions",
    "not_given_back",
    "notify_executions_left",
    "on_executions_left",
]

#: ``ExecutionLeft.holds`` when the write did not load ``limit_holds``.
UNLOADED: Any = orm.NO_VALUE


@dataclasses.dataclass(frozen=True)
class ExecutionLeft:
    """A step execution written out of ``scheduled`` or ``in_progress``.

    Attributes:
        execution_id: Its primary key.
        old_state: The state it had (``scheduled`` or ``in_progress``).
        new_state: The state written.
        holds: Its ``limit_holds`` before the write (R-LIM-11), or
            :data:`UNLOADED` when the instance did not load the column.
        new_holds: Its ``limit_holds`` as written (slots passed on to a
            successor are marked there, R-LIM-26), or :data:`UNLOADED`.
        fast_releases: The slots the write path tried to give back with the
            row's own UPDATE (:class:`~flask_geneva.db.counter_releases.CounterRelease`,
            R-LIM-20); each says whether it matched. The listener gives back
            the others.
    """

    execution_id: Any
    old_state: str
    new_state: str
    holds: Any
    new_holds: Any = UNLOADED
    fast_releases: tuple[counter_releases.CounterRelease, ...] = ()


ExecutionsLeft = Callable[[orm.Session, Any, list[ExecutionLeft], datetime], object]
"""``(session, geneva, executions, now)``: executions just left a state that
may hold or wait for a limit's slot. The return value is ignored."""

_left_listeners: list[ExecutionsLeft] = []

#: States an execution holds (``in_progress``) or waits for (``scheduled``) a
#: slot in; ``scheduled`` -> ``in_progress`` is the claim, not a release.
_HOLDING_STATES = frozenset({"scheduled", "in_progress"})


def on_executions_left(listener: ExecutionsLeft) -> ExecutionsLeft:
    """Call ``listener`` whenever :func:`write_geneva_rows` moves executions out
    of ``scheduled`` (other than to ``in_progress``) or out of ``in_progress``.

    Every state write of an execution goes through here (R-DM-41), so a
    listener sees every way out, in the same transaction, after the rows were
    written. The engine gives back limit slots this way (R-LIM-20) without
    this data layer importing it.

    Returns:
        ``listener`` (usable as a decorator).
    """
    _left_listeners.append(listener)
    return listener


def notify_executions_left(
    session: orm.Session, geneva: Any, left: list[ExecutionLeft], now: datetime
) -> None:
    """Hand executions that left a holding state to the
    :func:`on_executions_left` listeners, in the writing transaction: the
    write path's, after its UPDATEs, and the one bulk state write's
    (:func:`flask_geneva.db.locks.cancel_scheduled_executions`)."""
    for listener in _left_listeners:
        listener(session, geneva, left, now)


def not_given_back(new_holds: Any) -> set[tuple[Any, ...]]:
    """The pairs a leaving execution's new ``limit_holds`` says are not for the
    write path to give back: passed on to a successor or an inline claim, or
    given back already (R-LIM-15, R-LIM-26)."""
    if not isinstance(new_holds, dict):
        return set()
    return {
        tuple(pair)
        for marker in ("passed_on", "given_back")
        for pair in new_holds.get(marker) or ()
    }


def left_executions(executions: list[Any], geneva: Any) -> list[ExecutionLeft]:
    """The executions whose pending write leaves a state that may hold a slot.

    Args:
        executions: The instance states (``sa.inspect``) of the dirty
            executions the write path is about to write.
        geneva: Their models.

    Returns:
        One :class:`ExecutionLeft` per execution written out of
        ``in_progress``, or out of ``scheduled`` other than to
        ``in_progress``, whose ``limit_holds`` is not NULL; none when no
        listener is registered.
    """
    if not _left_listeners:
        return []
    left = []
    for state in executions:
        old = state.committed_state.get("state", orm.NO_VALUE)
        if old is orm.NO_VALUE or old not in _HOLDING_STATES:
            continue
        new = state.dict.get("state")
        if new == old or (old == "scheduled" and new == "in_progress"):
            continue
        holds = state.committed_state.get("limit_holds", orm.NO_VALUE)
        if holds is orm.NO_VALUE:
            holds = state.dict.get("limit_holds", UNLOADED)
        if holds is None:
            continue
        new_holds = state.dict.get("limit_holds", UNLOADED)
        left.append(
            ExecutionLeft(
                state.key[1][0],
                str(old),
                str(new),
                holds,
                new_holds,
                _fast_releases(geneva, holds, new_holds),
            )
        )
    return left


def _fast_releases(
    geneva: Any, holds: Any, new_holds: Any
) -> tuple[counter_releases.CounterRelease, ...]:
    """The held slots to give back with the row's UPDATE (R-LIM-20, R-LIM-26)."""
    if not isinstance(holds, dict) or not holds.get("held"):
        return ()
    passed = not_given_back(new_holds)
    keys = geneva.StepExecution.metadata.tables[LIMIT_KEYS_TABLE]
    now = clock.now()
    return tuple(
        counter_releases.CounterRelease(keys, str(pair[0]), str(pair[1]), now)
        for pair in holds["held"]
        if tuple(pair) not in passed
    )
