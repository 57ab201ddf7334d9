"""Every statement on the workflows' deadline column (SPEC §27.1, R-DL-10..12).

``geneva_drive_workflows.deadline_at`` (added by the ``add_workflow_deadlines``
install unit) holds when the dispatcher cancels or pauses an ongoing workflow.
Nothing here runs without the unit: callers ask :func:`installed` first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db import session_sync
from flask_geneva.db.states import DEADLINE_INDEX_WHERE

__all__ = [
    "NOT_INSTALLED_MESSAGE",
    "DueDeadline",
    "clear_deadline",
    "due_deadlines",
    "installed",
]

#: What declaring or passing a deadline says without the unit (R-DL-50).
NOT_INSTALLED_MESSAGE = (
    "workflow deadlines need the add_workflow_deadlines install unit: run "
    "`flask geneva install` and `flask db upgrade`"
)

#: One workflow past its deadline: ``(id, deadline_at)``.
DueDeadline = tuple[Any, datetime]


def installed(session: orm.Session) -> bool:
    """Whether ``workflows.deadline_at`` exists (R-DL-50, detected as R-DM-30)."""
    return column_detection.optional_columns(session).workflow_deadlines


def due_deadlines(
    session: orm.Session,
    workflow_cls: Any,
    *,
    now: datetime,
    after: DueDeadline | None,
    limit: int,
) -> list[DueDeadline]:
    """Ongoing workflows whose deadline is at or before ``now`` (R-DL-20).

    Read along the deadline index (R-DL-10): the filter repeats the partial
    index's predicate, then ``deadline_at <= now``; keyset order
    ``(deadline_at, id)`` after ``after``, so one pass considers a row once.
    A plain read, no lock: the caller locks each workflow in its own
    transaction and checks again.

    Args:
        session: The dispatcher's session; the caller ends the transaction.
        workflow_cls: The ``Workflow`` class.
        now: The pass's time (aware UTC).
        after: The previous batch's last ``(id, deadline_at)``, or None.
        limit: At most this many rows.

    Returns:
        ``(id, deadline_at)`` pairs, earliest deadline first.
    """
    table = workflow_cls.__table__
    deadline = table.c.deadline_at
    query = (
        sa.select(table.c.id, deadline)
        .where(sa.text(DEADLINE_INDEX_WHERE))
        .where(deadline <= now)
        .order_by(deadline, table.c.id)
        .limit(limit)
    )
    if after is not None:
        last_id, last_deadline = after
        query = query.where(
            sa.or_(
                deadline > last_deadline,
                sa.and_(deadline == last_deadline, table.c.id > last_id),
            )
        )
    return [(row[0], row[1]) for row in session.execute(query)]


def clear_deadline(session: orm.Session, workflow: Any) -> None:
    """Set the workflow's ``deadline_at`` to NULL: its deadline is spent (R-DL-22).

    Not a state change (no state guard, R-DM-40): the caller holds the row
    lock. The instance's attribute is expired, so it reads the new value.
    """
    table = type(workflow).__table__
    session_sync.connection_of(session).execute(
        sa.update(table).where(table.c.id == workflow.id).values(deadline_at=None)
    )
    session.expire(workflow, ["deadline_at"])
