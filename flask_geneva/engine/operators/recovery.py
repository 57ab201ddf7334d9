"""Operator recovery of one workflow's in-progress execution (R-HK-28).

After a worker died (``kill -9``, an OOM kill, a lost machine) its execution stays
``in_progress`` until housekeeping finds it older than
``GENEVA_STUCK_IN_PROGRESS_THRESHOLD`` (one hour by default). ``recover()`` lets an
operator apply the same recovery (R-HK-23..27, shared with housekeeping through
:func:`flask_geneva.engine.operators.stuck_recovery.recover_locked_execution`) to one
workflow now.
Without ``force`` it refuses an execution younger than ``GENEVA_RECOVER_GRACE``,
whose worker may well still be running the step, and one whose registered worker
still heartbeats (R-WRK-06). Without the worker registry, or for an execution
claimed outside a registered worker, age is the only liveness evidence there is:
an older execution whose worker is in fact alive is recovered too, and its step
may then run twice (its late outcome is ignored, R-EXE-41).
"""

from __future__ import annotations

from typing import Any

from flask_geneva.core import clock
from flask_geneva.core import keys
from flask_geneva.db.context import context_of
from flask_geneva.engine import flow_control
from flask_geneva.engine.operator_transaction import operator_action
from flask_geneva.engine.operator_transaction import running_execution
from flask_geneva.engine.operators import stuck_recovery
from flask_geneva.engine.operators import worker_lost
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState

__all__ = ["recover"]


def recover(
    workflow: Any,
    *,
    execution_id: Any = None,
    force: bool,
    actor: str | None,
    via: str,
    commit: bool,
) -> Any:
    """Recover ``workflow``'s in-progress execution now, in one locked transaction.

    Applies housekeeping's recovery (R-HK-23..27) without waiting for the stuck
    threshold: with ``GENEVA_STUCK_RECOVERY_ACTION = "reattempt"`` the execution
    becomes completed/``recovered`` and the step is scheduled again (for a
    resumable step as a successor keeping the cursor); with ``"cancel"`` the
    execution is canceled/``recovered`` and the workflow canceled. On a paused
    workflow nothing is scheduled (``resume()`` retries the step); on a canceled or
    finished workflow the execution becomes canceled/``recovered``. An execution
    of a ready or performing workflow whose step ran past its ``timeout`` is
    handed to the step's exception policies instead (R-STO-20). Recorded in
    the operator actions (R-PDR-05). Safe against a concurrent executor or
    housekeeping run: the states are re-checked under the workflow lock.

    Args:
        workflow: The workflow (any state).
        execution_id: The execution the operator saw running; refused if it is
            not the workflow's in-progress execution any more. None takes the
            in-progress execution, whichever it is.
        force: Recover even an execution younger than ``GENEVA_RECOVER_GRACE``.
        actor: Who acts, for the operator action record.
        via: ``"api"``, ``"cli"`` or ``"admin"``.
        commit: Commit (and publish) at the end; False only flushes.

    Returns:
        The recovered execution.

    Raises:
        InvalidStateError: Called from inside the workflow's own step; the
            workflow has no in-progress execution (or not ``execution_id``); or,
            without ``force``, the execution started less than
            ``GENEVA_RECOVER_GRACE`` ago (the message gives its age) or its
            registered worker is alive (R-WRK-06).
        StepNotDefinedError: Reattempt of a step no longer defined; nothing
            changes.
        TypeError: ``force`` is not a bool.
        ValueError: ``via`` is not one of the allowed values, or
            ``execution_id`` is not a valid execution id.

    .. versionadded:: 0.2
    """
    if not isinstance(force, bool):
        raise TypeError(f"force must be True or False, got {force!r}")
    execution_id = _execution_key(execution_id, workflow.__geneva__.key_type)
    flow_control.refuse_in_own_step(workflow, "recover")
    with operator_action(
        # Any state today (R-HK-24..28); checked so the table stays the one source.
        workflow,
        "recover",
        actor=actor,
        via=via,
        commit=commit,
    ) as operator:
        session, locked = operator.session, operator.workflow
        config = context_of(session).settings
        running = running_execution(session, locked)
        if running is None or (
            execution_id is not None and str(running.id) != str(execution_id)
        ):
            raise InvalidStateError(_nothing_to_recover(locked, execution_id))
        now = clock.now()
        age = now - running.started_at if running.started_at is not None else None
        if not force and (age is None or age < config.recover_grace):
            raise InvalidStateError(
                f"Cannot recover step execution {running.id} of workflow {locked.id}: "
                f"it started {_seconds(age)} ago, less than GENEVA_RECOVER_GRACE "
                f"({_seconds(config.recover_grace)}), so its worker may still be "
                "running the step; wait, or force it (force=True, --force) if "
                "you know the worker is gone"
            )
        live = (
            None
            if force
            else worker_registry.live_worker_of(session, running, config=config)
        )
        if live is not None:
            raise InvalidStateError(
                f"Cannot recover step execution {running.id} of workflow {locked.id}: "
                f"its worker {live[0]} is alive (last heartbeat "
                f"{live[1].isoformat()}), so it is still running the step; wait, "
                "or force it (force=True, --force) if you know it is stuck"
            )
        stuck_recovery.recover_locked_execution(
            session,
            locked,
            running,
            action=config.stuck_recovery_action,
            ended_outcome=Outcome.RECOVERED,
            recovered_by=worker_lost.RecoveredBy("operator", actor, via),
        )
        operator.record(running, recorded_as="recover_forced" if force else None)
        locked.logger.warning(
            "operator recovered step execution %s (was %s, workflow now %s) via %s",
            running.id,
            StepExecutionState.IN_PROGRESS.value,
            locked.state,
            via,
        )
    return running


def _nothing_to_recover(workflow: Any, execution_id: Any) -> str:
    if execution_id is None:
        return (
            f"Cannot recover workflow {workflow.id}: it has no step execution in "
            "progress"
        )
    return (
        f"Cannot recover step execution {execution_id}: it is not the in-progress "
        f"execution of workflow {workflow.id} (it finished or was recovered "
        "meanwhile)"
    )


def _seconds(value: Any) -> str:
    if value is None:
        return "an unknown time"
    return f"{value.total_seconds():.0f} s"


def _execution_key(execution_id: Any, key_type: str) -> Any:
    """``execution_id`` as a key of the configured type; None stays None.

    Raises:
        ValueError: Not a valid execution id (the message names the value and
            what is accepted).
    """
    if execution_id is None:
        return None
    raw = None if isinstance(execution_id, bool | float) else str(execution_id)
    key = keys.parse_key(raw, key_type)
    if key is None:
        accepted = (
            "a UUID"
            if key_type == "uuid"
            else f"an integer from 1 to {keys.MAX_BIGINT_KEY}"
        )
        raise ValueError(
            f"execution_id must be {accepted} (or None for the running "
            f"execution), got {execution_id!r}"
        )
    return key
