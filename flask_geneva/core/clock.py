"""The single time source of flask_geneva (SPEC §0).

Every timestamp the library writes or compares comes from :func:`now`, a
timezone-aware UTC :class:`~datetime.datetime`. Tests freeze or move time with
:func:`frozen`, which patches this module only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta

__all__ = ["ensure_aware", "frozen", "now"]

_lock = threading.Lock()
_frozen_at: datetime | None = None


def now() -> datetime:
    """Return the current time as an aware UTC datetime (microsecond precision)."""
    frozen_at = _frozen_at
    if frozen_at is not None:
        return frozen_at
    return datetime.now(UTC)


def ensure_aware(value: datetime, *, name: str = "datetime") -> datetime:
    """Return ``value`` converted to UTC.

    Args:
        value: An aware datetime.
        name: What the value is, for the error message.

    Raises:
        ValueError: ``value`` is naive (has no tzinfo); the message shows the value.
    """
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(
            f"{name} must be timezone-aware (UTC), "
            f"got naive datetime {value.isoformat()}"
        )
    return value.astimezone(UTC)


@contextlib.contextmanager
def frozen(at: datetime | None = None) -> Iterator[_FrozenClock]:
    """Freeze :func:`now` at ``at`` (default: the current time) inside the block.

    Yields a handle whose ``advance(delta)`` moves the frozen time forward. Meant for
    tests; the freeze is process-wide (it affects every thread).
    """
    global _frozen_at
    with _lock:
        previous = _frozen_at
        _frozen_at = ensure_aware(at) if at is not None else datetime.now(UTC)
    try:
        yield _FrozenClock()
    finally:
        with _lock:
            _frozen_at = previous


class _FrozenClock:
    def advance(self, delta: timedelta) -> datetime:
        global _frozen_at
        with _lock:
            assert _frozen_at is not None  # noqa: S101 - only reachable inside frozen()
            _frozen_at = _frozen_at + delta
            return _frozen_at
