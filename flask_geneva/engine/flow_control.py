"""Flow control: in-step signals and external operations (SPEC §8).

Whether a call is "inside a step" is decided by an execution context that the
executor sets for one workflow id while it runs a body or an imperative exception
handler (R-FC-01). Inside, ``cancel()``/``pause()``/... raise a
:class:`~flask_geneva.exceptions.FlowControlSignal` (a ``BaseException``) that the
executor handles. Outside, they are external operations: one transaction that locks
the workflow row and re-checks the state under the lock (R-EXT-01..27).
"""

from __future__ import annotations

import contextvars
import dataclasses
from datetime import timedelta
from typing import Any
from typing import NoReturn

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.durations import coerce_duration
from flask_geneva.db import locks as row_locks
from flask_geneva.engine import limits as flow_limits
from flask_geneva.engine import scheduling
from flask_geneva.engine.operator_transaction import operator_action
from flask_geneva.engine.operator_transaction import refuse_state
from flask_geneva.engine.operator_transaction import refuse_while_running
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.engine.workflow_signals import delivery as workflow_signals
from flask_geneva.exceptions import CancelSignal
from flask_geneva.exceptions import FinishSignal
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import PauseSignal
from flask_geneva.exceptions import ReattemptSignal
from flask_geneva.exceptions import SkipSignal
from flask_geneva.exceptions import SuspendSignal
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

__all__ = [
    "StepContext",
    "cancel",
    "current_step_context",
    "finish",
    "pause",
    "reattempt",
    "refuse_in_own_step",
    "skip",
    "step_context",
    "suspend",
]

#: The executions an operator's cancel or skip ends: scheduled, or parked at a
#: wait_for gate (R-WSIG-12).
_PENDING_STATES = (StepExecutionState.SCHEDULED, StepExecutionState.WAITING)


@dataclasses.dataclass(frozen=True)
class StepContext:
    """The execution context of R-FC-01.

    Attributes:
        workflow_id: The workflow whose step is running.
        phase: ``"body"`` (a step body or imperative handler: flow control raises
            signals) or ``"conditions"`` (cancel/skip conditions: flow control raises
            :class:`InvalidStateError`).
        resumable: Whether the running step is resumable (``suspend()`` is allowed).
        execution_id: The running step execution (body phase), or None.
        step_name: The running step's name (body phase), or None.
    """

    workflow_id: Any
    phase: str
    resumable: bool = False
    execution_id: Any = None
    step_name: str | None = None


_context: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "geneva_step_context", default=None
)


def current_step_context() -> StepContext | None:
    """Return the active step context, or None outside the executor."""
    return _context.get()


class step_context:
    """Mark the block as running inside a step of ``workflow_id`` (R-FC-01).

    A class rather than a generator context manager: the executor enters it
    three times per step.
    """

    __slots__ = ("_context", "_token")

    def __init__(
        self,
        workflow_id: Any,
        phase: str,
        *,
        resumable: bool = False,
        execution_id: Any = None,
        step_name: str | None = None,
    ) -> None:
        self._context = StepContext(
            workflow_id, phase, resumable, execution_id, step_name
        )
        self._token: contextvars.Token[StepContext | None] | None = None

    def __enter__(self) -> None:
        self._token = _context.set(self._context)

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None  # noqa: S101 - set by __enter__
        _context.reset(self._token)


def refuse_in_own_step(workflow: Any, action: str) -> None:
    """Refuse an operator ``action`` called from inside the workflow's own step.

    Resume, resume_at and recover have no in-step meaning (R-FC-01): inside a
    step they would act on the execution that is running them.

    Raises:
        InvalidStateError: The caller runs in a step of ``workflow``.
    """
    context = _context.get()
    if context is not None and context.workflow_id == workflow.id:
        raise InvalidStateError(
            f"cannot {action} workflow {workflow.id} from inside its own step"
        )


def _in_step(workflow: Any, action: str) -> bool:
    context = _context.get()
    if context is None or context.workflow_id != workflow.id:
        return False
    if context.phase == "conditions":
        raise InvalidStateError(
            f"cannot {action} workflow {workflow.id} while its cancel_if/skip_if "
            "conditions are being evaluated; conditions must only return a value"
        )
    workflow.logger.info("flow control: %s called from step", action)
    return True


