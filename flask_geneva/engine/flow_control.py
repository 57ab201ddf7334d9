"""Flow control: in-step signals and external operations (SPEC §8).

Whether a call is "inside a step" is decided by an execution context that the
executor sets for one workflow id while it runs a body or an imperative exception
handler (R-FC-01). Inside, ``cancel()``/``pause()``/... raise a
:class:`~flask_geneva.exceptions.FlowControlSignal` (a ``BaseException``) that the
executor handles. Outside, they are external operations: one transaction that locks
the workflow row and re-checks the state under the lock (R-EXT-01..27).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from typing import NoReturn

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core.durations import coerce_duration
from flask_geneva.db import locks as store
from flask_geneva.db.context import context_of
from flask_geneva.engine import scheduling
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
    "OPERATOR_ENTRIES",
    "StepContext",
    "allowed_from",
    "cancel",
    "check_operator",
    "current_step_context",
    "finish",
    "lock_for_operator",
    "operator_transaction",
    "pause",
    "reattempt",
    "refuse_running",
    "refuse_state",
    "refuse_unless_allowed",
    "refuse_while_running",
    "running_execution",
    "running_refusal",
    "skip",
    "step_context",
    "suspend",
]

#: Kept in workflow metadata "operator_actions" (R-PDR-05).
MAX_OPERATOR_ACTIONS = 200
#: The transition table's entries each operator action (named as R-PDR-05 records
#: it) applies. The action is allowed from their workflow from-states, and only
#: from those: the engine refuses the others (:func:`refuse_unless_allowed`), the
#: admin shows its buttons and bulk actions for them (R-ADM-20, R-ADM-52) and the
#: CLI, which calls the engine, follows (R-CLI-02). Recovery's entries cover every
#: workflow state: it is refused for want of a running execution, not by state.
OPERATOR_ENTRIES: Mapping[str, tuple[transitions.Transition, ...]] = {
    "pause": (transitions.OPERATOR_PAUSE,),
    "resume": (transitions.OPERATOR_RESUME, transitions.OPERATOR_RESUME_RUNNING),
    "resume_rewind": (transitions.OPERATOR_RESUME,),
    "resume_at": (transitions.OPERATOR_RESUME_AT,),
    "cancel": (transitions.OPERATOR_CANCEL,),
    "skip": (transitions.OPERATOR_SKIP,),
    "run_now": (transitions.OPERATOR_RUN_NOW,),
    "recover": tuple(
        entry
        for entry in transitions.TABLE
        if entry.actor is transitions.Actor.HOUSEKEEPING
    ),
}
_VIA_VALUES = ("api", "admin", "cli")
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
    """

    workflow_id: Any
    phase: str
    resumable: bool = False


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
        self, workflow_id: Any, phase: str, *, resumable: bool = False
    ) -> None:
        self._context = StepContext(workflow_id, phase, resumable)
        self._token: contextvars.Token[StepContext | None] | None = None

    def __enter__(self) -> None:
        self._token = _context.set(self._context)

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None  # noqa: S101 - set by __enter__
        _context.reset(self._token)


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


def _check_operator(via: str, actor: object) -> None:
    """Refuse, before anything is locked or written, a bad ``via`` or ``actor``.

    The actor is stored in the operator action record, a JSON document (R-PDR-05):
    a value that is not a str was refused by the JSON encoder only inside the
    UPDATE, and a NUL character by PostgreSQL's jsonb.
    """
    if via not in _VIA_VALUES:
        raise ValueError(
            f"via must be one of {', '.join(map(repr, _VIA_VALUES))}, got {via!r}"
        )
    if actor is not None and (not isinstance(actor, str) or "\x00" in actor):
        raise ValueError(
            f"actor must be None or a str naming the operator (no NUL character), "
            f"got {actor!r} ({type(actor).__name__}); pass e.g. "
            f"actor=current_user.email"
        )


def _refuse(action: str, state: str) -> InvalidStateError:
    # The message is the spec's exact wording (R-EXT-01..04, R-EXT-20); the states
    # each operation is allowed from are the table's (allowed_from).
    preposition = "on " if action == "skip" else ""
    article = "an" if state[:1] in "aeiou" else "a"
    return InvalidStateError(f"Cannot {action} {preposition}{article} {state} workflow")


