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
* May geneva retry a transaction the database chose as a deadlock victim
  (R-EXE-80)? :func:`owns_transaction` answers for an operator's operation;
  :func:`retry_on_conflict` is the one retry loop (the operator's operation,
  the worker's claim and finalize): it decides, logs, waits and starts over,
  and :func:`run_retrying_conflicts` wraps an operator's operation in it.
  The writes sent on ``session.connection()`` that it must see are tracked in
  every transaction but the executor's own (:func:`executor_transactions`),
  which nothing asks about: the step path pays a check per statement.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import time
import weakref
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any
from typing import TypeVar

from sqlalchemy import engine as sa_engine
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy import orm

from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import module_logger

__all__ = [
    "CONFLICT_ATTEMPTS",
    "caller_began_transaction",
    "database_error",
    "executor_transactions",
    "is_own_listener",
    "owns_transaction",
    "retry_on_conflict",
    "run_retrying_conflicts",
    "track_connection_writes",
    "transaction_conflict",
    "user_code_transactions",
]

_T = TypeVar("_T")
_log = module_logger("flask_geneva")

#: Attempts of a transaction the database keeps choosing as a deadlock victim
#: (R-EXE-80): finalize's outcome and an operator's operation.
CONFLICT_ATTEMPTS = 5
#: Upper bound, in seconds, of the jittered sleep before the second attempt; it
#: grows linearly with the attempt number.
CONFLICT_RETRY_DELAY = 0.02
#: ``session.info`` key: the root transaction in which an ORM flush wrote.
_FLUSHED_IN = "geneva_flushed_in"
#: ``session.info`` key: a statement that may write was sent before the session
#: began the transaction it runs in.
_WRITE_BEFORE_BEGIN = "geneva_write_before_begin"
#: ``engine.__dict__`` flag: :func:`track_connection_writes` listens on it.
_TRACKED_FLAG = "geneva_tracks_connection_writes"
#: Attribute of a :class:`~sqlalchemy.engine.Connection` (kept in its
#: ``__dict__``, so it lives as long as that ``Connection`` object, one per
#: session transaction on an engine bind, never in the pool's ``info`` that
#: outlives it): weak references to the session whose root transaction began on
#: it, and to that transaction. Absent: nothing to track, the cursor listener
#: returns at once.
_SESSION_ON_CONNECTION = "_geneva_session_transaction"
#: The session whose transactions the executor runs (:func:`executor_transactions`):
#: its transactions begun meanwhile are not registered for write tracking.
_executor_session: contextvars.ContextVar[orm.Session | None] = contextvars.ContextVar(
    "geneva_executor_session", default=None
)
#: How a statement that cannot write starts (lower case): a read, or the
#: transaction's own control statements (a savepoint's, the isolation level's).
_NOT_WRITING = (
    "select",
    "show",
    "savepoint",
    "release",
    "rollback to",
    "begin",
    "set transaction",
)

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


def owns_transaction(session: orm.Session, *, commit: bool) -> bool:
    """Tell whether an operation about to run holds nothing of the caller's.

    Only then may it roll back and retry after a deadlock (R-EXE-80): the
    database aborted the whole transaction, and a retry would commit the
    operation without the caller's earlier work.

    Args:
        session: The session the operation writes through.
        commit: The operation commits at its end.

    Returns:
        True when the operation commits, the caller did not open the
        transaction (:func:`caller_began_transaction`), and the session has
        neither pending changes nor, in its open transaction, an ORM flush, a
        statement other than a SELECT sent with ``session.execute()``, or one
        sent on ``session.connection()`` directly that does not start with
        ``SELECT`` (an autobegun transaction that only read is fine; the
        connection's statements are seen on the engines ``Geneva.init_app``
        set up, :func:`track_connection_writes`, in every transaction but the
        executor's own, :func:`executor_transactions`). Not seen: a ``SELECT``
        sent on the connection that writes through a function it calls.
    """
    if not commit or caller_began_transaction(session):
        return False
    if session.new or session.dirty or session.deleted:
        return False
    root = session.get_transaction()
    return root is None or session.info.get(_FLUSHED_IN) is not root


def _retry_conflict(
    error: BaseException,
    attempt: int,
    *,
    allowed: bool,
    what: str,
    logger: Any = None,
    attempts: int = CONFLICT_ATTEMPTS,
) -> bool:
    """Decide whether attempt ``attempt``, ended by ``error``, is tried again.

    On True the caller has rolled back (or does so now) and starts over in a
    fresh transaction; this logs the retry and sleeps a short, jittered while
    first, so that the two sides of a deadlock do not meet again at once.

    Args:
        error: What ended the attempt.
        attempt: The attempt it ended, from 1.
        allowed: The caller may retry (it owns the aborted transaction and
            nothing it cannot repeat ran in it).
        what: Names the operation in the log line.
        logger: Where the retry is logged; default ``flask_geneva``.
        attempts: The most attempts.

    Returns:
        True for one more attempt: ``error`` holds a deadlock or serialization
        failure (:func:`transaction_conflict`), ``allowed`` and attempts remain.
    """
    conflict = transaction_conflict(error)
    if conflict is None or not allowed or attempt >= attempts:
        return False
    as_tagged(logger or _log).warning(
        "retrying %s after the database chose it as a deadlock victim (%s); "
        "attempt %d of %d (R-EXE-80)",
        what,
        conflict.orig,
        attempt + 1,
        attempts,
    )
    time.sleep(random.uniform(0.0, CONFLICT_RETRY_DELAY * attempt))  # noqa: S311 - jitter
    return True


def _raise_unmasked(error: BaseException) -> None:
    """Raise the conflict hidden in ``error``'s context chain, if any.

    A failed ``ROLLBACK TO SAVEPOINT`` after a MySQL/MariaDB deadlock is never
    what the caller sees: the deadlock is raised instead. Returns when ``error``
    holds no conflict or is the conflict itself (the caller re-raises it).
    """
    conflict = transaction_conflict(error)
    if conflict is not None and conflict is not error:
        raise conflict from None


def retry_on_conflict(
    attempt: Callable[[], _T],
    *,
    allowed: Callable[[], bool],
    what: str,
    rollback: Callable[[BaseException], None],
    rollback_always: bool = False,
    logger: Callable[[], Any] | None = None,
    on_retry: Callable[[], None] | None = None,
    on_give_up: Callable[[BaseException], None] | None = None,
    outage: Any = None,
) -> _T:
    """Run ``attempt``; after a deadlock, roll back and run it again (R-EXE-80).

    The one retry loop of R-EXE-80, for an operator's operation
    (:func:`run_retrying_conflicts`), the worker's claim and its finalize. Each
    attempt is a fresh transaction that locks, re-reads and re-checks its rows
    itself. An error is retried when :func:`_retry_conflict` says so (a deadlock
    or serialization failure, ``allowed()``, fewer than
    :data:`CONFLICT_ATTEMPTS` attempts), which logs the retry and sleeps a
    short, jittered while first.

    Args:
        attempt: One whole attempt, from its lock to its commit.
        allowed: Read after each failed attempt (and after ``rollback`` with
            ``rollback_always``): the aborted transaction may be tried again.
        what: Names the operation in the log line.
        rollback: Called with the error to roll the aborted transaction back:
            before a retry, after its log line and sleep; a transaction given
            up on is left as it is (it may be the caller's).
        rollback_always: Catch any exception (``BaseException``), and call
            ``rollback`` after every failed attempt, before the decision, given
            up on or not. By default only an ``Exception`` is caught.
        logger: Returns the logger of the retry's log line, called when it is
            logged (the executor tags its logger during an attempt); default
            ``flask_geneva``.
        on_retry: Called before a retry, after ``rollback``: undo what the
            aborted attempt left outside the database.
        on_give_up: Called with the error when it is not retried, before it is
            raised.
        outage: A :class:`~flask_geneva.core.database_outages.OutageWindow`:
            an attempt that lost its database connection is tried again after
            the window's sleep, while the window is open, whatever
            ``allowed()`` says (R-FLT-10); None: such an error is raised.

    Returns:
        What the successful ``attempt`` returned.

    Raises:
        sqlalchemy.exc.DBAPIError: The deadlock or serialization failure, as
            itself (never the failed savepoint rollback that followed it), when
            it could not or may not be retried (:func:`_raise_unmasked`).
        BaseException: Any other error of the last attempt, as it was raised.
    """
    catch = BaseException if rollback_always else Exception
    number = 1
    while True:
        try:
            return attempt()
        except catch as error:
            if rollback_always:
                rollback(error)
            conflict = _retry_conflict(
                error,
                number,
                allowed=allowed(),
                what=what,
                logger=None if logger is None else logger(),
            )
            if conflict or (outage is not None and outage.wait(error)):
                if not rollback_always:
                    rollback(error)
                if on_retry is not None:
                    on_retry()
                number += 1 if conflict else 0
                continue
            if on_give_up is not None:
                on_give_up(error)
            _raise_unmasked(error)
            raise


def run_retrying_conflicts(
    session: orm.Session,
    operation: Callable[[], _T],
    *,
    commit: bool,
    what: str,
) -> _T:
    """Run an operator's ``operation``, retried after a deadlock (R-EXE-80).

    The operation locks, re-reads and re-checks its rows itself, so each
    attempt applies its guard to what the database holds then. Retried only
    when :func:`owns_transaction` says so when the operation starts, at most
    :data:`CONFLICT_ATTEMPTS` times (:func:`retry_on_conflict`).

    Args:
        session: The session ``operation`` writes through.
        operation: One whole operation, from its lock to its commit.
        commit: The operation commits at its end.
        what: Names the operation in the log line.

    Returns:
        What ``operation`` returned.

    Raises:
        sqlalchemy.exc.DBAPIError: The deadlock or serialization failure, as
            itself (never the failed savepoint rollback that followed it), when
            it could not or may not be retried.
    """
    allowed = owns_transaction(session, commit=commit)

    def rollback(error: BaseException) -> None:
        if session.in_transaction():
            session.rollback()

    return retry_on_conflict(
        operation, allowed=lambda: allowed, what=what, rollback=rollback
    )


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
    return _first_database_error(error, lambda found: _is_conflict(found.orig))


def database_error(error: BaseException) -> sa_exc.DBAPIError | None:
    """Find a database error in ``error`` or its context chain.

    User code the executor runs inside its locked transaction (a precondition,
    R-EXE-23/73) may have sent a statement the database refused: on PostgreSQL
    the transaction is then aborted, and a MySQL/MariaDB deadlock has rolled it
    back and released its locks, so the transaction cannot be written on.

    Returns:
        The first :class:`sqlalchemy.exc.DBAPIError` of the chain, or None.
    """
    return _first_database_error(error, lambda _: True)


def _first_database_error(
    error: BaseException, accept: Callable[[sa_exc.DBAPIError], bool]
) -> sa_exc.DBAPIError | None:
    """The first :class:`sqlalchemy.exc.DBAPIError` of ``error``'s cause/context
    chain that ``accept`` takes, or None (a cycle in the chain ends the walk)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sa_exc.DBAPIError) and accept(current):
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


def is_own_listener(listener: Any) -> bool:
    """Tell whether a session event listener is one geneva registers here.

    The executor's hero probe stands down for a ``do_orm_execute`` listener of
    the application's (its criteria would apply to an ORM load of the hero,
    R-EXE-78), never for :func:`_note_executed_write`, which only notes writes.
    """
    return listener is _note_executed_write


def _note_flush(session: orm.Session, flush_context: Any) -> None:
    """Remember that an ORM flush wrote in the session's open transaction."""
    session.info[_FLUSHED_IN] = session.get_transaction()


