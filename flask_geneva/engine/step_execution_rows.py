"""Row helpers of a step execution: start it or mark it by hand (R-SE-47).

The gem's ``start!``, ``mark_completed!`` and friends, for users' own tests and
tooling. Each helper locks the workflow row and then the execution row (SPEC §7
order, so it never deadlocks with the executor), re-reads the execution, writes
the state, its timestamp and ``finished_at`` (R-SE-02/03), and commits, unless
the caller began the transaction explicitly (``with db.session.begin():``), which
the helper then joins (as :meth:`Workflow.create` does). Only :func:`start`
checks the state; the ``mark_*`` helpers perform no transition validation, as in
the gem. The executor never calls them: they neither run a step nor schedule the
next one.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import exc as orm_exc

from flask_geneva.core import clock
from flask_geneva.core import transactions
from flask_geneva.db import error_recording
from flask_geneva.db import locks as row_locks
from flask_geneva.db import session_transactions
from flask_geneva.db.states import parse_outcome
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState

__all__ = ["mark", "start"]

_MARK = {
    StepExecutionState.COMPLETED: transitions.MARK_COMPLETED,
    StepExecutionState.FAILED: transitions.MARK_FAILED,
    StepExecutionState.SKIPPED: transitions.MARK_SKIPPED,
    StepExecutionState.CANCELED: transitions.MARK_CANCELED,
}


def start(execution: Any) -> bool:
    """Move a ``scheduled`` execution to ``in_progress`` and set ``started_at``.

    Args:
        execution: A persistent step execution.

    Returns:
        True if it was ``scheduled`` (checked under the row lock) and is now
        ``in_progress``; False, changing nothing, in any other state.

    Raises:
        InvalidStateError: The execution row no longer exists.
    """
    session = _session_of(execution)
    locked = _lock(session, execution)
    if locked.state != StepExecutionState.SCHEDULED:
        _finish(session)  # ends the transaction and its locks; nothing changed
        return False
    transitions.apply(transitions.START, clock.now(), execution=locked)
    _finish(session)
    return True


def mark(
    execution: Any,
    state: StepExecutionState,
    outcome: Outcome | str,
    *,
    error: BaseException | None = None,
) -> None:
    """Put ``execution`` into the terminal ``state`` with ``outcome``.

    Sets the state's timestamp and ``finished_at`` to the same now (R-SE-02/03)
    and, with ``error``, records it (R-SE-20). No transition validation.

    Args:
        execution: A persistent step execution.
        state: ``completed``, ``failed``, ``skipped`` or ``canceled``.
        outcome: An outcome name (see :class:`~flask_geneva.Outcome`).
        error: The exception to record (``mark_failed``), or None.

    Raises:
        ValueError: ``outcome`` is not an outcome; the message lists the allowed
            ones.
        InvalidStateError: The execution row no longer exists.
    """
    checked = parse_outcome(outcome)
    session = _session_of(execution)
    locked = _lock(session, execution)
    transitions.apply(_MARK[state], clock.now(), execution=locked, outcome=checked)
    if error is not None:
        error_recording.record_error(locked, error)
    _finish(session)


def _session_of(execution: Any) -> orm.Session:
    session = orm.object_session(execution)
    if session is None:
        # Detached: the locking read loads the row into the extension's session.
        session = execution.__geneva__.session
    return session


def _lock(session: orm.Session, execution: Any) -> Any:
    identity = sa.inspect(execution).identity
    if identity is None:
        raise InvalidStateError(
            f"{execution!r} was never saved: start() and mark_*() need a stored row"
        )
    execution_id = identity[0]
    try:
        workflow_id = execution.workflow_id  # may reload an expired instance
    except orm_exc.ObjectDeletedError:
        raise _gone(execution_id) from None
    # Workflow first, then the execution (SPEC §7); both re-read from the database.
    row_locks.lock_workflow(session, workflow_id)
    locked = row_locks.lock_execution(session, execution_id)
    if locked is None:
        raise _gone(execution_id)
    return locked


def _gone(execution_id: Any) -> InvalidStateError:
    return InvalidStateError(f"step execution {execution_id} no longer exists")


def _finish(session: orm.Session) -> None:
    if transactions.caller_began_transaction(session):
        # The caller's block commits (or rolls back) the change with its own work.
        session.flush()
        return
    session_transactions.commit_keeping_state(session)