def allowed_from(action: str) -> tuple[WorkflowState, ...]:
    """The workflow states operator ``action`` is allowed from, in the enum's order.

    Read from the transition table: every state one of the action's entries
    (:data:`OPERATOR_ENTRIES`) starts the workflow from.

    Raises:
        KeyError: ``action`` is not an operator action.
    """
    starts = [e.workflow.from_states for e in OPERATOR_ENTRIES[action] if e.workflow]
    return tuple(state for state in WorkflowState if any(state in s for s in starts))


def refuse_unless_allowed(
    workflow: Any, action: str, refuse: transitions.Refusal | None = None
) -> None:
    """Refuse ``action`` unless one of its table entries starts from the state.

    Args:
        workflow: The workflow; its state counts once read under the row lock.
        action: A key of :data:`OPERATOR_ENTRIES`.
        refuse: Builds the error from the state found; by default the spec's
            "Cannot <action> a <state> workflow" (R-EXT-01..04, R-EXT-20).

    Raises:
        InvalidStateError: The state is not one the action is allowed from.
    """
    entries = OPERATOR_ENTRIES[action]
    if not any(transitions.can_apply(entry, workflow=workflow) for entry in entries):
        state = str(workflow.state)
        raise refuse(state) if refuse is not None else _refuse(action, state)


def _locked(workflow: Any) -> tuple[orm.Session, Any]:
    session = workflow._object_session()
    locked = store.lock_workflow(session, workflow.id)
    if locked is None:
        raise InvalidStateError(f"workflow {workflow.id} no longer exists")
    return session, locked


def _record_operator_action(
    workflow: Any,
    *,
    action: str,
    actor: str | None,
    via: str,
    from_state: str,
    execution: Any,
) -> None:
    # R-PDR-05: same transaction as the change; silently skipped without metadata.
    actions = workflow.read_metadata("operator_actions")
    entries = list(actions) if isinstance(actions, list) else []
    entries.append(
        {
            "action": action,
            "at": clock.now().isoformat(),
            "actor": actor,
            "via": via,
            "from_state": from_state,
            "to_state": workflow.state,
            "execution_id": _jsonable(execution.id) if execution is not None else None,
        }
    )
    workflow.write_metadata("operator_actions", entries[-MAX_OPERATOR_ACTIONS:])


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, int | str) else str(value)


def _finish_external(session: orm.Session, commit: bool) -> None:
    if commit:
        session.commit()
        context_of(session).run_queued_tasks()
    else:
        session.flush()


Record = Callable[[str, str, Any], None]
"""Records an operator action: ``record(action, from_state, execution)``."""


@contextlib.contextmanager
def _operator_transaction(
    session: orm.Session, workflow: Any, *, actor: str | None, via: str, commit: bool
) -> Iterator[Record]:
    """Run one operator action on the locked ``workflow`` as one transaction.

    Yields ``record(action, from_state, execution)``, which records the action
    on the workflow in the same transaction (R-PDR-05). When the block ends the
    transaction is committed and the queued tasks run (``commit``), else it is
    flushed; any error, also one committing, rolls it back and propagates.
    """

    def record(action: str, from_state: str, execution: Any) -> None:
        _record_operator_action(
            workflow,
            action=action,
            actor=actor,
            via=via,
            from_state=from_state,
            execution=execution,
        )

    try:
        yield record
        _finish_external(session, commit)
    except BaseException:
        session.rollback()
        raise


def running_execution(session: orm.Session, workflow: Any) -> Any:
    """Lock and return the workflow's ``in_progress`` execution, or None (R-EXT-26).

    The caller holds the workflow lock, so no execution can start or end meanwhile
    (the executor locks the workflow first too).
    """
    for execution in store.lock_active_executions(session, workflow.id):
        if execution.state == StepExecutionState.IN_PROGRESS:
            return execution
    return None


def running_refusal(workflow_id: Any, execution: Any, action: str) -> str:
    """The message refusing ``action`` while ``execution`` runs (R-EXT-26)."""
    return (
        f"Cannot {action} workflow {workflow_id}: step execution {execution.id} "
        f"(step '{execution.step_name}') is still in progress; wait for it to "
        "finish, or recover it if its worker died (workflow.recover(), "
        f"`flask geneva recover {workflow_id}`)"
    )


