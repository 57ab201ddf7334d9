"""The dispatcher's deadline pass (SPEC §27.1, R-DL-20..24).

:func:`flask_geneva.engine.operators.dispatcher.run_dispatcher` calls
:func:`enforce_deadlines` first in every run, so a workflow is canceled (or
paused) within one ``GENEVA_DISPATCH_INTERVAL`` of its deadline, before the
run publishes anything of it. Each workflow is handled in its own
transaction, under its row lock, as an operator's ``cancel()``/``pause()``
would (R-EXT-01..03), recorded with ``via="deadline"`` and the deadline.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import error_reporting
from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import deadlines as deadline_rows
from flask_geneva.db import locks as row_locks
from flask_geneva.db.context import EngineContext
from flask_geneva.dsl.deadlines import DEFAULT_ON_DEADLINE
from flask_geneva.engine import flow_control
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import WorkflowState

__all__ = ["enforce_deadlines", "on_deadline_of"]

_log = module_logger("flask_geneva")

#: The states the dispatcher acts on (the deadline index's, R-DL-10).
_ONGOING = (WorkflowState.READY, WorkflowState.PERFORMING, WorkflowState.PAUSED)


def enforce_deadlines(context: EngineContext, session: orm.Session) -> int:
    """Cancel or pause the ongoing workflows whose deadline passed (R-DL-20).

    Reads the due workflows along the deadline index in batches of
    ``GENEVA_HOUSEKEEPING_BATCH_SIZE`` (keyset order, so a pass considers a
    workflow once) and handles each in its own transaction
    (:func:`_enforce_one`). A workflow that ended meanwhile, or whose
    deadline moved, is left alone; an error on one workflow is logged and
    reported and the pass goes on. Nothing runs without the
    ``add_workflow_deadlines`` unit.

    Args:
        context: The engine context (settings, models).
        session: A session bound to ``context``; every transaction opened
            here is ended here.

    Returns:
        How many workflows the pass canceled or paused (or, already paused
        under ``"pause"``, whose deadline it spent).
    """
    if not deadline_rows.installed(session):
        session.rollback()
        return 0
    if session.in_transaction():
        session.commit()
    workflow_cls = context.models.Workflow
    limit = context.settings.housekeeping_batch_size
    now = clock.now()
    acted = 0
    after: deadline_rows.DueDeadline | None = None
    while True:
        due = deadline_rows.due_deadlines(
            session, workflow_cls, now=now, after=after, limit=limit
        )
        session.rollback()
        for workflow_id, _deadline in due:
            with log_fields.logging_about(log_fields.id_fields(workflow_id)):
                acted += _enforce_one(context, session, workflow_id)
        if len(due) < limit:
            break
        after = due[-1]
    if acted:
        _log.info("%d workflows reached their deadline", acted)
    return acted


def on_deadline_of(workflow: Any) -> str:
    """``"cancel"`` or ``"pause"``: the workflow class's ``__geneva_on_deadline__``
    (R-DL-03); ``"cancel"`` for a row whose type no class defines."""
    definitions = getattr(type(workflow), "__geneva_definitions__", None)
    if definitions is None:
        return DEFAULT_ON_DEADLINE
    return str(definitions.on_deadline)


def _enforce_one(context: EngineContext, session: orm.Session, workflow_id: Any) -> int:
    """Cancel or pause one workflow past its deadline, in its own transaction.

    Locks the row and checks again what the read saw: still ongoing, a
    deadline at or before now (R-DL-22: a lost race is no error). Returns 1
    when it acted, else 0.
    """
    try:
        workflow = row_locks.lock_workflow(session, workflow_id)
        deadline = None if workflow is None else workflow.deadline_at
        if (
            workflow is None
            or workflow.state not in _ONGOING
            or deadline is None
            or deadline > clock.now()
        ):
            session.rollback()  # ended, or its deadline moved, meanwhile
            return 0
        action = on_deadline_of(workflow)
        from_state = workflow.state
        if action == "pause" and from_state == WorkflowState.PAUSED:
            # Already paused: the deadline is spent, the operator resumes it.
            deadline_rows.clear_deadline(session, workflow)
        elif action == "pause":
            flow_control.pause(workflow, actor=None, via="deadline", commit=False)
            # Spent: a resumed workflow runs without it (R-DL-23).
            deadline_rows.clear_deadline(session, workflow)
            _note_deadline(workflow, deadline)
        else:
            flow_control.cancel(workflow, actor=None, via="deadline", commit=False)
            _note_deadline(workflow, deadline)
        session.commit()
    except InvalidStateError:
        session.rollback()  # its state changed between the checks: left alone
        return 0
    except Exception as error:  # noqa: BLE001 - one workflow never stops the pass
        session.rollback()
        _log.error(
            "could not enforce the deadline of workflow %s: %s: %s; the next "
            "dispatcher run tries again",
            workflow_id,
            type(error).__name__,
            error,
            exc_info=error,
        )
        error_reporting.report(
            context.settings.error_reporter,
            error,
            extra={"workflow_id": str(workflow_id), "dispatcher": "deadlines"},
        )
        return 0
    _log.info(
        "workflow %s reached its deadline %s: %s (was %s)",
        workflow_id,
        deadline.isoformat(),
        "paused" if action == "pause" else "canceled",
        from_state,
    )
    return 1


def _note_deadline(workflow: Any, deadline: datetime) -> None:
    """Add the deadline to the operator action just recorded (R-DL-21).

    Same transaction as the change (R-PDR-06); without the metadata column
    nothing was recorded and nothing is added.
    """
    actions = workflow.read_metadata("operator_actions")
    if not isinstance(actions, list) or not actions:
        return
    last = actions[-1]
    if isinstance(last, dict) and last.get("via") == "deadline":
        entry = {**last, "deadline": deadline.isoformat()}
        workflow.write_metadata("operator_actions", [*actions[:-1], entry])
