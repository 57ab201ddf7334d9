"""The dispatcher's part of child workflows: lost wakes and canceled parents
(SPEC §25, R-CHD-24, R-CHD-31).

:func:`flask_geneva.engine.operators.dispatcher.dispatch_due` calls
:func:`dispatch_child_work` in every pass, so both happen within one
``GENEVA_DISPATCH_INTERVAL``:

* a wait made due more than ``GENEVA_PUBLISH_TIMEOUT`` ago whose parent has
  not claimed it (the task the settlement requested was lost) is published
  again; a registration whose execution is no longer parked, or whose
  workflow is paused, is forgotten (``resume()`` wakes a parked execution);
* the ongoing children (``parent_close="cancel"``) of a canceled parent are
  canceled, each in its own transaction, at most
  ``GENEVA_HOUSEKEEPING_BATCH_SIZE`` per parent and pass; when none is left
  the parent's mark is cleared.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import child_counts
from flask_geneva.db import locks as row_locks
from flask_geneva.db.context import EngineContext
from flask_geneva.db.queries import children as child_queries
from flask_geneva.engine import flow_control
from flask_geneva.engine.children.settle import installed
from flask_geneva.engine.children.settle import publish_wake
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = ["cancel_children_of", "dispatch_child_work"]

_log = module_logger("flask_geneva")


def dispatch_child_work(context: EngineContext, session: orm.Session) -> int:
    """Publish lost wakes again and cancel canceled parents' children (R-CHD-24/31).

    Args:
        context: The engine context (settings, publisher).
        session: A session bound to ``context``; every transaction opened here
            is ended here.

    Returns:
        How many wakes were published again (the pass's publications; the
        children it cancels are logged, not counted).
    """
    if not installed(session):
        session.rollback()
        return 0
    settings = context.settings
    now = clock.now()
    limit = settings.housekeeping_batch_size
    wakes = child_counts.due_wakes(session, now - settings.publish_timeout, limit=limit)
    parents = child_counts.due_cancels(session, limit=limit)
    session.rollback()
    published = canceled_total = 0
    for wake in wakes:
        with log_fields.logging_about(
            log_fields.id_fields(
                wake.parent_workflow_id, execution_id=wake.execution_id
            )
        ):
            published += _wake_again(session, wake)
    for parent_id in parents:
        with log_fields.logging_about(log_fields.id_fields(parent_id)):
            canceled, finished = cancel_children_of(session, parent_id, limit=limit)
        canceled_total += canceled
        if finished:
            try:
                if session.get(_workflow_cls(session), parent_id) is None:
                    # Cleanup deleted the parent meanwhile: its counts go too.
                    child_counts.delete_counts(session, parent_id)
                else:
                    child_counts.clear_cancel_due(session, parent_id, clock.now())
                session.commit()
            except Exception as error:  # noqa: BLE001 - one row never stops the pass
                session.rollback()
                _log.error(
                    "could not clear the cancel mark of workflow %s: %s",
                    parent_id,
                    error,
                    extra=dict(log_fields.id_fields(parent_id)),
                )
    if published:
        _log.info("published %d waits for children again", published)
    if canceled_total:
        _log.info("canceled %d children of canceled workflows", canceled_total)
    return published


def cancel_children_of(
    session: orm.Session, parent_id: Any, *, limit: int
) -> tuple[int, bool]:
    """Cancel up to ``limit`` ongoing children of a canceled parent (R-CHD-31).

    Each child with ``parent_close="cancel"`` is canceled as an operator's
    ``cancel()`` would (``via="parent"``), in its own transaction: its
    scheduled or parked execution is canceled, a running one is left to its
    executor (R-EXT-03). A child that ended meanwhile is left alone.

    Returns:
        ``(children canceled, whether none is left)``.
    """
    workflow_cls = _workflow_cls(session)
    ids = child_queries.ongoing_children_to_cancel(
        session, workflow_cls, parent_id, limit=limit
    )
    session.rollback()
    canceled = 0
    for child_id in ids:
        child = session.get(workflow_cls, child_id)
        if child is None:
            continue
        try:
            # The operator transaction names the child (R-OLOG-02).
            flow_control.cancel(
                child, actor=f"workflow {parent_id}", via="parent", commit=True
            )
            canceled += 1
        except InvalidStateError:
            session.rollback()  # it ended meanwhile
        except Exception as error:  # noqa: BLE001 - one child never stops the pass
            session.rollback()
            _log.error(
                "could not cancel child workflow %s of canceled workflow %s: %s: %s",
                child_id,
                parent_id,
                type(error).__name__,
                error,
                extra=dict(log_fields.id_fields(child_id)),
            )
            return canceled, False
    return canceled, len(ids) < limit


def _wake_again(session: orm.Session, wake: child_counts.SettlementWake) -> int:
    try:
        workflow, execution = row_locks.lock_workflow_and_execution(
            session, wake.execution_id
        )
        now = clock.now()
        if (
            execution is None
            or execution.state != StepExecutionState.WAITING
            or workflow.state != WorkflowState.READY
        ):
            # Not parked any more, or paused (resume() wakes it): forget it.
            child_counts.clear_wait(
                session, wake.parent_workflow_id, wake.execution_id, now
            )
            session.commit()
            return 0
        publish_wake(session, wake)
        child_counts.touch_wake(
            session, wake.parent_workflow_id, wake.execution_id, now
        )
        session.commit()
    except Exception as error:  # noqa: BLE001 - one row never stops the dispatcher
        session.rollback()
        _log.error(
            "could not publish step execution %s again: %s: %s",
            wake.execution_id,
            type(error).__name__,
            error,
            exc_info=error,
        )
        return 0
    return 1


def _workflow_cls(session: orm.Session) -> Any:
    from flask_geneva.db.context import models_of

    return models_of(session).Workflow
