"""Validation of one step declaration's options into a :class:`StepSpec`.

``@step``, ``@resumable_step``, ``step.anonymous`` and ``step.repeat``
(:mod:`flask_geneva.dsl.decorators`) hand their keywords to :func:`make_spec`, which
checks each option (R-DEF-01..16) and raises :class:`StepConfigurationError` naming
the wrong value and the allowed ones. Pure code: no database, no Flask.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from flask_geneva.core.durations import coerce_duration
from flask_geneva.core.durations import duration_option
from flask_geneva.core.stored_names import MAX_NAME_LENGTH
from flask_geneva.core.stored_names import fits_name_column
from flask_geneva.dsl.children import validate_children_options
from flask_geneva.dsl.definitions import StepSpec
from flask_geneva.dsl.job_options import fold_priority
from flask_geneva.dsl.job_options import validate_job_options
from flask_geneva.dsl.limits import coerce_step_limits
from flask_geneva.dsl.option_hints import wait_hint
from flask_geneva.dsl.signal_matchers import validate_wait_options
from flask_geneva.dsl.signatures import body_problem
from flask_geneva.dsl.signatures import condition_problem
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import PolicyList
from flask_geneva.policies.exception_policy import check_policy_elements
from flask_geneva.policies.exception_policy import coerce_action
from flask_geneva.policies.exception_policy import validate_max_reattempts

__all__ = ["UNSET", "check_stored_name", "make_spec", "step_label"]

_ACTIONS_TEXT = ", ".join(repr(action.value) for action in Action)
_TERMINAL_ACTIONS = (Action.PAUSE, Action.CANCEL, Action.SKIP)

#: Width of the name columns: step names (``step_name``, ``current_step_name``,
#: ...) and the workflows' ``type``.
MAX_STEP_NAME_LENGTH = MAX_NAME_LENGTH


class _Unset:
    """Sentinel type for "option not given" (distinct from an explicit None)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()
"""Default of ``max_reattempts``: "not given", which differs from an explicit None."""