def _note_executed_write(execute_state: orm.ORMExecuteState) -> None:
    """Remember a statement sent with ``session.execute()`` that may write.

    Anything but a SELECT counts (an ORM-enabled UPDATE, a ``text()`` statement
    whose effect is unknown): a retry would commit without it (R-EXE-80).
    """
    if not execute_state.is_select:
        session = execute_state.session
        transaction = session.get_transaction()
        if transaction is None:
            # The session begins its transaction after this event, for this very
            # statement: _begin_marked marks it then.
            session.info[_WRITE_BEFORE_BEGIN] = True
        else:
            session.info[_FLUSHED_IN] = transaction


def _begin_marked(session: orm.Session, transaction: orm.SessionTransaction) -> None:
    """Mark a transaction begun for a statement that may write."""
    if transaction.parent is None and session.info.pop(_WRITE_BEFORE_BEGIN, False):
        session.info[_FLUSHED_IN] = transaction


def _note_connection(
    session: orm.Session, transaction: orm.SessionTransaction, connection: Any
) -> None:
    """Remember which session's root transaction runs on ``connection``.

    Not for a transaction of the session the executor runs
    (:func:`executor_transactions`): nothing asks :func:`owns_transaction`
    about it, so its statements skip the tracking (R-EXE-80). Weak references:
    the ``Connection`` must not keep the session alive.
    """
    if _executor_session.get() is session:
        return
    root = session.get_transaction()
    if root is not None:
        connection.__dict__[_SESSION_ON_CONNECTION] = (
            weakref.ref(session),
            weakref.ref(root),
        )


