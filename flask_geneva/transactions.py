"""How geneva's writes meet the caller's transaction (R-WF-14, issue 13).

Answered with SQLAlchemy's public API only:

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

__all__ = [
    "transaction_conflict",
]

#: MySQL/MariaDB error codes: 1213 deadlock (the whole transaction is rolled
#: back); 1020 "record has changed since last read" (MariaDB's snapshot
#: isolation, a serialization failure).
_MYSQL_CONFLICT_CODES = frozenset({1213, 1020})
#: SQLSTATE class 40 codes: serialization failure, deadlock detected.
_CONFLICT_SQLSTATES = frozenset({"40001", "40P01"})


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
