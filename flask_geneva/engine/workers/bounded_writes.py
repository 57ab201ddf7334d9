"""A step's heartbeat that never blocks past its timeout (R-FLT-31..33).

During a network cut a heartbeat's UPDATE waits in a socket for an answer that
does not come, and ``self.heartbeat()`` would freeze the step with it. So the
write runs in a daemon thread of its own, on the registration's own pool (never
the step's session), and the step waits for it at most
``GENEVA_HEARTBEAT_TIMEOUT``. A write still running then is left to end on its
own: it commits when the database answers again, or fails once the connection
gives up (``GENEVA_CONNECTION_TIMEOUT``, R-FLT-40); either way its transaction
is one UPDATE (or the registration's INSERT), never half written. While it runs,
later calls wait for that same write instead of starting another, so a long cut
piles up neither threads nor connections.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = [
    "FAILED",
    "TIMED_OUT",
    "WRITTEN",
    "BoundedWriter",
    "WriteResult",
]

#: The write committed while the caller waited.
WRITTEN: Final = "written"
#: The write raised (the database refused it, or the connection failed).
FAILED: Final = "failed"
#: The write did not end within the timeout; it goes on in its thread.
TIMED_OUT: Final = "timed out"


@dataclasses.dataclass(frozen=True)
class WriteResult:
    """How one bounded write ended for its caller.

    Attributes:
        outcome: :data:`WRITTEN`, :data:`FAILED` or :data:`TIMED_OUT`.
        error: The exception the write raised (:data:`FAILED` only).
        waited_seconds: How long the caller waited, in seconds.
        joined: The caller waited for a write an earlier call started (still
            running when this one came).
    """

    outcome: str
    error: Exception | None
    waited_seconds: float
    joined: bool

    @property
    def written(self) -> bool:
        """The write committed."""
        return self.outcome == WRITTEN


class _Write:
    """One write running in a daemon thread."""

    def __init__(self, write: Callable[[], object], name: str) -> None:
        self.finished = threading.Event()
        self.error: Exception | None = None
        self._write = write
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._write()
        except Exception as error:  # noqa: BLE001 - handed to the waiting caller
            self.error = error
        finally:
            self.finished.set()


class BoundedWriter:
    """Runs one write at a time in a daemon thread; callers wait a bounded time.

    Thread-safe. Daemon threads, so that a write blocked in a dead connection
    never holds up the process's exit.

    Args:
        thread_name: The name of each write's thread (seen in thread dumps).
    """

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._pending: _Write | None = None

    def write(self, write: Callable[[], object], timeout: float) -> WriteResult:
        """Run ``write`` (or wait for the one still running) for at most ``timeout``.

        Args:
            write: The write; it commits its own transaction or raises.
            timeout: Seconds to wait, more than 0.

        Returns:
            The result. A write that did not end in time goes on in its thread;
            the next call waits for it (``joined``) rather than starting one.
        """
        started = time.monotonic()
        with self._lock:
            pending = self._pending
            joined = pending is not None and not pending.finished.is_set()
            if pending is None or not joined:
                pending = self._pending = _Write(write, self._thread_name)
        finished = pending.finished.wait(timeout)
        waited = time.monotonic() - started
        if not finished:
            return WriteResult(TIMED_OUT, None, waited, joined)
        if pending.error is not None:
            return WriteResult(FAILED, pending.error, waited, joined)
        return WriteResult(WRITTEN, None, waited, joined)
