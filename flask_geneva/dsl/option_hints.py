"""Hints that point a wrong step option at the right one (R-DEF-22, R-DEF-23).

``wait`` (a fixed delay) and ``wait_for`` (a workflow signal) are easy to
confuse, and a misspelt keyword should name the option meant. These helpers
only build message text; the validators raise. Pure code: no database, no Flask.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from collections.abc import Mapping

from flask_geneva.dsl.signal_matchers import SignalMatcher

__all__ = ["LIMIT_SETTING_NOTES", "unknown_options_message", "wait_hint"]

_DURATION_TEXT = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*"
    r"(s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|weeks?)\s*$",
    re.IGNORECASE,
)
_UNITS = {
    "s": "seconds",
    "m": "minutes",
    "h": "hours",
    "d": "days",
    "w": "weeks",
}

#: What to say of a setting of ``Limit`` given to a step declaration (R-DEF-23,
#: R-LIM-03): the step takes the ``Limit`` object as ``limit=``.
LIMIT_SETTING_NOTES = {
    option: (
        f"{option} is a setting of Limit: declare partner_api = Limit('partner-api', "
        f"{option}=...) and pass limit=partner_api"
    )
    for option in ("concurrency", "rate", "per", "hold_across_chain")
}


def _is_signal_matcher(value: object) -> bool:
    return isinstance(value, SignalMatcher) or callable(getattr(value, "matches", None))


def wait_hint(value: object) -> str:
    """The hint for a ``wait`` value that looks meant for ``wait_for`` (R-DEF-22).

    Args:
        value: The invalid ``wait`` value.

    Returns:
        ``"; ..."`` to append to the message: for a str, the ``wait_for=`` it
        would be as a signal name (and, for duration text such as ``"2 days"``,
        the ``timedelta`` meant); for a signal matcher, ``wait_for=<it>``; else
        ``""``.
    """
    if isinstance(value, str):
        match = _DURATION_TEXT.match(value)
        if match is not None:
            number = float(match.group(1))
            amount = int(number) if number.is_integer() else number
            unit = _UNITS[match.group(2)[0].lower()]
            return (
                f"; a duration is not text: write wait=timedelta({unit}={amount}); "
                f"wait_for= is for a workflow signal (wait_for={value!r} would "
                "wait for a signal of that name)"
            )
        return (
            "; wait delays the step by a fixed time: to wait for the workflow "
            f"signal {value!r}, use wait_for={value!r}"
        )
    if _is_signal_matcher(value):
        return (
            "; wait delays the step by a fixed time: to wait for a workflow "
            f"signal, use wait_for={value!r}"
        )
    return ""


def unknown_options_message(
    what: str,
    unknown: Iterable[str],
    allowed: Iterable[str],
    *,
    elsewhere: Mapping[str, str] | None = None,
) -> str:
    """Name unknown keywords, the nearest allowed one of each, and all allowed ones.

    Args:
        what: The declaration, e.g. ``"@step"`` or ``"step.repeat"``.
        unknown: The unknown keywords given.
        allowed: The keywords the declaration accepts.
        elsewhere: For a keyword another declaration accepts, what to say
            instead of the nearest allowed one (``"max_iterations is an option
            of @resumable_step"``).

    Returns:
        ``"@step: unknown option 'wiat' (did you mean 'wait'?); allowed: ..."``
        (R-DEF-23).
    """
    choices = sorted(allowed)
    notes = elsewhere or {}
    parts = []
    for name in sorted(unknown):
        if name in notes:
            parts.append(f"{name!r} ({notes[name]})")
            continue
        close = difflib.get_close_matches(name, choices, n=1)
        parts.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    plural = "s" if len(parts) > 1 else ""
    return (
        f"{what}: unknown option{plural} {', '.join(parts)}; allowed: "
        f"{', '.join(choices)}"
    )
