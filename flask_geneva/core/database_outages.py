"""Database outages: telling a lost connection from other errors, and waiting one out.

A database server that restarts (a crash, a failover, an upgrade) fails every
statement in flight and refuses new connections for a few seconds. Those
errors say nothing about the statement or the rows: the same work succeeds
once the server answers again. :func:`connection_lost` recognises them
(SPEC §29.1, R-FLT-01), :class:`OutageWindow` waits one out for a bounded time
with a growing sleep between attempts (the executor's finalize of a body that
ended, R-FLT-10), and :func:`claim_retry_delays` is the schedule of a step
task's claim retried by the broker (R-FLT-02).

Only SQLAlchemy's public exception classes are read, and the drivers'
exceptions through their attributes (``sqlstate``, ``args``), so no driver is
imported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import exc as sa_exc

from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import module_logger

__all__ = [
    "CLAIM_RETRY_FIRST_DELAY",
    "CLAIM_RETRY_MAX_DELAY",
    "OutageWindow",
    "claim_retry_delays",
    "connection_lost",
]

_log = module_logger("flask_geneva")

#: SQLSTATE class of a connection exception (``08001`` refused, ``08006``
#: failure, ...).
_CONNECTION_SQLSTATE_CLASS = "08"
#: PostgreSQL: ``57P01`` terminated by an administrator (a fast shutdown),
#: ``57P02`` crash shutdown (another backend crashed), ``57P03`` cannot connect
#: now (the server is starting or in recovery).
_SHUTDOWN_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
#: MySQL/MariaDB codes: 1053 server shutdown in progress, 1927 connection
#: killed, 2002 socket unreachable, 2003 cannot connect, 2006 server has gone
#: away, 2013 lost connection during a query, 2055 lost connection at a
#: handshake, 4031 disconnected by the server.
_MYSQL_CONNECTION_CODES = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055, 4031})

#: First wait of a step task's claim retried by the broker, in seconds (R-FLT-02).
CLAIM_RETRY_FIRST_DELAY = 1.0
#: Longest wait between two of its retries, in seconds: once the database
#: answers again, a waiting delivery runs within this (R-FLT-02).
CLAIM_RETRY_MAX_DELAY = 10.0


def connection_lost(error: BaseException) -> BaseException | None:
    """Find a lost or refused database connection in ``error``'s chain.

    An error counts (R-FLT-01) when it, its ``__cause__`` or its
    ``__context__`` is:

    - a :class:`sqlalchemy.exc.DBAPIError` whose ``connection_invalidated`` is
      set (SQLAlchemy's dialect judged it a disconnect and dropped the pool's
      connections);
    - a :class:`sqlalchemy.exc.InterfaceError` (the driver's connection is
      closed or broken) or a :class:`sqlalchemy.exc.DisconnectionError`;
    - a driver error with an SQLSTATE of class ``08`` (connection exception)
      or PostgreSQL's ``57P01``/``57P02``/``57P03`` (a shutdown, or a server
      starting up);
    - a MySQL/MariaDB error whose code says the server is unreachable, gone
      or shutting down (2002, 2003, 2006, 2013, 2055, 1053, 1927, 4031);
    - a psycopg ``OperationalError`` without an SQLSTATE (the client could
      not connect, or the socket closed: the server never answered).

    A deadlock, a lock or statement timeout, a constraint violation or a
    refused guard never counts, and neither does any SQLite error (the file is
    local: no server goes away).

    Args:
        error: Any exception.

    Returns:
        The exception of the chain that tells of the lost connection, or None.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _tells_of_lost_connection(current):
            return current
        current = current.__cause__ or current.__context__
    return None


def _tells_of_lost_connection(error: BaseException) -> bool:
    if isinstance(error, sa_exc.DisconnectionError):
        return True
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated or isinstance(error, sa_exc.InterfaceError):
        return True
    orig = error.orig
    module = type(orig).__module__.split(".", 1)[0]
    if module == "sqlite3":
        return False
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if isinstance(sqlstate, str) and sqlstate:
        return (
            sqlstate.startswith(_CONNECTION_SQLSTATE_CLASS)
            or sqlstate in _SHUTDOWN_SQLSTATES
        )
    args: tuple[Any, ...] = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0] in _MYSQL_CONNECTION_CODES
    # psycopg (3 or 2): an OperationalError the server did not send.
    return module.startswith("psycopg") and isinstance(error, sa_exc.OperationalError)


