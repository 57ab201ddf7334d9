"""Spreading the releases of many workflows over a short window (SPEC §6.1, R-SCH-20).

Housekeeping's recovery and the operators' bulk resumes release many workflows
in one go. Inside :func:`spread_releases` every execution the scheduling
functions create or publish again is due at ``now + offset`` at the earliest,
where the offset is a fraction of the window derived from a hash of the
workflow id: deterministic, different per workflow, never random. Pure code:
no database, no Flask (the caller reads ``GENEVA_RELEASE_SPREAD``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import timedelta

from flask_geneva.policies.backoff import jitter_fraction

__all__ = ["active_window", "release_offset", "spread_releases"]

_window: ContextVar[timedelta | None] = ContextVar(
    "geneva_release_spread", default=None
)


@contextlib.contextmanager
def spread_releases(window: timedelta | None) -> Iterator[None]:
    """Spread the executions released inside the block over ``window`` (R-SCH-20).

    Args:
        window: The ``GENEVA_RELEASE_SPREAD`` value; None or zero releases every
            execution at once (the block changes nothing).

    Executions already due later than their spread time keep their time; only
    those due sooner (now, or overdue) are moved to ``now + offset``.
    """
    token = _window.set(window if window and window > timedelta(0) else None)
    try:
        yield
    finally:
        _window.reset(token)


def active_window() -> timedelta | None:
    """The window of the enclosing :func:`spread_releases` block, or None."""
    return _window.get()


def release_offset(workflow_id: object, window: timedelta) -> timedelta:
    """The deterministic offset of ``workflow_id`` in ``window``: ``[0, window)``."""
    return window * jitter_fraction(f"release\x1f{workflow_id}")
