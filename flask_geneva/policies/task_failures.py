"""Which handled step exceptions fail the Celery task, and how they are logged.

R-EXE-50 (amended): after the outcome is committed, a captured exception that went
through policy handling is re-raised to the caller according to
``GENEVA_TASK_RERAISE``:

- ``"unhandled"`` (the default): only when the policy result leaves the workflow
  needing an operator or ends it: ``pause``, ``cancel``, or a terminal result (the
  reattempt cap was reached, R-POL-10). A ``reattempt``, ``skip`` or ``finish`` that
  the policy chose deliberately is the workflow handling its own error: the task
  succeeds, and monitors of Celery task failures do not count expected retries.
  Exceptions no policy handled (the library's own errors, R-EXE-51, and
  R-EXE-14/15) always propagate.
- ``"always"``: every policy-handled exception is re-raised, whatever the action
  (R-EXE-50 before the amendment).

R-LOG-06 (amended): the line that logs a captured exception carries the policy
decision, at WARNING when the policy handled it (the workflow goes on by itself)
and at ERROR otherwise.

This module is pure: no database, no Flask, no Celery.

.. versionadded:: 0.1
"""

from __future__ import annotations

import logging
from typing import Any

from flask_geneva.core.config import RERAISE_ALWAYS
from flask_geneva.core.config import RERAISE_MODES
from flask_geneva.core.config import RERAISE_UNHANDLED
from flask_geneva.policies.resolution import PolicyResult

__all__ = [
    "RERAISE_ALWAYS",
    "RERAISE_MODES",
    "RERAISE_UNHANDLED",
    "is_handled",
    "log_captured",
    "log_level",
    "log_unrecorded",
    "should_reraise",
    "validate_reraise_mode",
]


_HANDLED_ACTIONS = frozenset({"reattempt", "skip", "finish"})


def is_handled(result: PolicyResult) -> bool:
    """Return whether ``result`` lets the workflow go on by itself (R-EXE-50).

    True for a ``reattempt``, ``skip`` or ``finish`` result that is not terminal;
    False for ``pause`` and ``cancel`` and for any terminal result (the reattempt
    cap was reached and the terminal action replaced the reattempt, R-POL-10).

    .. versionadded:: 0.1
    """
    return result.action in _HANDLED_ACTIONS and not result.terminal


def should_reraise(mode: str, result: PolicyResult | None) -> bool:
    """Return whether the executor re-raises a policy-handled exception (R-EXE-50).

    Args:
        mode: ``"unhandled"`` or ``"always"`` (``GENEVA_TASK_RERAISE``).
        result: The applied policy result; None when no policy result exists,
            which always re-raises.

    Raises:
        ValueError: ``mode`` is not one of :data:`RERAISE_MODES`.

    .. versionadded:: 0.1
    """
    validate_reraise_mode(mode)
    if mode == RERAISE_ALWAYS or result is None:
        return True
    return not is_handled(result)


def log_level(result: PolicyResult) -> int:
    """Return the level of the line logging a captured exception (R-LOG-06).

    ``logging.WARNING`` when the policy handled it (:func:`is_handled`),
    ``logging.ERROR`` otherwise.

    .. versionadded:: 0.1
    """
    return logging.WARNING if is_handled(result) else logging.ERROR


def validate_reraise_mode(mode: object, *, name: str = "reraise") -> str:
    """Return ``mode`` if it is one of :data:`RERAISE_MODES`.

    Args:
        mode: The value to check.
        name: The setting or argument named in the error message.

    Raises:
        ValueError: ``mode`` is not allowed; the message names the value and the
            allowed ones.

    .. versionadded:: 0.1
    """
    if mode not in RERAISE_MODES:
        raise ValueError(
            f"{name} must be one of {', '.join(map(repr, RERAISE_MODES))}, got {mode!r}"
        )
    return str(mode)


def log_captured(
    logger: Any, error: BaseException, result: PolicyResult, what: str
) -> None:
    """Log a captured exception once, with its policy decision (R-LOG-06 amended).

    ``"<what> <class>: <message>; exception policy: <action> (wait=<wait>)"``,
    with ``", terminal"`` after the wait for a terminal result, at
    :func:`log_level`.

    Args:
        logger: The executor's tagged logger (or any logger).
        error: The captured exception.
        result: The policy result applied to it.
        what: How it was met: ``"encountered"`` (body), ``"condition raised"``,
            ``"prepare phase raised"``.

    .. versionadded:: 0.1
    """
    logger.log(
        log_level(result),
        "%s %s: %s; exception policy: %s (wait=%s%s)",
        what,
        type(error).__name__,
        error,
        result.action,
        result.wait,
        ", terminal" if result.terminal else "",
    )


def log_unrecorded(logger: Any, error: BaseException, what: str) -> None:
    """Log at ERROR a captured exception whose outcome could not be committed.

    The transaction applying its policy failed, so the exception was perhaps
    never logged by :func:`log_captured`; it is named here before the error that
    stopped the transaction propagates, so neither masks the other.

    .. versionadded:: 0.1
    """
    logger.error(
        "%s %s: %s; recording the outcome failed",
        what,
        type(error).__name__,
        error,
    )
