"""Values that live and die with the session transaction that made them (R-TXN-03).

What a transaction asks to happen when it commits (a publication, a child's
settlement for its parent) belongs to the innermost transaction open when it
was asked: a savepoint that rolls back drops it, a savepoint that is released
hands it to its parent, and the root transaction's end takes whatever is left
(its commit has used it by then; its rollback drops it). SQLAlchemy fires
``after_commit`` for released savepoints too; these listeners tell them apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from typing import Generic
from typing import TypeVar

from sqlalchemy import event
from sqlalchemy import orm

__all__ = ["TransactionScoped", "innermost_transaction"]

_V = TypeVar("_V")


def innermost_transaction(session: orm.Session) -> orm.SessionTransaction | None:
    """The session's innermost open transaction (a savepoint, else the root)."""
    return session.get_nested_transaction() or session.get_transaction()


@dataclasses.dataclass
class _Entry(Generic[_V]):
    transaction: orm.SessionTransaction | None
    value: _V


class TransactionScoped(Generic[_V]):
    """A list of values per session, each owned by the transaction that added it.

    Args:
        key: The ``session.info`` key the list is kept under (one per use).
    """

    def __init__(self, key: str) -> None:
        self._key = key
        event.listen(orm.Session, "after_commit", self._after_commit)
        event.listen(orm.Session, "after_transaction_end", self._after_transaction_end)

    def add(self, session: orm.Session, value: _V) -> None:
        """Add ``value``, owned by the session's innermost open transaction."""
        entries: list[_Entry[_V]] = session.info.setdefault(self._key, [])
        entries.append(_Entry(innermost_transaction(session), value))

    def take(self, session: orm.Session) -> list[_V]:
        """Remove and return every value, oldest first."""
        entries: list[_Entry[_V]] = session.info.pop(self._key, None) or []
        return [entry.value for entry in entries]

    def __contains__(self, session: object) -> bool:
        return isinstance(session, orm.Session) and bool(session.info.get(self._key))

    def _after_commit(self, session: orm.Session) -> None:
        entries: list[_Entry[Any]] | None = session.info.get(self._key)
        if not entries:
            return
        committed = innermost_transaction(session)
        if committed is not None and committed.nested:
            for entry in entries:
                if entry.transaction is committed:
                    entry.transaction = committed.parent

    def _after_transaction_end(
        self, session: orm.Session, transaction: orm.SessionTransaction
    ) -> None:
        entries: list[_Entry[Any]] | None = session.info.get(self._key)
        if not entries:
            return
        if transaction.parent is None:
            session.info.pop(self._key, None)
            return
        kept = [entry for entry in entries if entry.transaction is not transaction]
        if kept:
            session.info[self._key] = kept
        else:
            session.info.pop(self._key, None)
