"""The dispatcher's part of limits: lost and stalled grants (R-LIM-16).

A grant's task is published after the releasing transaction commits; the
message can be lost (broker down, a worker that dropped it). Each dispatcher
pass, within one ``GENEVA_DISPATCH_INTERVAL``:

- a grant older than ``GENEVA_PUBLISH_TIMEOUT`` whose execution is still a
  ``scheduled`` waiter of a ``ready`` workflow is published again (a duplicate
  delivery changes nothing, R-EXE-11);
- a grant of a paused workflow is returned: the waiter keeps its place and
  the slot goes to the next waiter;
- a key whose counters show waiters and a free slot (its cap was raised, a
  waiter's workflow was resumed) grants the slot.

Each key in its own transaction, under its key row's lock. Nothing happens
without the install unit.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import limits as limit_rows
from flask_geneva.db.context import EngineContext
from flask_geneva.engine.limits.acquire import installed
from flask_geneva.engine.limits.acquire import tables_of
from flask_geneva.engine.limits.wake import LimitTables
from flask_geneva.engine.limits.wake import publish_grant
from flask_geneva.engine.limits.wake import pump
from flask_geneva.engine.limits.wake import take_back_grant

__all__ = ["dispatch_limit_grants"]

_log = module_logger("flask_geneva")

_RUNNABLE = ("ready", "performing")


def dispatch_limit_grants(context: EngineContext, session: orm.Session) -> int:
    """Re-publish lost grants, return stalled ones, grant free slots (R-LIM-16).

    Args:
        context: The engine context (``GENEVA_PUBLISH_TIMEOUT``, batch size).
        session: The dispatcher's session; every transaction is ended here.

    Returns:
        How many grants were re-published, returned or made.
    """
    if not installed(session):
        session.rollback()
        return 0
    settings = context.settings
    tables = tables_of(session)
    now = clock.now()
    limit = settings.housekeeping_batch_size
    overdue = limit_rows.overdue_grants(
        session, tables.waiters, now - settings.publish_timeout, limit
    )
    stalled = limit_rows.keys_to_pump(session, tables.keys, limit)
    session.rollback()
    done = 0
    for waiter in overdue:
        done += _one_key(session, tables, waiter.limit_name, waiter.limit_key, waiter)
    for name, key in stalled:
        done += _one_key(session, tables, name, key, None)
    if done:
        _log.info("re-published, returned or made %d limit grants", done)
    return done


def _one_key(
    session: orm.Session,
    tables: LimitTables,
    name: str,
    key: str,
    overdue: limit_rows.Waiter | None,
) -> int:
    try:
        now = clock.now()
        counts = limit_rows.lock_key(session, tables.keys, name, key)
        if counts is None:
            session.rollback()
            return 0
        done = 0
        if overdue is not None:
            waiter = limit_rows.waiter_of(session, tables.waiters, overdue.execution_id)
            if waiter is not None and waiter.granted_at is not None:
                workflow_state, execution_state, waiter = limit_rows.waiter_states(
                    session, tables.workflows, tables.executions, waiter
                )
                if execution_state != "scheduled":
                    # Its execution moved on without the write path (a row
                    # deleted by hand): the grant goes back (R-LIM-16).
                    limit_rows.delete_waiter(session, tables.waiters, waiter.id)
                    limit_rows.change_counts(
                        session, tables.keys, name, key, now, granted=-1
                    )
                    counts = dataclasses.replace(counts, granted=counts.granted - 1)
                elif workflow_state in _RUNNABLE:
                    limit_rows.grant_waiters(session, tables.waiters, [waiter.id], now)
                    publish_grant(session, waiter)
                else:
                    counts = take_back_grant(session, tables, waiter, counts, now)
                done += 1
        after, _ = pump(session, tables, name, key, counts, now)
        done += after.granted - counts.granted
        if after.granted == counts.granted:
            # Nothing to grant (its waiters' workflows are paused): stamped,
            # it goes to the back of the next passes' batches, so that keys
            # behind it are reached (R-LIM-16).
            limit_rows.change_counts(session, tables.keys, name, key, now)
        session.commit()
    except Exception as error:  # noqa: BLE001 - one key never stops the dispatcher
        session.rollback()
        _log.error(
            "could not dispatch the grants of limit %s key %r: %s: %s",
            name,
            key,
            type(error).__name__,
            error,
            exc_info=error,
        )
        return 0
    return done
