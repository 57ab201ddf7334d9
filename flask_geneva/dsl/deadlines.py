"""Workflow deadlines as declared and passed (SPEC §27.1, R-DL-01..05).

Pure values, no database: the class attributes ``__geneva_deadline__`` and
``__geneva_on_deadline__`` are checked when the class is defined, and the
``deadline=`` argument of ``create()`` and ``start_child()`` becomes an aware
UTC datetime here.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta

from flask_geneva.core import clock
from flask_geneva.core.durations import coerce_duration
from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "DEFAULT_ON_DEADLINE",
    "ON_DEADLINE_VALUES",
    "class_deadline",
    "class_on_deadline",
    "deadline_at",
    "earliest",
]

#: What the dispatcher does to a workflow past its deadline (R-DL-03).
ON_DEADLINE_VALUES = ("cancel", "pause")
DEFAULT_ON_DEADLINE = "cancel"


def class_deadline(value: object, *, type_name: str) -> timedelta | None:
    """The ``__geneva_deadline__`` class attribute, checked (R-DL-01).

    Args:
        value: A positive ``timedelta`` (or number of seconds, SPEC §0), or
            None for no deadline.
        type_name: The class, for the message.

    Raises:
        StepConfigurationError: Anything else: zero, negative, longer than
            100 years, a datetime (a class deadline counts from each
            workflow's creation), a str...; the message names the value.
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        raise StepConfigurationError(
            f"{type_name}.__geneva_deadline__ must be a positive timedelta (counted "
            f"from each workflow's creation) or None, got the datetime {value!r}; "
            "pass a fixed time per workflow with create(deadline=...)"
        )
    try:
        return coerce_duration(
            value, name="__geneva_deadline__", allow_none=False, positive=True
        )
    except (TypeError, ValueError) as error:
        raise StepConfigurationError(
            f"{type_name}.__geneva_deadline__: {error}; it must be a positive "
            "timedelta such as timedelta(days=30), or None (R-DL-01)"
        ) from None


def class_on_deadline(value: object, *, type_name: str) -> str:
    """The ``__geneva_on_deadline__`` class attribute, checked (R-DL-03).

    Raises:
        StepConfigurationError: ``value`` is not ``"cancel"`` or ``"pause"``.
    """
    if isinstance(value, str) and value in ON_DEADLINE_VALUES:
        return value
    raise StepConfigurationError(
        f"{type_name}.__geneva_on_deadline__ must be one of "
        f"{', '.join(map(repr, ON_DEADLINE_VALUES))}, got {value!r} "
        f"({type(value).__name__})"
    )


def deadline_at(value: object, *, now: datetime | None = None) -> datetime:
    """The ``deadline=`` argument as an aware UTC datetime (R-DL-02).

    Args:
        value: A positive ``timedelta`` (or number of seconds), counted from
            ``now``; or a timezone-aware datetime after ``now``.
        now: The creation time; default :func:`flask_geneva.core.clock.now`.

    Raises:
        ValueError: A naive datetime (SPEC §0: every datetime is aware), a
            datetime at or before ``now`` or out of range in UTC, a duration
            that is not positive or longer than 100 years.
        TypeError: Neither a datetime nor a duration (bools refused).
    """
    current = now if now is not None else clock.now()
    if isinstance(value, datetime):
        try:
            moment = clock.ensure_aware(value, name="deadline")
        except OverflowError:
            # 9999-12-31 23:00-05:00 is past the last datetime in UTC.
            raise ValueError(
                f"deadline {value.isoformat()} is out of range in UTC: pass a "
                "time between the years 1 and 9999 in UTC, or a timedelta (R-DL-02)"
            ) from None
        if moment <= current:
            raise ValueError(
                f"deadline {moment.isoformat()} is not in the future (now is "
                f"{current.isoformat()}): pass a later time or a timedelta, or "
                "leave the deadline out (R-DL-02)"
            )
        return moment
    try:
        delta = coerce_duration(value, name="deadline", allow_none=False, positive=True)
    except TypeError:
        raise TypeError(
            f"deadline must be a timezone-aware datetime or a positive timedelta, "
            f"got {value!r} ({type(value).__name__})"
        ) from None
    assert delta is not None  # noqa: S101 - allow_none=False
    return current + delta


def earliest(*moments: datetime | None) -> datetime | None:
    """The earliest of the given deadlines, None when none is given (R-DL-30)."""
    present = [moment for moment in moments if moment is not None]
    return min(present) if present else None