def _wait(wait: Any) -> timedelta | None:
    return coerce_duration(wait, name="wait")


def reattempt(workflow: Any, *, wait: Any = None, rewind: bool = False) -> NoReturn:
    """Raise :class:`ReattemptSignal` from inside a step (R-FC-13).

    Raises:
        InvalidStateError: Called outside a step (R-EXT-06).
        ValueError/TypeError: ``wait`` is not a non-negative duration.
    """
    delay = _wait(wait)
    if not _in_step(workflow, "reattempt"):
        raise InvalidStateError(
            "reattempt() can only be called from within a step "
            f"(workflow {workflow.id})"
        )
    workflow.logger.info("flow control: reattempt wait=%s rewind=%s", delay, rewind)
    raise ReattemptSignal(delay, bool(rewind))


def finish(workflow: Any) -> NoReturn:
    """Raise :class:`FinishSignal` from inside a step (R-FC-14).

    Raises:
        InvalidStateError: Called outside a step (R-EXT-06).
    """
    if not _in_step(workflow, "finish"):
        raise InvalidStateError(
            f"finish() can only be called from within a step (workflow {workflow.id})"
        )
    raise FinishSignal()


def suspend(workflow: Any, *, wait: Any = None) -> NoReturn:
    """Raise :class:`SuspendSignal` from inside a resumable step (R-FC-15).

    Raises:
        InvalidStateError: Outside a step (R-EXT-06), or inside a regular step
            (the message names ``resumable_step``).
    """
    delay = _wait(wait)
    if not _in_step(workflow, "suspend"):
        raise InvalidStateError(
            f"suspend() can only be called from within a step (workflow {workflow.id})"
        )
    context = _context.get()
    if context is None or not context.resumable:
        raise InvalidStateError(
            "suspend() is only available in steps declared with @resumable_step; "
            "use reattempt(wait=...) in a regular step"
        )
    workflow.logger.info("flow control: suspend wait=%s", delay)
    raise SuspendSignal(delay)


# -- external operations --------------------------------------------------------------


def pause(workflow: Any, *, actor: str | None, via: str, commit: bool) -> None:
    """Pause ``workflow``: a signal in a step, else R-EXT-01/02 under the row lock.

    The scheduled execution, if any, is left as it is; a performing workflow's
    running execution is left to the executor (R-EXE-42).

    Raises:
        PauseSignal: Inside a step.
        InvalidStateError: The state (re-checked under the lock) is not ready or
            performing.
    """
    if _in_step(workflow, "pause"):
        raise PauseSignal()
    with operator_action(
        workflow, "pause", actor=actor, via=via, commit=commit
    ) as action:
        locked = action.workflow
        now = clock.now()
        transitions.apply(
            transitions.OPERATOR_PAUSE,
            now,
            workflow=locked,
            refuse=lambda state: refuse_state("pause", state),
        )
        # A waiting chain successor's slots are not held while paused (R-LIM-26).
        flow_limits.release_chain_holds(action.session, locked, now)
        action.record(None)
        locked.logger.info("paused (was %s) via %s", action.from_state, via)


def cancel(workflow: Any, *, actor: str | None, via: str, commit: bool) -> None:
    """Cancel ``workflow``: a signal in a step, else R-EXT-03 under the row lock.

    The scheduled execution, if any, becomes canceled/``canceled``; a running one
    is left to the executor.

    Raises:
        CancelSignal: Inside a step.
        InvalidStateError: The state is finished or canceled.
    """
    if _in_step(workflow, "cancel"):
        raise CancelSignal()
    with operator_action(
        workflow, "cancel", actor=actor, via=via, commit=commit
    ) as action:
        session, locked = action.session, action.workflow
        now = clock.now()
        canceled = None
        for execution in row_locks.lock_active_executions(session, locked.id):
            if execution.state in _PENDING_STATES:
                transitions.apply(transitions.OPERATOR_CANCEL, now, execution=execution)
                canceled = execution
        transitions.apply(
            transitions.OPERATOR_CANCEL,
            now,
            workflow=locked,
            refuse=lambda state: refuse_state("cancel", state),
        )
        # Claimed workflow signals end with the workflow (R-WSIG-15).
        workflow_signals.settle_claimed_signals(session, locked, None, now)
        action.record(canceled)
        locked.logger.info("canceled (was %s) via %s", action.from_state, via)


