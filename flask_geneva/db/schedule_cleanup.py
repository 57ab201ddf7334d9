"""Housekeeping's statements on old schedule fires (R-SCHED-26).

A fire row is the record of one fire time (R-SCHED-11): once its fan-out ended
(``done`` or ``failed``) nothing reads it but the operators' recent fires. The
fires that ended before housekeeping's cutoff are deleted in batches, each
batch read plainly (no lock; an ended fire never changes again) and deleted
by primary key in a committed transaction of its own, as cleanup deletes ended
workflows (R-HK-12). The newest fire of each schedule is kept, whatever its
age, so the admin and ``flask geneva schedules`` can still show it; a
``running`` fire is never deleted (a later dispatcher run resumes it,
R-SCHED-22). The schedules' own rows are never deleted here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db.context import models_of
from flask_geneva.db.states import SCHEDULE_FIRES_TABLE

__all__ = ["ENDED_FIRE_STATES", "delete_ended_fires", "ended_fires_select"]

#: The states of a fire whose fan-out ended (R-SCHED-11).
ENDED_FIRE_STATES = ("done", "failed")


def ended_fires_select(fires: sa.Table, cutoff: datetime, limit: int) -> sa.Select[Any]:
    """The keys of up to ``limit`` fires cleanup may delete (R-SCHED-26).

    Ended (``done``/``failed``) before ``cutoff`` (``finished_at``), and not
    the newest fire of their schedule (a correlated ``max(fire_at)`` along the
    primary key, whose leading column is the schedule's name).

    Args:
        fires: The schedule fires table.
        cutoff: Fires that finished before it go (aware UTC).
        limit: The batch size.
    """
    newest = sa.alias(fires, "newest")
    newest_fire = (
        sa.select(sa.func.max(newest.c.fire_at))
        .where(newest.c.schedule_name == fires.c.schedule_name)
        .scalar_subquery()
    )
    return (
        sa.select(fires.c.schedule_name, fires.c.fire_at)
        .where(
            fires.c.state.in_(ENDED_FIRE_STATES),
            fires.c.finished_at < cutoff,
            fires.c.fire_at < newest_fire,
        )
        .limit(limit)
    )


def delete_ended_fires(
    session: orm.Session, cutoff: datetime, *, batch_size: int
) -> int:
    """Delete the fires that ended before ``cutoff``, in batches (R-SCHED-26).

    Each batch reads at most ``batch_size`` keys plainly (:func:`ended_fires_select`)
    and deletes those rows by primary key, re-checking that they ended, in one
    committed transaction; until a batch comes back short. Commits the
    session's open transaction first.

    Args:
        session: The session to work in (committed after each batch).
        cutoff: Fires whose ``finished_at`` is before it are deleted (aware UTC).
        batch_size: Rows per batch (a positive int).

    Returns:
        How many fire rows were deleted.
    """
    fires = models_of(session).Workflow.metadata.tables[SCHEDULE_FIRES_TABLE]
    key = sa.tuple_(fires.c.schedule_name, fires.c.fire_at)
    session.commit()
    total = 0
    while True:
        batch = [
            tuple(row)
            for row in session.execute(ended_fires_select(fires, cutoff, batch_size))
        ]
        if batch:
            result = session.execute(
                sa.delete(fires).where(
                    key.in_(batch), fires.c.state.in_(ENDED_FIRE_STATES)
                ),
                execution_options={"synchronize_session": False},
            )
            total += int(result.rowcount or 0)  # type: ignore[attr-defined]
        session.commit()
        if len(batch) < batch_size:
            return total