def _note_connection_write(
    connection: Any,
    cursor: Any,
    statement: str,
    parameters: Any,
    context: Any,
    executemany: bool,
) -> tuple[str, Any]:
    """Remember a statement that may write, sent on a session's connection.

    Every statement a registered session transaction (:func:`_note_connection`)
    sends passes here, also those sent on ``session.connection()`` directly,
    which no session event sees: one that does not start with ``SELECT`` (or
    ``SHOW``, a savepoint's own statements, ``BEGIN``, ``SET TRANSACTION``)
    marks the session's open root transaction as written in (R-EXE-80). A
    statement on a connection no registered transaction holds (a plain
    ``engine.connect()``, the executor's own transactions) returns at once; one
    on a connection whose session has moved on marks nothing. Registered with
    ``retval=True`` (no wrapper call per statement): returns ``statement`` and
    ``parameters`` unchanged.
    """
    owner = connection.__dict__.get(_SESSION_ON_CONNECTION)
    if owner is None or statement.lstrip()[:16].lower().startswith(_NOT_WRITING):
        return statement, parameters
    session, root = owner[0](), owner[1]()
    if session is not None and root is not None and session.get_transaction() is root:
        session.info[_FLUSHED_IN] = root
    return statement, parameters


@contextlib.contextmanager
def executor_transactions(session: Any) -> Iterator[None]:
    """Run the block as the executor holding ``session`` (R-EXE-80).

    The root transactions ``session`` begins in the block are the executor's
    own (the claim, the body's, the finalize): no operator operation asks
    :func:`owns_transaction` about them with ``commit=True`` (inside a step it
    never commits), so they are not registered for the connection-write
    tracking and its listener returns at once for their statements. User code
    the executor calls outside a step, where an operator operation could commit
    (signal receivers, the error reporter), runs in
    :func:`user_code_transactions`, tracked as usual. ORM flushes and
    ``session.execute()`` are still noted (session events).

    Args:
        session: The executor's session (a ``scoped_session`` is resolved).
    """
    if isinstance(session, orm.scoped_session):
        session = session()
    token = _executor_session.set(session)
    try:
        yield
    finally:
        _executor_session.reset(token)


