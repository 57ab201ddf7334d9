"""Duration arguments: ``timedelta`` or a non-negative number of seconds (SPEC §0)."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from flask_geneva.exceptions import StepConfigurationError

__all__ = ["MAX_DURATION", "coerce_duration", "duration_option", "format_interval"]

#: The longest duration accepted anywhere (waits, thresholds, retention): 100
#: years. Far longer values cannot be added to a date (``datetime`` ends in year
#: 9999) and would fail only when a step ends, leaving it stuck ``in_progress``.
MAX_DURATION = timedelta(days=36500)


def coerce_duration(
    value: object, *, name: str, allow_none: bool = True, positive: bool = False
) -> timedelta | None:
    """Return ``value`` as a :class:`~datetime.timedelta`.

    Args:
        value: A ``timedelta``, an ``int``/``float`` number of seconds, or None.
            ``0`` is a valid duration, not "absent".
        name: The option or setting the value belongs to, for error messages.
        allow_none: Whether None is accepted (and returned as None).
        positive: Require a value strictly greater than zero.

    Raises:
        ValueError: The value is negative (or zero with ``positive``), longer than
            :data:`MAX_DURATION`, not finite, or None where not allowed.
        TypeError: The value is neither a ``timedelta`` nor a number (bools are
            rejected too).
    """
    if value is None:
        if allow_none:
            return None
        raise ValueError(f"{name} is required: a timedelta or seconds, got None")
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise TypeError(
            f"{name} must be a timedelta or a number of seconds, "
            f"got {value!r} ({type(value).__name__})"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite duration, got {value!r}")
    try:
        delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    except OverflowError:
        delta = timedelta.max
    if delta > MAX_DURATION:
        raise ValueError(
            f"{name} must be at most {MAX_DURATION.days} days (100 years), "
            f"got {value!r}"
        )
    if delta < timedelta(0) or (positive and delta == timedelta(0)):
        qualifier = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be {qualifier}, got {value!r}")
    return delta


def duration_option(
    value: object, *, name: str, label: str, must: str, positive: bool = False
) -> timedelta:
    """Return a declared duration option as a ``timedelta`` (:func:`coerce_duration`).

    Args:
        value: The option's value.
        name: The option's name.
        label: What declares it (``"Step 'charge'"``, ``"Backoff.polynomial"``).
        must: The allowed forms, for the message (``"a positive timedelta ..."``).
        positive: Require a value strictly greater than zero.

    Raises:
        StepConfigurationError: ``"<label>: invalid <name> <value>: must be
            <must>"``, from the ``ValueError``/``TypeError`` of
            :func:`coerce_duration`; None too (pass an optional one only when set).
    """
    try:
        delta = coerce_duration(value, name=name, allow_none=False, positive=positive)
    except (TypeError, ValueError) as exc:
        raise StepConfigurationError(
            f"{label}: invalid {name} {value!r}: must be {must}"
        ) from exc
    assert delta is not None  # noqa: S101 - allow_none=False
    return delta


def format_interval(value: Any) -> str:
    """A duration in words, its two largest parts: ``"2 h"``, ``"1 d 6 h"``,
    ``"1 min 30 s"`` (90 seconds), ``"0 s"``.

    The admin's step plan (R-ADM-43) and ``flask geneva show`` print waits this
    way instead of ``str(timedelta)`` (``"2:00:00"``, ``"0:00:00"``).

    Args:
        value: A ``timedelta`` or a number of seconds; None gives ``""``.

    Returns:
        Days ``d``, hours ``h``, minutes ``min`` and seconds ``s`` (up to three
        significant digits below a minute), the two largest non-zero parts.
    """
    if value is None:
        return ""
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else value
    seconds = float(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            whole = int(seconds // size)
            parts.append(f"{whole} {unit}")
            seconds -= whole * size
    if seconds or not parts:
        rounded = round(seconds, 3)
        parts.append(
            f"{int(rounded)} s" if float(rounded).is_integer() else f"{rounded:.3g} s"
        )
    return " ".join(parts[:2])
