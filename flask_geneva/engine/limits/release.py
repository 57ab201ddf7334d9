"""Giving slots back on every way out, through the write path (R-LIM-20..22).

Every state write of a step execution goes through
:func:`flask_geneva.db.write_path.write_geneva_rows` (R-DM-41), and the one
bulk state write (:func:`flask_geneva.db.locks.cancel_scheduled_executions`)
reports the rows it moved. The listener registered here sees each execution
written out of ``in_progress`` (success, failure, reattempt, skip, cancel,
pause, recovery of a dead worker's step) or a waiter written out of
``scheduled`` (canceled, skipped, dropped for a stopped workflow, failed in
Phase 1), in that same transaction, and gives back what its ``limit_holds``
says it holds or waits for. No caller has to remember it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.db import execution_exits
from flask_geneva.db import limits as limit_rows
from flask_geneva.db import locks as row_locks
from flask_geneva.engine.limits.acquire import give_back
from flask_geneva.engine.limits.acquire import installed
from flask_geneva.engine.limits.acquire import tables_of
from flask_geneva.engine.limits.wake import drop_waiter
from flask_geneva.engine.limits.wake import pump
from flask_geneva.engine.limits.wake import take_back_grant

__all__ = [
    "release_chain_holds",
    "release_left_executions",
    "return_grant_while_paused",
]


@execution_exits.on_executions_left
def release_left_executions(
    session: orm.Session,
    geneva: Any,
    left: list[execution_exits.ExecutionLeft],
    now: datetime,
) -> None:
    """Give back the slots and queue places of executions that just left
    ``in_progress`` or ``scheduled`` (R-LIM-20..22, R-LIM-26).

    Keys are handled in ``(limit name, key)`` order, the order every claim
    locks them in (R-LIM-30).

    Args:
        session: The session whose transaction wrote the rows.
        geneva: The models written.
        left: The executions, with their ``limit_holds`` before the write.
        now: The write time (aware UTC).
    """
    if not installed(session):
        return
    work: list[tuple[str, str, str, Any]] = []
    for execution in left:
        holds = execution.holds
        if holds is execution_exits.UNLOADED:
            holds = _read_holds(session, geneva, execution.execution_id)
        if not isinstance(holds, dict):
            continue
        if holds.get("held"):
            # A holder leaving in_progress, or a successor that held its
            # chain's slots leaving scheduled (R-LIM-20, R-LIM-26): all but
            # what it passed on to its own successor.
            passed = execution_exits.not_given_back(execution.new_holds)
            sent = {
                (release.limit_name, release.limit_key): release
                for release in execution.fast_releases
                if release.sent
            }
            for pair in holds["held"]:
                name, key = str(pair[0]), str(pair[1])
                if tuple(pair) in passed:
                    continue
                release = sent.get((name, key))
                if release is None:
                    work.append((name, key, "held", execution.execution_id))
                elif not release.released:
                    # Its UPDATE found waiters queued: the slow path grants on.
                    work.append((name, key, "held-locked", execution.execution_id))
        elif execution.old_state == "scheduled" and holds.get("waits"):
            name, key = holds["waits"]
            work.append((str(name), str(key), "waits", execution.execution_id))
    if not work:
        return
    tables = tables_of(session)
    for name, key, kind, execution_id in sorted(work, key=lambda item: item[:2]):
        if kind == "held":
            give_back(session, tables, name, key, now)
        elif kind == "held-locked":
            give_back(session, tables, name, key, now, fast=False)
        else:
            drop_waiter(session, tables, name, key, execution_id, now)


def _read_holds(session: orm.Session, geneva: Any, execution_id: Any) -> Any:
    """``limit_holds`` of an execution whose instance did not load it."""
    return limit_rows.execution_limit_holds(session, geneva.StepExecution, execution_id)


def release_chain_holds(session: orm.Session, workflow: Any, now: datetime) -> None:
    """Give back the slots a paused workflow's waiting successor holds (R-LIM-26).

    A resumable chain's successor keeps its ``hold_across_chain`` slots while
    it is ``scheduled``; pausing the workflow leaves that row as it is
    (R-EXT-01), so its slots are given back here, in the pause's transaction
    (after the workflow's lock), and its ``limit_holds`` cleared: resumed, it
    takes its slots anew. Nothing is read for a class without such a limit.

    Args:
        session: The operator's session; the workflow is locked.
        workflow: The locked workflow being paused.
        now: The pause time (aware UTC).
    """
    if not _uses_chain_holds(type(workflow)) or not installed(session):
        return
    pairs: list[tuple[str, str]] = []
    for execution in row_locks.lock_active_executions(session, workflow.id):
        holds = execution.limit_holds
        if execution.state == "scheduled" and isinstance(holds, dict):
            held = holds.get("held") or ()
            if held:
                pairs.extend((str(pair[0]), str(pair[1])) for pair in held)
                execution.limit_holds = None
    if pairs:
        tables = tables_of(session)
        for name, key in sorted(pairs):
            give_back(session, tables, name, key, now)


def _uses_chain_holds(workflow_cls: Any) -> bool:
    """Whether a step of ``workflow_cls`` declares a ``hold_across_chain`` limit."""
    collection = getattr(workflow_cls, "step_collection", None)
    if collection is None:
        return False
    return any(
        limit.hold_across_chain
        for step in collection()
        for limit in getattr(step, "limits", ())
    )


def return_grant_while_paused(
    session: orm.Session, execution: Any, now: datetime
) -> None:
    """Give back the grant of a waiter whose workflow is paused (R-LIM-14).

    Its task was delivered while the workflow is paused: instead of canceling
    the execution (R-EXE-12), which would send the waiter to the back of the
    queue when resumed, the execution stays ``scheduled`` and its waiter row
    stays where it is, ungranted; the slot goes to the next waiter. Resumed,
    its Phase 1 is granted in its turn. The caller holds the workflow and the
    execution locked and commits.
    """
    holds = execution.limit_holds
    if not isinstance(holds, dict) or not holds.get("waits"):
        return
    name, key = (str(part) for part in holds["waits"])
    tables = tables_of(session)
    counts = limit_rows.lock_key(session, tables.keys, name, key)
    waiter = limit_rows.waiter_of(session, tables.waiters, execution.id)
    if counts is None or waiter is None or waiter.granted_at is None:
        return
    counts = take_back_grant(session, tables, waiter, counts, now)
    pump(session, tables, name, key, counts, now)
