"""Counting Celery's soft time limit signals in a prefork child (R-STO-10).

billiard's prefork child installs its own handler for the soft limit's signal
(``SIGUSR1``) after the child's initializer has run, so the handler cannot be
wrapped on ``worker_process_init``. :func:`count_soft_time_limits` is called at
the start of each ``perform_step`` task instead: when the process's handler is
billiard's ``soft_timeout_sighandler``, it is wrapped once by one that records
the signal (:func:`flask_geneva.core.soft_time_limits.record`) and then calls
billiard's, which raises ``SoftTimeLimitExceeded`` as before. Any other handler
(the solo pool's main process uses ``SIGUSR1`` to print tracebacks) is left
alone, and so is a call from a thread other than the main one.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from flask_geneva.core import soft_time_limits

__all__ = ["count_soft_time_limits"]

#: The name billiard gives its soft time limit handler.
_BILLIARD_HANDLER = "soft_timeout_sighandler"
#: Set on the wrapper, so it is never wrapped twice.
_MARK = "__geneva_counts_soft_limits__"


def count_soft_time_limits() -> bool:
    """Wrap billiard's soft time limit handler to count its signals, once.

    Returns:
        True when the handler in place now counts (wrapped now or before);
        False when there is nothing to wrap (no ``SIGUSR1``, not the main
        thread, or a handler that is not billiard's).
    """
    soft_signal = getattr(signal, "SIGUSR1", None)
    if soft_signal is None or threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(soft_signal)
    if getattr(current, _MARK, False):
        return True
    if not callable(current) or getattr(current, "__name__", "") != _BILLIARD_HANDLER:
        return False
    billiard_handler: Any = current

    def counting_handler(signum: int, frame: FrameType | None) -> Any:
        soft_time_limits.record()
        return billiard_handler(signum, frame)

    setattr(counting_handler, _MARK, True)
    signal.signal(soft_signal, counting_handler)
    return True
