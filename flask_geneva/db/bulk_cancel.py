"""The bulk cancel of a workflow's scheduled and waiting executions (R-SCH-03).

The one state write outside :mod:`flask_geneva.db.write_path`: a Core UPDATE of
every ``scheduled``/``waiting`` execution of a workflow whose row the caller
has locked (SPEC §7), with the limit waiters among them leaving their queues
in the same transaction (R-LIM-22).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.db import execution_exits
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.db.session_transactions import geneva_from_session
from flask_geneva.db.states import Outcome
from flask_geneva.db.states import StepExecutionState

__all__ = ["cancel_scheduled_executions"]


def cancel_scheduled_executions(
    session: orm.Session, workflow_id: Any, now: datetime, *, except_id: Any = None
) -> int:
    """Bulk-cancel the workflow's ``scheduled`` and ``waiting`` executions (R-SCH-03).

    Sets state and outcome ``canceled`` with ``canceled_at``/``finished_at``
    (R-SE-03); ``in_progress`` executions are untouched. A parked (``waiting``)
    execution is canceled like a scheduled one, so a new execution never
    coexists with it (R-WSIG-16). Returns the number of rows changed.
    """
    geneva = geneva_from_session(session)
    execution_cls = geneva.StepExecution
    left = _limited_scheduled(session, execution_cls, workflow_id, except_id)
    statement = (
        sa.update(execution_cls)
        .where(execution_cls.workflow_id == workflow_id)
        .where(
            execution_cls.state.in_(
                (StepExecutionState.SCHEDULED, StepExecutionState.WAITING)
            )
        )
        .values(
            state=StepExecutionState.CANCELED.value,
            outcome=Outcome.CANCELED.value,
            canceled_at=now,
            finished_at=now,
            updated_at=now,
        )
        .execution_options(synchronize_session="fetch")
    )
    if except_id is not None:
        statement = statement.where(execution_cls.id != except_id)
    result = session.execute(statement)
    if left:
        # The bulk UPDATE bypasses the write path: its waiters leave the
        # queue here, in the same transaction (R-LIM-22).
        execution_exits.notify_executions_left(session, geneva, left, now)
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _limited_scheduled(
    session: orm.Session, execution_cls: Any, workflow_id: Any, except_id: Any
) -> list[execution_exits.ExecutionLeft]:
    """The workflow's ``scheduled`` executions waiting for a limit's slot."""
    if not optional_columns(session).flow_limits:
        return []
    query = sa.select(execution_cls.id, execution_cls.limit_holds).where(
        execution_cls.workflow_id == workflow_id,
        execution_cls.state == StepExecutionState.SCHEDULED.value,
        execution_cls.limit_holds.is_not(None),
    )
    if except_id is not None:
        query = query.where(execution_cls.id != except_id)
    return [
        execution_exits.ExecutionLeft(
            row_id, StepExecutionState.SCHEDULED.value, "canceled", holds
        )
        for row_id, holds in session.execute(query)
    ]
