"""The dispatcher's read of stranded scheduled executions (SPEC §29.1, R-FLT-20).

A ``scheduled`` execution is *stranded* when its broker message was delivered
and dropped without claiming it (a claim that met a database outage for longer
than its retries, R-FLT-02) or was lost on its way: the row is the truth, but
no message holds it any more. Nothing in the row tells such an execution from
one still waiting in a busy queue, so the criteria are chosen so that a row is
published again at most once for each time it became due, and only once it
could not be waiting for a healthy worker:

- ``scheduled``, of a ``ready`` or ``performing`` workflow (paused ones wait
  for ``resume()``, R-DSP-03);
- its ``job_id`` a task id (or NULL): neither deferred (the dispatcher's own
  pass publishes those, R-DSP-02) nor a limit's waiter (R-LIM-18);
- due more than ``grace`` ago (``scheduled_for < now - grace``);
- not written for ``grace`` (``updated_at < now - grace``): not published, or
  published again, within it;
- last written before it was ``grace`` overdue (``updated_at - grace <
  scheduled_for``): a row this pass already published again (which wrote its
  ``job_id`` later than that) is not published a second time;
- due at most ``oldest`` ago (``GENEVA_STUCK_SCHEDULED_THRESHOLD``): an older
  row is housekeeping's stuck-scheduled recovery's (R-HK-20). The bound keeps
  the read to the rows that came due lately, through the ``(state,
  scheduled_for)`` index, however many paused workflows keep an overdue
  execution (a paused campaign of 200,000): a run costs what is due, not what
  is parked (issue 40).

Part of the store layer: the dispatcher's
:func:`~flask_geneva.engine.operators.dispatcher.republish_stranded` decides;
this module builds the statement, locking the rows with ``FOR UPDATE SKIP
LOCKED`` where the database has it (R-DSP-05) and ``BEGIN IMMEDIATE`` on SQLite
(BTR-13).
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core.publications import DEFERRED_JOB_ID
from flask_geneva.core.publications import LIMITED_JOB_ID
from flask_geneva.db import sqlite as sqlite_locking
from flask_geneva.db.database_time import DatabaseTime
from flask_geneva.db.queries.maintenance import workflow_with_job_options
from flask_geneva.db.states import StepExecutionState
from flask_geneva.db.states import WorkflowState

__all__ = ["stranded_executions"]


def stranded_executions(
    session: orm.Session,
    workflow_cls: Any,
    execution_cls: Any,
    *,
    now: datetime,
    grace: timedelta,
    oldest: timedelta,
    batch_size: int,
) -> list[Any]:
    """Lock and load up to ``batch_size`` stranded scheduled executions.

    The criteria are the module's; oldest ``scheduled_for`` first, each
    execution with its workflow loaded. Starts a write transaction; the
    caller commits or rolls back.

    Args:
        session: The dispatcher's session.
        workflow_cls: The ``Workflow`` class.
        execution_cls: The ``StepExecution`` class.
        now: The reference time (aware UTC).
        grace: ``GENEVA_DISPATCH_INTERVAL``: how long a due execution may wait
            in the broker before it is published again.
        oldest: ``GENEVA_STUCK_SCHEDULED_THRESHOLD``: rows due longer ago are
            left to housekeeping.
        batch_size: At most this many rows.

    Returns:
        The locked executions.
    """
    sqlite_locking.write_transaction(session)
    execution = execution_cls
    query = (
        sa.select(execution)
        .join(workflow_cls, workflow_cls.id == execution.workflow_id)
        .where(execution.state == StepExecutionState.SCHEDULED)
        .where(
            sa.or_(
                execution.job_id.is_(None),
                execution.job_id.not_in((DEFERRED_JOB_ID, LIMITED_JOB_ID)),
            )
        )
        .where(execution.scheduled_for < now - grace)
        .where(execution.scheduled_for >= now - oldest)
        .where(execution.updated_at < now - grace)
        .where(DatabaseTime(execution.updated_at, grace) < execution.scheduled_for)
        .where(workflow_cls.state.in_((WorkflowState.READY, WorkflowState.PERFORMING)))
        .order_by(execution.scheduled_for, execution.id)
        .limit(batch_size)
        .options(workflow_with_job_options(session, execution, workflow_cls))
    )
    if session.get_bind().dialect.name != "sqlite":
        # As the deferred pass: SKIP LOCKED, so two dispatchers never publish
        # the same row, and a row an operator holds waits for the next run.
        query = query.with_for_update(skip_locked=True, of=execution)
    return list(session.scalars(query).unique())
