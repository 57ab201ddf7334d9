"""How geneva's writes meet the caller's transaction (R-WF-14, R-TXN-02, issue 13).

Two questions, answered with SQLAlchemy's public API only:

* Did the caller open the transaction explicitly (``with db.session.begin():`` or
  a ``begin_nested()`` savepoint)? Then :meth:`Workflow.create` joins it instead of
  committing, and its publications wait for the caller's commit (R-TXN-02).
* Did the database abort the transaction because of a deadlock or a serialization
  failure? MySQL/MariaDB roll the whole transaction back on a deadlock, which takes
  every savepoint with it: the ``ROLLBACK TO SAVEPOINT`` that follows then fails with
  "SAVEPOINT … does not exist" and would hide the deadlock.
  :func:`transaction_conflict` digs the deadlock out so it is retried where that is
  safe, or raised as itself.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

__all__ = [
    "caller_began_transaction",
    "transaction_conflict",
]

#: MySQL/MariaDB error codes: 1213 deadlock (the whole transaction is rolled
#: back); 1020 "record has changed since last read" (MariaDB's snapshot
#: isolation, a serialization failure).
_MYSQL_CONFLICT_CODES = frozenset({1213, 1020})
#: SQLSTATE class 40 codes: serialization failure, deadlock detected.
_CONFLICT_SQLSTATES = frozenset({"40001", "40P01"})


def caller_began_transaction(session: orm.Session) -> bool:
    """Tell whether the caller explicitly opened the session's transaction.

    True inside ``with session.begin():`` and inside a ``begin_nested()``
    savepoint; False when no transaction is open or it was opened implicitly
    (autobegin, e.g. by an earlier query).

    Args:
        session: The session geneva is about to write through.

    Returns:
        Whether geneva must join the open transaction and leave its commit to the
        caller (R-WF-14).
    """
    root = session.get_transaction()
    if root is None:
        return False
    if session.get_nested_transaction() is not None:
        return True
    return root.origin is orm.SessionTransactionOrigin.BEGIN


def transaction_conflict(error: BaseException) -> sa_exc.DBAPIError | None:
    """Find a deadlock or serialization failure in ``error`` or its context chain.

    A failed ``ROLLBACK TO SAVEPOINT`` raises its own error with the deadlock as
    ``__context__``; this returns the deadlock itself.

    Args:
        error: An exception raised by a database write.

    Returns:
        The :class:`sqlalchemy.exc.DBAPIError` of the deadlock (MySQL/MariaDB 1213,
        PostgreSQL ``40P01``) or serialization failure (``40001``, MariaDB 1020),
        or None when the chain holds neither.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sa_exc.DBAPIError) and _is_conflict(current.orig):
            return current
        current = current.__cause__ or current.__context__
    return None


def _is_conflict(orig: Any) -> bool:
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in _CONFLICT_SQLSTATES:
        return True
    args: tuple[Any, ...] = getattr(orig, "args", ())
    # PyMySQL and mysqlclient put the server's error code first.
    return bool(args) and isinstance(args[0], int) and args[0] in _MYSQL_CONFLICT_CODES
