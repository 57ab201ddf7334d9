"""Validation and merging of step-task job options (SPEC §5.5, R-JOB-01..07).

Job options tell the dispatcher how to publish the Celery task of a step execution:
``queue`` (str), ``priority`` (int), ``wait`` (a delay) and ``wait_until`` (an aware
UTC datetime). They exist at three levels (class, instance, step) which are merged key
by key with :func:`merge_job_options`. This module is pure: no database, no Flask.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from typing import Any

from flask_geneva.core.clock import ensure_aware
from flask_geneva.core.durations import coerce_duration
from flask_geneva.core.stored_names import QUEUE_NAME_RULE
from flask_geneva.core.stored_names import queue_name_problem
from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "ALLOWED_JOB_OPTION_KEYS",
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "fold_priority",
    "merge_job_options",
    "priority_of",
    "validate_job_options",
]

#: The only keys a job-option mapping may hold (R-JOB-03).
ALLOWED_JOB_OPTION_KEYS: tuple[str, ...] = ("queue", "priority", "wait", "wait_until")

_ALLOWED_TEXT = ", ".join(repr(key) for key in ALLOWED_JOB_OPTION_KEYS)

#: The priority of a step whose merged job options set none (R-PRI-02).
DEFAULT_PRIORITY = 0

#: The largest priority magnitude: a limit's waiter row stores the priority and
#: its negation in 32-bit INTEGER columns (R-LIM-11), so ``|priority|`` must be
#: below ``2**31`` (R-JOB-05).
MAX_PRIORITY = 2**31 - 1


def validate_job_options(value: object, *, context: str) -> dict[str, Any]:
    """Return ``value`` as a validated, normalized dict of job options (R-JOB-03..06).

    The result maps ``str`` keys to normalized values: ``queue`` -> ``str``,
    ``priority`` -> ``int``, ``wait`` -> :class:`~datetime.timedelta`, ``wait_until``
    -> aware UTC :class:`~datetime.datetime`. A key whose value is None is kept with
    value None, meaning "unset" (it does not override other levels when merged).
    Validating an already validated dict returns an equal dict.

    Args:
        value: A mapping, anything ``dict(...)`` accepts (e.g. a list of pairs), or
            None (same as an empty mapping). Keys are converted with ``str()``.
            ``wait`` is a ``timedelta`` or a non-negative number of seconds;
            ``wait_until`` is an aware datetime or epoch seconds (int/float, UTC).
        context: Prefix of every error message, e.g. ``"Step 'deliver'"``,
            ``"NewsletterWorkflow.default_job_options"`` or
            ``"NewsletterWorkflow.step_job_options="`` (R-JOB-06).

    Returns:
        A new dict; the input is not modified.

    Raises:
        StepConfigurationError: ``value`` cannot be coerced to a mapping (R-JOB-04); it
            holds keys outside :data:`ALLOWED_JOB_OPTION_KEYS` (the message names the
            unknown keys and the allowed set, R-JOB-03); or a value has the wrong type
            or range, e.g. a bool priority, a negative wait or a naive ``wait_until``
            (the message names key, value and type, R-JOB-05).

    .. versionadded:: 0.1
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        raw = dict(value.items())
    else:
        if isinstance(value, str | bytes):
            raise StepConfigurationError(_not_a_mapping(value, context))
        try:
            raw = dict(value)  # type: ignore[call-overload]  # any dict() input
        except (TypeError, ValueError) as exc:
            raise StepConfigurationError(_not_a_mapping(value, context)) from exc

    options = {str(key): item for key, item in raw.items()}
    unknown = [key for key in options if key not in ALLOWED_JOB_OPTION_KEYS]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        raise StepConfigurationError(
            f"{context}: unknown job option key(s) {names}; "
            f"allowed keys are {_ALLOWED_TEXT}"
        )
    return {key: _validate_value(key, item, context) for key, item in options.items()}