@contextlib.contextmanager
def user_code_transactions() -> Iterator[None]:
    """Track the transactions begun in the block again, inside
    :func:`executor_transactions` (R-EXE-80): user code runs there."""
    token = _executor_session.set(None)
    try:
        yield
    finally:
        _executor_session.reset(token)


def track_connection_writes(engine: sa_engine.Engine) -> None:
    """Let :func:`owns_transaction` see writes sent on ``session.connection()``.

    Listens to ``engine``'s ``before_cursor_execute``: a statement a session's
    open transaction sends on its connection directly, not starting with
    ``SELECT`` (see :func:`_note_connection_write`), marks that transaction as
    written in, so an operator operation in it is not retried after a deadlock
    (R-EXE-80). Only the app's engines get the listener (``Geneva.init_app``
    calls this for each), so other engines of the process keep SQLAlchemy's
    event-free execution path. Idempotent.

    Args:
        engine: An engine the app's sessions use.
    """
    if engine.__dict__.get(_TRACKED_FLAG):
        return
    engine.__dict__[_TRACKED_FLAG] = True
    event.listen(engine, "before_cursor_execute", _note_connection_write, retval=True)


def _forget_flush(session: orm.Session, transaction: orm.SessionTransaction) -> None:
    if transaction.parent is None and session.info.get(_FLUSHED_IN) is transaction:
        del session.info[_FLUSHED_IN]


event.listen(orm.Session, "after_flush", _note_flush)
event.listen(orm.Session, "do_orm_execute", _note_executed_write)
event.listen(orm.Session, "after_transaction_create", _begin_marked)
event.listen(orm.Session, "after_transaction_end", _forget_flush)
event.listen(orm.Session, "after_begin", _note_connection)
