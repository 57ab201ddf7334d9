"""How a list's match count reads: exact, capped, or the planner's estimate.

Every list counts its matching rows reading at most ``cap + 1`` of them
(R-ADM-127, R-ADM-30). Past the cap, on PostgreSQL, the line shows the
planner's estimate of the filtered query ("about 4.9 M", R-ADM-152); elsewhere,
or when the estimate is not above the cap, "10,000+".
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["about", "match_label"]

_MILLION = 1_000_000
_BILLION = 1_000_000_000


def _two_digits(number: float) -> float:
    """``number`` rounded to two significant digits."""
    digits = len(str(int(number)))
    step = 10 ** max(digits - 2, 0)
    return float(round(number / step) * step)


def about(estimate: int) -> str:
    """An estimate written for people, to two significant digits (R-ADM-152).

    ``about 12,000``, ``about 490,000``, ``about 4.9 M``, ``about 12 M``,
    ``about 1.2 B``.

    Args:
        estimate: A row count, 0 or more.
    """
    if estimate < _MILLION:
        return f"about {int(_two_digits(estimate)):,}"
    unit, size = ("B", _BILLION) if estimate >= _BILLION else ("M", _MILLION)
    scaled = estimate / size
    rounded = round(scaled, 1)
    text = f"{rounded:.1f}" if rounded < 10 else f"{int(_two_digits(scaled)):,}"
    return f"about {text} {unit}"


def match_label(matched: int, cap: int, estimate: Callable[[], int | None]) -> str:
    """The match count of a list line: ``"1,234"``, ``"10,000+"`` or ``"about 4.9 M"``.

    Args:
        matched: The bounded count: the number of matching rows, or ``cap + 1``
            when more than ``cap`` match.
        cap: The count's cap (10,000).
        estimate: Called only past the cap: the planner's estimate of the
            filtered query (PostgreSQL), or None elsewhere.

    Returns:
        The exact count up to the cap; past it the estimate when there is one
        above the cap (an estimate at or under the cap is wrong, as more rows
        were read), else ``"<cap>+"`` (R-ADM-152).
    """
    if matched <= cap:
        return f"{matched:,}"
    guess = estimate()
    if guess is not None and guess > cap:
        return about(guess)
    return f"{cap:,}+"
