"""The operator's transaction: checks, row lock, audit record (R-EXT, R-PDR-05).

Every external flow-control operation (pause, cancel, skip in
:mod:`~flask_geneva.engine.flow_control`; resume, resume_at, run_now and recover
in :mod:`~flask_geneva.engine.operators`) runs through :func:`operator_action`:
it refuses a bad ``via``/``actor`` before anything is locked, locks the workflow
row, refuses the action unless the transition table allows it from the state
read under the lock (:data:`OPERATOR_ENTRIES`, the one source of those states),
and records the action in the same transaction, which it commits or rolls back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import workflow_log_fields
from flask_geneva.db import locks as row_locks
from flask_geneva.db.context import context_of
from flask_geneva.engine import metric_events
from flask_geneva.engine import traces
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.telemetry import tracing

__all__ = [
    "MAX_OPERATOR_ACTIONS",
    "OPERATOR_ENTRIES",
    "OperatorAction",
    "allowed_from",
    "check_operator",
    "lock_for_operator",
    "operator_action",
    "record_operator_action",
    "refuse_running",
    "refuse_state",
    "refuse_unless_allowed",
    "refuse_while_running",
    "running_execution",
    "running_refusal",
]

ACTION = tracing.ATTRIBUTES["action"]
VIA = tracing.ATTRIBUTES["via"]
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
#: Who acted: the Python API, the admin, the CLI, a canceled parent whose
#: cancel reached its children (R-CHD-31), or the dispatcher enforcing the
#: workflow's deadline (R-DL-21).
_VIA_VALUES = ("api", "admin", "cli", "parent", "deadline")


def check_operator(
    via: str, actor: object, *, allowed: tuple[str, ...] = _VIA_VALUES
) -> None:
    """Refuse, before anything is locked or written, a bad ``via`` or ``actor``.

    ``allowed`` is the ``via`` values the caller records: a workflow's operator
    actions by default; a schedule's actions take ``api``, ``admin``, ``cli``
    (R-SCHED-35).

    The actor is stored in the operator action record, a JSON document (R-PDR-05):
    a value that is not a str was refused by the JSON encoder only inside the
    UPDATE, and a NUL character by PostgreSQL's jsonb.
    """
    if via not in allowed:
        raise ValueError(
            f"via must be one of {', '.join(map(repr, allowed))}, got {via!r}"
        )
    if actor is not None and (not isinstance(actor, str) or "\x00" in actor):
        raise ValueError(
            f"actor must be None or a str naming the operator (no NUL character), "
            f"got {actor!r} ({type(actor).__name__}); pass e.g. "
            f"actor=current_user.email"
        )


def refuse_state(action: str, state: str) -> InvalidStateError:
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
        raise refuse(state) if refuse is not None else refuse_state(action, state)


def lock_for_operator(workflow: Any) -> tuple[orm.Session, Any]:
    session = workflow._object_session()
    locked = row_locks.lock_workflow(session, workflow.id)
    if locked is None:
        raise InvalidStateError(f"workflow {workflow.id} no longer exists")
    return session, locked


def record_operator_action(
    workflow: Any,
    *,
    action: str,
    actor: str | None,
    via: str,
    from_state: str | None,
    execution: Any,
) -> None:
    """Append an operator action to the workflow's ``operator_actions`` (R-PDR-05).

    Written in the caller's transaction, after the change it records (its
    ``to_state`` is the workflow's state now); skipped without the metadata
    column. Keeps the latest :data:`MAX_OPERATOR_ACTIONS` entries.

    Args:
        workflow: The workflow acted on (or just created, R-ADM-201).
        action: The action's name, e.g. ``"pause"`` or ``"start"``.
        actor: Who acted, or None.
        via: ``"api"``, ``"admin"``, ``"cli"``, ...
        from_state: The state before the action; None for a start.
        execution: The execution affected or created, or None.
    """
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
    metric_events.operator_action_recorded(workflow, action, via)  # R-OMET-13


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
        record_operator_action(
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
    for execution in row_locks.lock_active_executions(session, workflow.id):
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


def refuse_running(workflow: Any, execution: Any, action: str) -> InvalidStateError:
    return InvalidStateError(running_refusal(workflow.id, execution, action))


def refuse_while_running(session: orm.Session, workflow: Any, action: str) -> None:
    """Refuse an operation that would create an execution while one runs (R-EXT-26).

    Raises:
        InvalidStateError: The workflow has an ``in_progress`` execution; the
            message names it and suggests waiting or ``recover()`` (R-HK-28).
    """
    running = running_execution(session, workflow)
    if running is not None:
        raise refuse_running(workflow, running, action)


@dataclasses.dataclass(frozen=True)
class OperatorAction:
    """One operator action in progress, as :func:`operator_action` yields it.

    Attributes:
        action: The action's name (a key of :data:`OPERATOR_ENTRIES`).
        session: The session of the transaction.
        workflow: The workflow row, locked and re-read.
        from_state: Its state read under the lock, before the action.
    """

    action: str
    session: orm.Session
    workflow: Any
    from_state: str
    _record: Record

    def record(self, execution: Any, *, recorded_as: str | None = None) -> None:
        """Write the audit entry (R-PDR-05) in this transaction.

        Args:
            execution: The execution the action acted on, or None.
            recorded_as: The name to record when it differs from the action
                (``recover_forced`` for a forced ``recover``).
        """
        self._record(recorded_as or self.action, self.from_state, execution)


@contextlib.contextmanager
def operator_action(
    workflow: Any,
    action: str,
    *,
    actor: str | None,
    via: str,
    commit: bool,
    refuse: transitions.Refusal | None = None,
) -> Iterator[OperatorAction]:
    """Run operator ``action`` on ``workflow`` as one locked, audited transaction.

    Refuses a bad ``via``/``actor`` before anything is locked, locks the row
    (the caller's copy may be stale: R-EXT-26), refuses ``action`` unless the
    transition table allows it from the state read under the lock, and yields
    an :class:`OperatorAction`. When the block ends the transaction is committed
    and the queued tasks run (``commit``), else it is flushed; any error rolls
    it back and propagates.

    Args:
        workflow: The workflow (any loaded copy).
        action: A key of :data:`OPERATOR_ENTRIES`; also the name recorded.
        actor: Who asked (recorded), or None.
        via: ``"api"``, ``"admin"`` or ``"cli"``.
        commit: Commit at the end (else flush only).
        refuse: Builds the state refusal; by default the spec's wording.

    Raises:
        ValueError: ``via`` or ``actor`` is not allowed (nothing is locked).
        InvalidStateError: The workflow is gone, or its state does not allow
            ``action``.
    """
    check_operator(via, actor)
    session, locked = lock_for_operator(workflow)
    # R-OTEL-30: the action's span, current until it committed or failed.
    span = traces.action_span(
        f"geneva.operator {action}",
        workflow=locked,
        attributes={ACTION: action, VIA: via},
    )
    # The package's records of the action, its commit and its publications
    # name the workflow (R-OLOG-02).
    with (
        tracing.ending(span),
        log_fields.logging_about(workflow_log_fields(locked)),
        _operator_transaction(
            session, locked, actor=actor, via=via, commit=commit
        ) as record,
    ):
        refuse_unless_allowed(locked, action, refuse)
        yield OperatorAction(action, session, locked, locked.state, record)