def _validate_condition(option: str, value: object, label: str) -> object:
    """Validate a ``skip_if``/``run_if`` value (R-DEF-05)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value.isidentifier():
            return value
    elif callable(value) and not isinstance(value, type):
        problem = condition_problem(value, option=option)
        if problem is not None:
            raise StepConfigurationError(f"{label}: {problem}")
        return value
    raise StepConfigurationError(
        f"{label}: invalid {option} {value!r} ({type(value).__name__}): must be a "
        f"callable, method name, boolean, or None"
    )


def _normalize_exception_policy(
    on_exception: object,
    max_reattempts: object,
    terminal_action: object,
    label: str,
) -> ExceptionPolicy | PolicyList | None:
    """Turn the ``on_exception`` option into a step-level policy (R-DEF-08..12)."""
    has_max = max_reattempts is not UNSET
    has_terminal = terminal_action is not None

    def reject_extras(template: str) -> None:
        for option, given in (
            ("max_reattempts", has_max),
            ("terminal_action", has_terminal),
        ):
            if given:
                raise StepConfigurationError(
                    f"{label}: " + template.format(option=option)
                )

    if on_exception is None:
        reject_extras(
            "{option} is only allowed when on_exception is 'reattempt'; "
            "on_exception is not reattempt (it is not set)"
        )
        return None
    if isinstance(on_exception, Action | str):
        action = coerce_action(on_exception, name=f"{label}: on_exception")
        if action is not Action.REATTEMPT:
            reject_extras(
                "{option} is only allowed when on_exception is 'reattempt'; "
                f"on_exception is not reattempt (it is {action.value!r})"
            )
            return ExceptionPolicy(action)
        terminal = coerce_action(
            Action.PAUSE if terminal_action is None else terminal_action,
            allowed=_TERMINAL_ACTIONS,
            name=f"{label}: terminal_action",
        )
        if has_max:
            return ExceptionPolicy(
                action,
                max_reattempts=validate_max_reattempts(max_reattempts, label),
                terminal_action=terminal,
            )
        return ExceptionPolicy(action, terminal_action=terminal)
    instead = (
        "{option} is not allowed when on_exception is a policy, list or callable: "
        "set {option} on the policy instead"
    )
    if isinstance(on_exception, ExceptionPolicy | PolicyList):
        reject_extras(instead)
        return on_exception
    if isinstance(on_exception, list | tuple):
        reject_extras(instead)
        check_policy_elements(on_exception, what=f"{label}: invalid on_exception list")
        return PolicyList(on_exception)
    if callable(on_exception) and not isinstance(on_exception, type):
        reject_extras(instead)
        return ExceptionPolicy(handler=on_exception)
    raise StepConfigurationError(
        f"{label}: invalid on_exception {on_exception!r} "
        f"({type(on_exception).__name__}): must be None, an action ({_ACTIONS_TEXT}), "
        f"an ExceptionPolicy, a callable handler (workflow, error), or a list of "
        f"ExceptionPolicy"
    )


def make_spec(
    *,
    label: str,
    name: str | None,
    method_name: str | None,
    body: Callable[..., Any] | None,
    body_location: tuple[str, int] | None,
    definition_location: tuple[str, int],
    resumable: bool,
    options: dict[str, Any],
) -> StepSpec:
    """Validate the options of one step declaration (R-DEF-01..16, R-LIM-03).

    Args:
        label: How messages name the step (:func:`step_label`).
        name: The step name, or None for an anonymous step.
        method_name: Name of the workflow method that is the body, or None.
        body: Inline body callable, or None.
        body_location: ``(file, line)`` of the body function, or None.
        definition_location: ``(file, line)`` of the declaration (R-DEF-16).
        resumable: Whether this is a ``resumable_step``.
        options: The declaration's keywords (``wait``, ``skip_if``, ``run_if``,
            ``on_exception``, ``max_reattempts``, ``terminal_action``, ``before``,
            ``after``, ``job_options``, ``priority``, ``wait_for``,
            ``wait_timeout``, ``on_wait_timeout``, ``limit``, ``timeout``;
            ``max_iterations`` and
            ``max_runtime`` for resumable steps).

    Returns:
        The validated spec.

    Raises:
        StepConfigurationError: No body, or any invalid option, naming the value
            and the allowed ones; ``priority`` and ``job_options={"priority":
            ...}`` with different values (R-PRI-01).
    """
    if name is not None:
        _check_step_name(name)
    if method_name is None and body is None:
        raise StepConfigurationError(
            f"{label}: requires either a body or a method name"
        )
    if body is not None:
        problem = body_problem(body, resumable=resumable)
        if problem is not None:
            raise StepConfigurationError(f"{label}: {problem}")
    wait = options["wait"]
    try:
        wait_delta = coerce_duration(wait, name="wait")
    except (TypeError, ValueError) as exc:
        raise StepConfigurationError(
            f"{label}: invalid wait value {wait!r}: {exc}; allowed: a timedelta "
            f"or a number of seconds from 0 to 100 years (e.g. timedelta(days=2) "
            f"or 172800), or None{wait_hint(wait)}"
        ) from exc
    skip_if = _validate_condition("skip_if", options["skip_if"], label)
    run_if = _validate_condition("run_if", options["run_if"], label)
    if skip_if is not None and run_if is not None:
        raise StepConfigurationError(
            f"{label}: cannot specify both skip_if and run_if "
            f"(run_if is the inverse of skip_if)"
        )
    before, after = options["before"], options["after"]
    if before is not None and after is not None:
        raise StepConfigurationError(
            f"{label}: cannot specify both before and after (got before={before!r}, "
            f"after={after!r})"
        )
    policy = _normalize_exception_policy(
        options["on_exception"],
        options["max_reattempts"],
        options["terminal_action"],
        label,
    )
    # Anonymous steps learn their name (step_<N>) only at registration, so their
    # job options are validated then, by StepSpec.build, with the right context.
    # priority=n is job_options={"priority": n} (R-PRI-01).
    raw_job_options = fold_priority(
        options["job_options"],
        options.get("priority"),
        context=label,
        keyword="priority=",
        options_name="job_options",
    )
    job_options: Any = (
        MappingProxyType(validate_job_options(raw_job_options, context=label))
        if name is not None
        else raw_job_options
    )
    max_iterations = options.get("max_iterations")
    if max_iterations is not None and (
        isinstance(max_iterations, bool)
        or not isinstance(max_iterations, int)
        or max_iterations < 1
    ):
        raise StepConfigurationError(
            f"{label}: invalid max_iterations {max_iterations!r}: must be a positive "
            f"integer or None"
        )
    max_runtime = options.get("max_runtime")
    runtime = (
        None
        if max_runtime is None
        else duration_option(
            max_runtime,
            name="max_runtime",
            label=label,
            must="a positive timedelta or number of seconds, or None",
            positive=True,
        )
    )
    wait_for, wait_timeout, on_wait_timeout = validate_wait_options(options, label)
    step_timeout = _step_timeout(options.get("timeout"), label)
    limits = coerce_step_limits(options.get("limit"), label=label)
    wait_for_children, on_child_failure = validate_children_options(options, label)
    return StepSpec(
        name=name,
        method_name=method_name,
        body=body,
        wait=wait_delta,
        skip_if=skip_if,
        run_if=run_if,
        exception_policy=policy,
        job_options=job_options,
        before=None if before is None else str(before),
        after=None if after is None else str(after),
        is_resumable=resumable,
        max_iterations=max_iterations,
        max_runtime=runtime,
        definition_location=definition_location,
        body_location=body_location,
        wait_for=wait_for,
        wait_timeout=wait_timeout,
        on_wait_timeout=on_wait_timeout,
        limits=limits,
        wait_for_children=wait_for_children,
        on_child_failure=on_child_failure,
        timeout=step_timeout,
    )


def _step_timeout(value: object, label: str) -> timedelta | None:
    """Validate the ``timeout`` option (R-STO-01).

    Args:
        value: The option: None, a ``timedelta`` or a number of seconds.
        label: How messages name the step.

    Returns:
        The timeout as a ``timedelta``, or None when not set.

    Raises:
        StepConfigurationError: Not positive, longer than 100 years, not
            finite, or of another type (a bool, a str such as ``"5 minutes"``),
            naming the value and the allowed forms.
    """
    if value is None:
        return None
    return duration_option(
        value,
        name="timeout",
        label=label,
        must=(
            "a positive timedelta or number of seconds (e.g. "
            "timedelta(minutes=5) or 300), or None for no timeout; it bounds "
            "one run of the step's body"
        ),
        positive=True,
    )


def _check_step_name(name: str) -> None:
    """Refuse a step name the step name columns cannot hold (R-DEF-02).

    The name is stored in ``String(255)`` columns, and PostgreSQL text cannot
    hold a NUL character; an empty name could not be named back to an operator
    (``flask geneva resume --at``). Checked at class definition, on every
    database, rather than when the first row is written.
    """
    check_stored_name(name, what="step name", subject="a step name")


def check_stored_name(
    value: object, *, what: str, subject: str, allow_blank: bool = True
) -> None:
    """Refuse a name that a 255-character name column cannot hold.

    Step names (R-DEF-02) and workflow types (``__geneva_type__``, R-STI-05)
    are stored in ``String(255)`` columns, and PostgreSQL text cannot hold a
    NUL character.

    Args:
        value: The declared name.
        what: What the message calls the value (``"step name"``).
        subject: The must-sentence's subject (``"a step name"``).
        allow_blank: Whether a name of whitespace only is accepted.

    Raises:
        StepConfigurationError: ``value`` is not a str, is empty (or blank
            when not ``allow_blank``), longer than 255 characters, holds a
            NUL character or an unpaired surrogate (R-FLT-71); the message
            names the value and what is allowed.
    """
    if fits_name_column(value, allow_blank=allow_blank):
        return
    shown = repr(value)
    if isinstance(value, str) and len(value) > 60:
        shown = f"{value[:40]!r}... ({len(value)} characters)"
    blank = "" if allow_blank else ", not blank,"
    raise StepConfigurationError(
        f"invalid {what} {shown}: {subject} must be a non-empty str{blank} of at "
        f"most {MAX_STEP_NAME_LENGTH} characters and no NUL character"
    )


def step_label(name: str | None) -> str:
    """How messages name a declared step: ``Step 'name'`` or ``Anonymous step``."""
    return "Anonymous step" if name is None else f"Step '{name}'"
