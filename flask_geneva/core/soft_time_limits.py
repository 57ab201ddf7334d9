"""How many times Celery's soft time limit has interrupted this process (R-STO-10).

A step body that catches Celery's ``SoftTimeLimitExceeded`` and returns (or
raises an error of its own without chaining it) leaves no trace of the
interruption in its outcome; and the body's own clock starts after the task's
(the claim comes first), so such a run can look shorter than its timeout. The
worker layer (:mod:`flask_geneva.ext.soft_limit_counting`) counts each soft
limit signal the process receives; the executor reads :func:`count` before and
after a body's run and treats a run during which it grew as timed out.

A prefork child runs one task at a time in its main thread, where the signal
is delivered; no lock is needed.
"""

from __future__ import annotations

__all__ = ["count", "record"]

_received = 0


def record() -> None:
    """Count one soft time limit signal received by this process."""
    global _received
    _received += 1


def count() -> int:
    """How many soft time limit signals this process has received so far."""
    return _received
