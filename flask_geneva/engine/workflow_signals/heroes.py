"""``MyWorkflow.signal_hero()``: a workflow signal to the hero's workflow (R-WSIG-25).

The webhook of a payment provider knows the order, not the workflow: it signals
the hero's ongoing workflow of a class, creating one with ``start=True``, or,
for a retry after that workflow ended, answers the duplicate (R-WSIG-71). The
delivery itself is :func:`flask_geneva.engine.workflow_signals.delivery.deliver_signal`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import orm

from flask_geneva.core.keys import format_hero
from flask_geneva.db import workflow_signals as signal_rows
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine import workflow_creation
from flask_geneva.engine.workflow_signals.delivery import NotOngoingError
from flask_geneva.engine.workflow_signals.delivery import SignalDelivery
from flask_geneva.engine.workflow_signals.delivery import deliver_signal
from flask_geneva.engine.workflow_signals.delivery import installed
from flask_geneva.exceptions import DuplicateWorkflowError
from flask_geneva.exceptions import WorkflowNotFoundError

__all__ = ["HERO_LOOKUPS", "signal_hero"]

#: How many times ``signal_hero`` looks for the hero's workflow when the one it
#: found keeps ending before its lock (each end needs another writer's commit).
HERO_LOOKUPS = 3


def signal_hero(
    session: orm.Session,
    workflow_cls: Any,
    hero: Any,
    name: str,
    *,
    payload: Any = None,
    idempotency_key: str | None = None,
    start: bool = False,
) -> SignalDelivery:
    """Signal the hero's ongoing workflow of ``workflow_cls`` (R-WSIG-25).

    With ``start=True`` a workflow is created first when none is ongoing; two
    concurrent calls create one, the loser of the race signaling the winner's
    (the one-ongoing unique index decides, R-UNQ-01). Without an ongoing
    workflow, a retry (an ``idempotency_key`` the hero's ended workflow of the
    class received) returns that signal as a duplicate, and ``start`` creates
    nothing (R-WSIG-71). A workflow found ongoing that ends before the
    delivery locks it counts as none: the hero's workflow is looked up again,
    up to :data:`HERO_LOOKUPS` times (R-WSIG-74).

    Raises:
        WorkflowNotFoundError: No ongoing workflow, no ended one that received
            the key, and ``start`` is False.
        Everything :func:`deliver_signal` raises.
    """
    reference = workflow_cls.__geneva__.hero_reference(hero)
    for lookup in range(1, HERO_LOOKUPS + 1):
        workflow = _hero_workflow(session, workflow_cls, reference, idempotency_key)
        if workflow is None and start:
            try:
                workflow = workflow_creation.create_workflow(
                    session,
                    workflow_cls,
                    hero=hero,
                    allow_multiple=False,
                    step_job_options=None,
                    commit=True,
                )
            except DuplicateWorkflowError:
                session.rollback()
                workflow = _hero_workflow(session, workflow_cls, reference, None)
        if workflow is None:
            raise WorkflowNotFoundError(
                f"no ongoing {workflow_cls.__geneva_type__} workflow for hero "
                f"{format_hero(*reference)}; signal {name!r} was not stored "
                "(start=True creates one, for an event that should start a "
                "workflow; a late event, after the workflow ended, should not)"
            )
        try:
            return deliver_signal(
                session,
                workflow,
                name,
                payload=payload,
                idempotency_key=idempotency_key,
            )
        except NotOngoingError:
            # It ended (or was deleted) between the lookup and the lock: the
            # hero has no ongoing workflow now, so look again (R-WSIG-74).
            if lookup == HERO_LOOKUPS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns


def _hero_workflow(
    session: orm.Session,
    workflow_cls: Any,
    reference: tuple[Any, Any],
    key: str | None,
) -> Any:
    """The workflow of ``workflow_cls`` that ``signal_hero`` signals, or None.

    The hero's ongoing workflow (``allow_multiple`` false); without one, for a
    ``key``, the hero's ended workflow that received it, which answers the
    retry as a duplicate (R-WSIG-71).
    """
    geneva = workflow_cls.__geneva__
    workflow_type = workflow_cls.__geneva_type__
    hero_type, hero_id = reference  # (hero_type, hero_id) as stored
    workflow_id = engine_queries.ongoing_duplicate_id(
        session, geneva.Workflow, workflow_type, hero_type, hero_id
    )
    if workflow_id is None and key is not None and installed(session):
        workflow_id = signal_rows.ended_workflow_id_with_key(
            session,
            geneva.Workflow,
            geneva.WorkflowSignal,
            workflow_type,
            hero_type,
            hero_id,
            key,
        )
    return None if workflow_id is None else session.get(workflow_cls, workflow_id)