def claim_retry_delays(window: timedelta) -> tuple[float, ...]:
    """The waits, in seconds, of a step task whose claim lost its database (R-FLT-02).

    They double from :data:`CLAIM_RETRY_FIRST_DELAY` up to
    :data:`CLAIM_RETRY_MAX_DELAY`, and there are as many as it takes for
    their sum to reach ``window`` (``GENEVA_WORKER_DEAD_AFTER``): with the
    default 60 s, ``(1, 2, 4, 8, 10, 10, 10, 10, 10)``, 65 s. After the last
    retry the delivery is left to the dispatcher (R-FLT-20).

    Args:
        window: How long the retries together should wait at least; a
            positive ``timedelta``.

    Returns:
        One wait per retry, at least one.

    Raises:
        ValueError: ``window`` is not a positive ``timedelta``.
    """
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise ValueError(f"window must be a positive timedelta, got {window!r}")
    total, delays = 0.0, []
    delay = CLAIM_RETRY_FIRST_DELAY
    while total < window.total_seconds():
        delays.append(delay)
        total += delay
        delay = min(delay * 2, CLAIM_RETRY_MAX_DELAY)
    return tuple(delays)


class OutageWindow:
    """Waits out a database outage for at most ``window`` (R-FLT-10).

    The window opens at the first lost connection :meth:`wait` is given and
    closes ``window`` later; each call sleeps ``first_delay``, twice that the
    next time, and so on up to ``max_delay``, never past the window's end.

    Args:
        window: The longest wait, from the first lost connection.
        what: Names the operation in the log lines (``"finalize of step
            execution 42"``).
        logger: Where the outage is logged; default ``flask_geneva``.
        first_delay: Seconds slept after the first lost connection.
        max_delay: Longest sleep between two attempts, in seconds.
        clock: Monotonic seconds (tests pass their own).
        sleep: Sleeps the seconds given (tests pass their own).

    Attributes:
        attempts: Attempts that lost their connection so far.
        opened_at: ``clock()`` at the first lost connection, or None.
    """

    def __init__(
        self,
        window: timedelta,
        *,
        what: str,
        logger: Any = None,
        first_delay: float = 0.25,
        max_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.window_seconds = max(window.total_seconds(), 0.0)
        self.what = what
        self.logger = logger
        self._delay = first_delay
        self._max_delay = max_delay
        self._clock = clock
        self._sleep = sleep
        self.attempts = 0
        self.opened_at: float | None = None

    @property
    def seconds_waited(self) -> float:
        """Seconds since the first lost connection (0 before one)."""
        return 0.0 if self.opened_at is None else self._clock() - self.opened_at

    def wait(self, error: BaseException) -> bool:
        """Sleep before another attempt if ``error`` lost the connection.

        Args:
            error: What ended the attempt.

        Returns:
            True after sleeping: ``error`` holds a lost connection
            (:func:`connection_lost`) and the window is still open. False at
            once for any other error, and once the window has closed.
        """
        lost = connection_lost(error)
        if lost is None:
            return False
        now = self._clock()
        logger = as_tagged(self.logger or _log)
        if self.opened_at is None:
            self.opened_at = now
            logger.warning(
                "%s lost its database connection (%s: %s); trying again for up "
                "to %g s (R-FLT-10)",
                self.what,
                type(lost).__name__,
                _first_line(lost),
                self.window_seconds,
            )
        self.attempts += 1
        remaining = self.opened_at + self.window_seconds - now
        if remaining <= 0:
            logger.error(
                "%s gave up after %d attempts in %.1f s without reaching the "
                "database (R-FLT-11)",
                self.what,
                self.attempts,
                now - self.opened_at,
            )
            return False
        self._sleep(min(self._delay, remaining))
        self._delay = min(self._delay * 2, self._max_delay)
        return True


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