def skip(
    workflow: Any,
    *,
    actor: str | None,
    via: str,
    commit: bool,
    expected_step: str | None = None,
) -> None:
    """Skip the current step: a signal in a step, else R-EXT-04 under the row lock.

    From ``ready`` the scheduled execution becomes skipped/``skipped``; from
    ``paused`` a preserved one becomes canceled/``canceled`` (R-SCH-03) and the
    workflow ``ready``. Then the next step is scheduled, or the workflow finishes
    after the last one (R-EXT-05), never beside an active execution.

    Args:
        expected_step: When given, skip only if the current step (``current_step_name``
            or else ``next_step_name``) is still this one. A button pressed twice
            (or a stale page) then cannot skip a second step: the admin passes the
            step it showed.

    Raises:
        SkipSignal: Inside a step.
        InvalidStateError: The state is not ready or paused, the current step is
            not ``expected_step`` any more, or an execution is still in progress
            (R-EXT-26; the message names it).
        StepNotDefinedError: The current step is no longer defined in the class
            (or the class itself is gone); nothing changes.
    """
    if _in_step(workflow, "skip"):
        raise SkipSignal()
    with operator_action(
        workflow, "skip", actor=actor, via=via, commit=commit
    ) as action:
        session, locked, from_state = action.session, action.workflow, action.from_state
        now = clock.now()
        reference = locked.current_step_name or locked.next_step_name
        if expected_step is not None and reference != expected_step:
            raise InvalidStateError(
                f"Cannot skip step {expected_step!r}: the current step of workflow "
                f"{locked.id} is now {reference!r} (it ran or was skipped meanwhile)"
            )
        refuse_while_running(session, locked, "skip")
        if reference is None:
            _refuse_finish_beside_active(session, locked)
        if reference is not None and not locked.steps.is_known(reference):
            # Skipping past an unknown step could finish the workflow: refuse.
            raise scheduling.step_not_defined(locked, reference)
        if from_state == WorkflowState.READY:
            for execution in row_locks.lock_active_executions(session, locked.id):
                if execution.state in _PENDING_STATES:
                    transitions.apply(
                        transitions.OPERATOR_SKIP, now, execution=execution
                    )
        else:
            # From paused the preserved execution ends canceled, as R-SCH-03 ends
            # it, also when no step follows and nothing is inserted (R-EXT-04).
            row_locks.cancel_scheduled_executions(session, locked.id, now)
        # Skipping a step consumes the workflow signal it claimed (R-WSIG-12).
        workflow_signals.consume_for_skipped_step(session, locked, reference, now)
        transitions.apply(
            transitions.OPERATOR_SKIP,
            now,
            workflow=locked,
            refuse=lambda state: refuse_state("skip", state),
        )
        if from_state == WorkflowState.READY:
            session.flush()
        if reference is None:  # the last step completed while paused (R-EXE-42a)
            transitions.apply(transitions.FINISH_AFTER_LAST_STEP, now, workflow=locked)
            created = None
        else:
            created = scheduling.schedule_next_step(
                session, locked, cancel_stray=from_state == WorkflowState.READY
            )
        action.record(created)
        locked.logger.info("skipped step (was %s) via %s", from_state, via)


def _refuse_finish_beside_active(session: orm.Session, workflow: Any) -> None:
    """Refuse to finish a workflow by ``skip()`` while it has an active execution.

    With neither a current nor a next step, skip finishes the workflow
    (R-EXT-05); an active execution beside that would be left behind a finished
    workflow, so the skip is refused, naming it (seen in an operator race).
    """
    active = row_locks.lock_active_executions(session, workflow.id)
    if active:
        raise InvalidStateError(
            f"Cannot skip on workflow {workflow.id}: it has no current or next "
            f"step, but execution {active[0].id} ({active[0].step_name!r}) is "
            f"{active[0].state}; resume the workflow instead"
        )