def _refuse_running(workflow: Any, execution: Any, action: str) -> InvalidStateError:
    return InvalidStateError(running_refusal(workflow.id, execution, action))


def refuse_while_running(session: orm.Session, workflow: Any, action: str) -> None:
    """Refuse an operation that would create an execution while one runs (R-EXT-26).

    Raises:
        InvalidStateError: The workflow has an ``in_progress`` execution; the
            message names it and suggests waiting or ``recover()`` (R-HK-28).
    """
    running = running_execution(session, workflow)
    if running is not None:
        raise _refuse_running(workflow, running, action)


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
    _check_operator(via, actor)
    # Checked under the lock only: the caller's copy may be stale (R-EXT-26).
    session, locked = _locked(workflow)
    with _operator_transaction(
        session, locked, actor=actor, via=via, commit=commit
    ) as record:
        refuse_unless_allowed(locked, "pause")
        from_state = locked.state
        transitions.apply(
            transitions.OPERATOR_PAUSE,
            clock.now(),
            workflow=locked,
            refuse=lambda state: _refuse("pause", state),
        )
        record("pause", from_state, None)
        locked.logger.info("paused (was %s) via %s", from_state, via)


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
    _check_operator(via, actor)
    # Checked under the lock only: the caller's copy may be stale (R-EXT-26).
    session, locked = _locked(workflow)
    with _operator_transaction(
        session, locked, actor=actor, via=via, commit=commit
    ) as record:
        refuse_unless_allowed(locked, "cancel")
        from_state = locked.state
        now = clock.now()
        canceled = None
        for execution in store.lock_active_executions(session, locked.id):
            if execution.state in _PENDING_STATES:
                transitions.apply(transitions.OPERATOR_CANCEL, now, execution=execution)
                canceled = execution
        transitions.apply(
            transitions.OPERATOR_CANCEL,
            now,
            workflow=locked,
            refuse=lambda state: _refuse("cancel", state),
        )
        # Claimed workflow signals end with the workflow (R-WSIG-15).
        workflow_signals.settle_claimed_signals(session, locked, None, now)
        record("cancel", from_state, canceled)
        locked.logger.info("canceled (was %s) via %s", from_state, via)


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
    _check_operator(via, actor)
    # Checked under the lock only: the caller's copy may be stale (R-EXT-26).
    session, locked = _locked(workflow)
    with _operator_transaction(
        session, locked, actor=actor, via=via, commit=commit
    ) as record:
        refuse_unless_allowed(locked, "skip")
        from_state = locked.state
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
            for execution in store.lock_active_executions(session, locked.id):
                if execution.state in _PENDING_STATES:
                    transitions.apply(
                        transitions.OPERATOR_SKIP, now, execution=execution
                    )
        else:
            # From paused the preserved execution ends canceled, as R-SCH-03 ends
            # it, also when no step follows and nothing is inserted (R-EXT-04).
            store.cancel_scheduled_executions(session, locked.id, now)
        # Skipping a step consumes the workflow signal it claimed (R-WSIG-12).
        workflow_signals.consume_for_skipped_step(session, locked, reference, now)
        transitions.apply(
            transitions.OPERATOR_SKIP,
            now,
            workflow=locked,
            refuse=lambda state: _refuse("skip", state),
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
        record("skip", from_state, created)
        locked.logger.info("skipped step (was %s) via %s", from_state, via)


def _refuse_finish_beside_active(session: orm.Session, workflow: Any) -> None:
    """Refuse to finish a workflow by ``skip()`` while it has an active execution.

    With neither a current nor a next step, skip finishes the workflow
    (R-EXT-05); an active execution beside that would be left behind a finished
    workflow, so the skip is refused, naming it (seen in an operator race).
    """
    active = store.lock_active_executions(session, workflow.id)
    if active:
        raise InvalidStateError(
            f"Cannot skip on workflow {workflow.id}: it has no current or next "
            f"step, but execution {active[0].id} ({active[0].step_name!r}) is "
            f"{active[0].state}; resume the workflow instead"
        )


# Shared with the operator's recover() (operator_recovery, R-HK-28), resume()
# (operator_resume) and resume_at() (operator_resume_at), which run the same
# locked, audited transaction as the operations above.
check_operator = _check_operator
refuse_state = _refuse
refuse_running = _refuse_running
lock_for_operator = _locked
operator_transaction = _operator_transaction
