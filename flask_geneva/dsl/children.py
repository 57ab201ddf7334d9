"""Declaring a wait for child workflows: ``wait_for_children`` and
``on_child_failure`` (SPEC §25, R-CHD-21, R-CHD-23).

Validated at class definition, so a mistake is reported when the module is
imported, never when the first parent reaches the step.
"""

from __future__ import annotations

from typing import Any

from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "CHILD_FAILURE_ACTIONS",
    "validate_children_options",
    "wait_threshold",
]

#: What a settled wait does about a failed child (R-CHD-23).
CHILD_FAILURE_ACTIONS = ("fail", "ignore")

_ALLOWED_WAIT = 'True or "all", "any", a positive int N, or None/False'


def validate_children_options(
    options: dict[str, Any], label: str
) -> tuple[str | int | None, str]:
    """Validate ``wait_for_children`` and ``on_child_failure`` (R-CHD-21, R-CHD-23).

    Args:
        options: The step declaration's keywords (missing keys count as None).
        label: How messages name the step (``Step 'report'``).

    Returns:
        ``(wait_for_children, on_child_failure)``: ``"all"``, ``"any"``, a
        positive int or None; and ``"fail"`` or ``"ignore"``.

    Raises:
        StepConfigurationError: ``wait_for_children`` is not one of True,
            ``"all"``, ``"any"``, a positive int, None or False;
            ``on_child_failure`` is not ``"fail"``/``"ignore"``, or is given
            without ``wait_for_children``. The message names the value and the
            allowed ones.
    """
    raw = options.get("wait_for_children")
    action = options.get("on_child_failure")
    wait: str | int | None
    if raw is None or raw is False:
        wait = None
    elif raw is True:
        wait = "all"
    elif _counts_settled(raw):
        wait = raw
    else:
        raise StepConfigurationError(
            f"{label}: invalid wait_for_children {raw!r}: must be {_ALLOWED_WAIT} "
            "(how many of the workflow's children must have settled before the "
            "step runs)"
        )
    if action is None:
        return wait, "fail"
    if wait is None:
        raise StepConfigurationError(
            f"{label}: on_child_failure={action!r} needs wait_for_children (the "
            "children to wait for)"
        )
    if not isinstance(action, str) or action not in CHILD_FAILURE_ACTIONS:
        raise StepConfigurationError(
            f"{label}: invalid on_child_failure {action!r}: must be one of "
            f"{', '.join(map(repr, CHILD_FAILURE_ACTIONS))} or None (the default, "
            "'fail')"
        )
    return wait, action


def _counts_settled(raw: object) -> bool:
    """``"all"``, ``"any"`` or a positive int (not a bool)."""
    if isinstance(raw, str):
        return raw in ("all", "any")
    return isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1


def wait_threshold(wait_for_children: str | int, started: int) -> int:
    """How many settled children end a wait, given ``started`` children (R-CHD-21).

    ``"all"``: every child started; ``"any"``: one (none when no child was
    started); an int N: N, or every child when fewer were started. A workflow
    without children never waits.
    """
    if wait_for_children == "all":
        return started
    if wait_for_children == "any":
        return min(1, started)
    return min(int(wait_for_children), started)