def merge_job_options(*levels: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge job-option levels; later levels override earlier ones by key (R-JOB-02).

    Call it as ``merge_job_options(class_options, instance_options, step_options)``.
    A key whose value is None is "unset": it does not override an earlier level and
    does not appear in the result. The inputs are expected to be validated already
    (:func:`validate_job_options`); they are not modified.

    Args:
        *levels: Mappings of job options, lowest precedence first; None entries are
            skipped.

    Returns:
        A new dict holding only keys with non-None values.

    .. versionadded:: 0.1
    """
    merged: dict[str, Any] = {}
    for level in levels:
        if level is None:
            continue
        for key, item in level.items():
            if item is not None:
                merged[str(key)] = item
    return merged


def fold_priority(
    options: object,
    priority: object,
    *,
    context: str,
    keyword: str,
    options_name: str,
) -> Any:
    """Fold the ``priority`` spelling of a level into its job options (R-PRI-01).

    ``priority`` at a level *is* that level's ``priority`` job option: the class
    attribute ``priority = n`` is ``default_job_options={"priority": n}``,
    ``@step(priority=n)`` is ``job_options={"priority": n}`` and
    ``create(priority=n)`` is ``step_job_options={"priority": n}``.

    Args:
        options: The level's job options as given (anything
            :func:`validate_job_options` accepts), or None.
        priority: The ``priority`` spelling's value; None means "not given".
        context: Prefix of error messages (R-JOB-06).
        keyword: How the message names the priority spelling, e.g.
            ``"priority="`` or ``"priority ="``.
        options_name: How the message names the job options, e.g.
            ``"job_options"``.

    Returns:
        ``options`` unchanged when ``priority`` is None; else a new validated
        dict of ``options`` with ``"priority": priority``.

    Raises:
        StepConfigurationError: ``priority`` is not an int (bools refused,
            R-JOB-05), ``options`` is invalid (R-JOB-03..05), or both spellings
            give a priority and the values differ; the message names both.
    """
    if priority is None:
        return options
    checked = validate_job_options({"priority": priority}, context=context)
    given = validate_job_options(options, context=context)
    other = given.get("priority")
    if other is not None and other != checked["priority"]:
        raise StepConfigurationError(
            f"{context}: two different priorities: {keyword}{priority!r} and "
            f"{options_name}={{'priority': {other!r}}}; the priority keyword is "
            f"the 'priority' job option (R-PRI-01): give one of them"
        )
    return {**given, "priority": checked["priority"]}


def priority_of(options: Mapping[str, Any]) -> int:
    """The priority of merged job options: higher runs first (R-PRI-02).

    Args:
        options: Merged job options (:func:`merge_job_options`).

    Returns:
        Their ``priority``, or :data:`DEFAULT_PRIORITY` (0) when unset.
    """
    priority = options.get("priority")
    return DEFAULT_PRIORITY if priority is None else int(priority)


def _not_a_mapping(value: object, context: str) -> str:
    return (
        f"{context}: cannot coerce {value!r} ({type(value).__name__}) to a mapping "
        f"of job options; expected a dict with keys among {_ALLOWED_TEXT}"
    )


def _validate_value(key: str, value: object, context: str) -> Any:
    if value is None:
        return None
    described = f"{_shown(value)} ({type(value).__name__})"
    if key == "queue":
        problem = queue_name_problem(value)
        if problem is not None:
            raise StepConfigurationError(
                f"{context}: job option 'queue' must be {QUEUE_NAME_RULE}, "
                f"got {described}{problem}"
            )
        return value
    if key == "priority":
        if isinstance(value, bool) or not isinstance(value, int):
            raise StepConfigurationError(
                f"{context}: job option 'priority' must be an int, got {described}"
            )
        if not -MAX_PRIORITY <= value <= MAX_PRIORITY:
            raise StepConfigurationError(
                f"{context}: job option 'priority' must be between "
                f"{-MAX_PRIORITY} and {MAX_PRIORITY}, got {described}"
            )
        return value
    if key == "wait":
        try:
            return coerce_duration(value, name="wait")
        except (TypeError, ValueError) as exc:
            raise StepConfigurationError(
                f"{context}: job option 'wait' must be a non-negative timedelta or "
                f"number of seconds, got {described}"
            ) from exc
    # key == "wait_until": the only key left after the allowed-keys check.
    return _validate_wait_until(value, described, context)


def _shown(value: object) -> str:
    """``repr(value)``, shortened to about 100 characters for a message."""
    text = repr(value)
    return text if len(text) <= 100 else f"{text[:80]}...{text[-15:]}"


def _validate_wait_until(value: object, described: str, context: str) -> datetime:
    if isinstance(value, datetime):
        try:
            return ensure_aware(value, name="wait_until")
        except ValueError as exc:
            raise StepConfigurationError(
                f"{context}: job option 'wait_until' must be a timezone-aware "
                f"datetime, got naive {described}"
            ) from exc
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise StepConfigurationError(
                f"{context}: job option 'wait_until' must be finite epoch seconds, "
                f"got {described}"
            )
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise StepConfigurationError(
                f"{context}: job option 'wait_until' epoch seconds out of range, "
                f"got {described}"
            ) from exc
    raise StepConfigurationError(
        f"{context}: job option 'wait_until' must be an aware datetime or epoch "
        f"seconds (int/float), got {described}"
    )
