"""Session transaction helpers: commit keeping state, savepoints, safe rollback.

:func:`commit_keeping_state` commits geneva's own locked transactions without
expiring the instances that hold what was just written; :func:`savepoint` wraps a
block in a SAVEPOINT; :func:`rollback_after_error` rolls back without ever hiding
the error that caused it. :func:`geneva_from_session` finds the models a session
works on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.db import session_sync
from flask_geneva.db import write_path
from flask_geneva.db.context import models_of

__all__ = [
    "commit_keeping_state",
    "geneva_from_session",
    "rollback_after_error",
    "root_transactions_ended",
    "savepoint",
]

_log = module_logger("flask_geneva")

#: ``session.info`` key: how many root transactions the session ended.
_ROOT_ENDS = "geneva_root_transactions_ended"


def root_transactions_ended(session: orm.Session | orm.scoped_session[Any]) -> int:
    """How many root transactions ``session`` has ended (committed or rolled back).

    The executor compares it before and after a step's body: a body that
    committed or rolled back the session itself moved it, and its step keeps
    the separate commit of its writes (R-EXE-82). Savepoints do not count.

    Args:
        session: A session, or the ``scoped_session`` holding it.

    Returns:
        A count that only grows while the session lives.
    """
    return int(session_sync.actual_session(session).info.get(_ROOT_ENDS, 0))


def _count_root_end(session: orm.Session, transaction: Any) -> None:
    if transaction.parent is None:
        session.info[_ROOT_ENDS] = session.info.get(_ROOT_ENDS, 0) + 1


event.listen(orm.Session, "after_transaction_end", _count_root_end)


def geneva_from_session(session: orm.Session) -> Any:
    """Return the geneva models (``.Workflow``, ``.StepExecution``) of ``session``.

    The entry point of the operation bound them to the session
    (:meth:`flask_geneva.db.context.EngineContext.bind`); sessions geneva
    opens itself carry them from the start.

    Raises:
        GenevaConfigurationError: Nothing bound them to ``session``.
    """
    return models_of(session)


def commit_keeping_state(session: orm.Session) -> None:
    """Commit without expiring loaded instances.

    Used after geneva's own locked transactions: the instances hold exactly what
    was just written, so reloading them would only cost statements.
    """
    previous = session.expire_on_commit
    session.expire_on_commit = False
    try:
        write_path.flush(session, geneva_from_session(session))
        session.commit()
    finally:
        session.expire_on_commit = previous


@contextlib.contextmanager
def savepoint(session: orm.Session) -> Iterator[Any]:
    """A SAVEPOINT around a block; rolled back (and re-raised) on error."""
    with session.begin_nested() as nested:
        yield nested


def rollback_after_error(session: orm.Session, error: BaseException) -> None:
    """Roll ``session`` back after ``error`` without ever hiding ``error``.

    A rollback that fails too (a session left in an unusable state, a lost
    connection) is logged and the session closed, so the caller goes on to
    report or re-raise the first error, not the second (issue 14).
    """
    try:
        session.rollback()
    except Exception as rollback_error:  # noqa: BLE001 - never mask ``error``
        _log.warning(
            "rolling back after %s failed (%s: %s); closing the session",
            type(error).__name__,
            type(rollback_error).__name__,
            rollback_error,
        )
        session.close()
