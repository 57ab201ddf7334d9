"""Time arithmetic and time texts of the workflow timeline chart (R-ADM-12).

Pure code: instants are whole microseconds since the epoch (UTC), so that the
chart's geometry is integer arithmetic; texts are UTC.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

__all__ = [
    "D_US",
    "EPOCH",
    "H_US",
    "MIN_US",
    "MS_US",
    "ONE_US",
    "S_US",
    "format_span",
    "from_us",
    "optional_us",
    "px",
    "stamp",
    "tick_text",
    "to_us",
]

#: The epoch, aware UTC: instant 0.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = EPOCH.replace(tzinfo=None)
#: One microsecond, the unit of the chart's instants.
ONE_US = timedelta(microseconds=1)
#: Microseconds in a millisecond, second, minute, hour and day.
MS_US = 1_000
S_US = 1_000_000
MIN_US = 60 * S_US
H_US = 60 * MIN_US
D_US = 24 * H_US


def to_us(value: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // ONE_US


def from_us(value: int) -> datetime:
    """The aware UTC datetime of an instant in microseconds since the epoch."""
    return EPOCH + timedelta(microseconds=value)


def optional_us(execution: Any, name: str) -> int | None:
    """Attribute ``name`` of ``execution`` in microseconds; None if no datetime."""
    value = getattr(execution, name, None)
    return to_us(value) if isinstance(value, datetime) else None


def format_span(span: timedelta) -> str:
    """Write a duration with its two largest units: ``"3 d 4 h"``, ``"40 ms"``.

    The smaller unit is rounded, and the result moves up a unit when rounding
    reaches it (23 h 59.9 min is ``"1 d"``). Below a second the unit is ms. Below
    a minute it is seconds with one decimal (``"1.5 s"``). Above that it is two
    whole units, with the smaller one left out when it is zero (``"5 min"``,
    ``"2 h 30 min"``). Negative spans are written as zero.
    """
    us = max(span // ONE_US, 0)
    for big, big_name, small, small_name in (
        (D_US, "d", H_US, "h"),
        (H_US, "h", MIN_US, "min"),
        (MIN_US, "min", S_US, "s"),
    ):
        rounded = (us + small // 2) // small * small
        if rounded >= big:
            whole, rest = divmod(rounded, big)
            part = rest // small
            if part:
                return f"{whole} {big_name} {part} {small_name}"
            return f"{whole} {big_name}"
    seconds = round(us / S_US, 1)
    if seconds >= 1:
        return f"{seconds:g} s"
    return f"{round(us / MS_US)} ms"


def stamp(value: int, *, date: bool = True) -> str:
    """``2024-05-01 12:00:00.123`` (``date=False``: ``12:00:00.123``), UTC."""
    # isoformat() of a naive value: several times faster than strftime() per bar.
    moment = _NAIVE_EPOCH + timedelta(microseconds=value)
    text = moment.isoformat(" ", "milliseconds")
    return text if date else text[11:]


def tick_text(value: int, step: int) -> str:
    """An axis tick's text, as precise as the tick spacing ``step`` (µs) needs."""
    moment = from_us(value)
    if step >= D_US or (value % D_US == 0 and step >= MIN_US):
        return moment.strftime("%Y-%m-%d")
    if step >= MIN_US:
        return moment.strftime("%H:%M")
    if step >= S_US:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%H:%M:%S.%f")[:-3]


def px(value: float) -> float:
    """Round to 0.1 px; whole numbers print without ``.0`` (a smaller SVG)."""
    rounded = round(float(value), 1)
    return int(rounded) if rounded.is_integer() else rounded
