"""Step declarations: the ``step``/``resumable_step`` decorators, step definitions and
their ordering (SPEC §5.1, §5.2, §15.2).

Declaring a step produces a :class:`StepSpec` (name possibly unknown, options
validated); the collector (:mod:`flask_geneva.dsl.collect`) turns specs into immutable
:class:`StepDefinition` objects when the workflow class is created and keeps them in a
:class:`StepCollection`, which computes the execution order once. Pure code: no
database, no Flask.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any
from typing import overload

from flask_geneva.dsl.conditions import describe_condition
from flask_geneva.dsl.conditions import evaluate_condition
from flask_geneva.dsl.signatures import body_problem
from flask_geneva.dsl.signatures import condition_problem
from flask_geneva.durations import coerce_duration
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.job_options import validate_job_options
from flask_geneva.policies import Action
from flask_geneva.policies import ExceptionPolicy
from flask_geneva.policies import PolicyList
from flask_geneva.policies import coerce_action

__all__ = [
    "STEP_MARK",
    "StepCollection",
    "StepDefinition",
    "StepSpec",
    "resumable_step",
    "step",
]

#: Attribute holding the :class:`StepSpec` on a function decorated with ``@step``.
STEP_MARK = "__geneva_step__"

_ACTIONS_TEXT = ", ".join(repr(action.value) for action in Action)
_TERMINAL_ACTIONS = (Action.PAUSE, Action.CANCEL, Action.SKIP)


class _Unset:
    """Sentinel type for "option not given" (distinct from an explicit None)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


@dataclass(frozen=True, kw_only=True, eq=False)
class StepDefinition:
    """An immutable step of a workflow class (SPEC §5.1, R-DEF-17).

    Created by the collector from a :class:`StepSpec`; do not build it by hand.

    Attributes:
        name: The step name, stored in the database (R-DEF-02).
        method_name: Name of the workflow method that is the body, looked up on the
            instance at run time so subclass overrides win (R-INH-03); None for
            inline bodies.
        body: Inline body ``(workflow)`` (``(workflow, it)`` for resumable steps),
            used when ``method_name`` is None.
        wait: Delay before the step's execution is due, or None (R-DEF-04).
        skip_if: None, bool, method name or callable ``(workflow)`` (R-DEF-05).
        run_if: Inverse condition of ``skip_if``, same shapes (R-DEF-06).
        exception_policy: The step-level policy, a :class:`PolicyList`, or None when
            the step set none (R-DEF-12).
        job_options: Validated step-level job options, read-only (R-DEF-14).
        before: Name of the step this one is placed before, or None.
        after: Name of the step this one is placed after, or None.
        is_resumable: Whether this is a ``resumable_step`` (SPEC §10).
        max_iterations: Iterations per execution before interruption, or None.
        max_runtime: Runtime per execution before interruption, or None.
        definition_location: ``(file, line)`` of the declaration (R-DEF-16).
        body_location: ``(file, line)`` of the body function, None when the body is a
            method name given as a string (R-DEF-16).

    .. versionadded:: 0.1
    """

    name: str
    method_name: str | None
    body: Callable[..., Any] | None
    wait: timedelta | None
    skip_if: Any
    run_if: Any
    exception_policy: ExceptionPolicy | PolicyList | None
    job_options: Mapping[str, Any]
    before: str | None
    after: str | None
    is_resumable: bool
    max_iterations: int | None
    max_runtime: timedelta | None
    definition_location: tuple[str, int]
    body_location: tuple[str, int] | None

    @property
    def on_exception(self) -> Action | None:
        """Action of a single declarative step-level policy, else None (R-DEF-13)."""
        policy = self.exception_policy
        if isinstance(policy, ExceptionPolicy) and policy.is_declarative:
            return policy.action
        return None

    @property
    def is_positioned(self) -> bool:
        """Whether the step was placed with ``before`` or ``after`` (R-ORD-01)."""
        return self.before is not None or self.after is not None

    def invoke(self, workflow: object, iterable_step: object = None) -> Any:
        """Run the step body on ``workflow`` and return its result.

        A method body is called as ``getattr(workflow, method_name)(...)`` so that a
        subclass override takes effect (R-INH-03); an inline body as
        ``body(workflow, ...)``. Resumable steps receive ``iterable_step`` (the ``it``
        object) as the extra argument; regular steps receive nothing.

        Raises:
            Exception: Whatever the body raises, including flow-control signals.
        """
        if self.method_name is not None:
            target = getattr(workflow, self.method_name)
            return target(iterable_step) if self.is_resumable else target()
        if self.body is None:  # pragma: no cover - prevented by StepSpec validation
            raise StepConfigurationError(f"Step '{self.name}' has no body")
        if self.is_resumable:
            return self.body(workflow, iterable_step)
        return self.body(workflow)

    def should_skip(self, workflow: object) -> bool:
        """Return whether the step is skipped for ``workflow`` (R-CND-02, R-DEF-06).

        ``skip_if`` skips when truthy; ``run_if`` skips when falsy; with neither the
        step runs. Method-name conditions are called on the workflow.

        Raises:
            Exception: Whatever the condition raises, unchanged.
        """
        if self.run_if is not None:
            return not evaluate_condition(workflow, self.run_if)
        return evaluate_condition(workflow, self.skip_if)

    def skip_condition_description(self) -> str | None:
        """Describe the skip condition for records (R-PDR-04), None if there is none.

        ``skip_if`` is described by its name or repr; ``run_if`` as ``"not <name>"``.
        """
        if self.run_if is not None:
            return f"not {describe_condition(self.run_if)}"
        if self.skip_if is not None:
            return describe_condition(self.skip_if)
        return None

    def __repr__(self) -> str:
        kind = "resumable_step" if self.is_resumable else "step"
        return f"<StepDefinition {kind} {self.name!r}>"


@dataclass(frozen=True, kw_only=True, eq=False)
class StepSpec:
    """A declared step before it is registered on a class (SPEC §15.2).

    ``step.anonymous`` and ``step.repeat`` return specs; ``@step`` stores one on the
    decorated function (attribute :data:`STEP_MARK`). All options are already
    validated, except the ``before``/``after`` references, duplicate names and
    reserved names, which need the class and are checked by the collector.

    Attributes:
        name: The step name, or None for an anonymous step (named ``step_<N>`` when
            registered, R-DEF-03).
        job_options: Validated read-only mapping for named specs; the raw value for
            anonymous specs, validated by :meth:`build` once the name is known.

    Other attributes are as in :class:`StepDefinition`.

    .. versionadded:: 0.1
    """

    name: str | None
    method_name: str | None
    body: Callable[..., Any] | None
    wait: timedelta | None
    skip_if: Any
    run_if: Any
    exception_policy: ExceptionPolicy | PolicyList | None
    job_options: Any
    before: str | None
    after: str | None
    is_resumable: bool
    max_iterations: int | None
    max_runtime: timedelta | None
    definition_location: tuple[str, int]
    body_location: tuple[str, int] | None

    def build(
        self, name: str | None = None, *, method_name: str | None = None
    ) -> StepDefinition:
        """Return the :class:`StepDefinition` for this spec.

        Args:
            name: The final name; required for anonymous specs, defaults to
                :attr:`name`.
            method_name: Overrides :attr:`method_name` (the collector passes the
                attribute name under which a decorated method was found).

        Raises:
            StepConfigurationError: No name is known, or the job options are invalid
                (context ``"Step '<name>'"``, R-DEF-14).
        """
        final_name = self.name if name is None else str(name)
        if final_name is None:
            raise StepConfigurationError("an anonymous step needs a name to be built")
        options = validate_job_options(self.job_options, context=f"Step '{final_name}'")
        return StepDefinition(
            name=final_name,
            method_name=self.method_name if method_name is None else method_name,
            body=self.body,
            wait=self.wait,
            skip_if=self.skip_if,
            run_if=self.run_if,
            exception_policy=self.exception_policy,
            job_options=MappingProxyType(options),
            before=self.before,
            after=self.after,
            is_resumable=self.is_resumable,
            max_iterations=self.max_iterations,
            max_runtime=self.max_runtime,
            definition_location=self.definition_location,
            body_location=self.body_location,
        )


def _caller_location(depth: int) -> tuple[str, int]:
    """Return ``(file, line)`` of the frame ``depth`` levels above the caller."""
    frame = sys._getframe(depth + 1)
    return frame.f_code.co_filename, frame.f_lineno


def _body_location(func: Callable[..., Any]) -> tuple[str, int] | None:
    code = getattr(inspect.unwrap(func), "__code__", None)
    if code is None:
        return None
    return code.co_filename, code.co_firstlineno


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


def _validate_max_reattempts(value: object, label: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StepConfigurationError(
            f"{label}: invalid max_reattempts {value!r}: must be a positive integer "
            f"or None (None = unlimited)"
        )
    return value


def _normalize_exception_policy(
    on_exception: object,
    max_reattempts: object,
    terminal_action: object,
    label: str,
) -> ExceptionPolicy | PolicyList | None:
    """Turn the ``on_exception`` option into a step-level policy (R-DEF-08..12)."""
    has_max = max_reattempts is not _UNSET
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
                max_reattempts=_validate_max_reattempts(max_reattempts, label),
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
        for index, item in enumerate(on_exception):
            if not isinstance(item, ExceptionPolicy):
                raise StepConfigurationError(
                    f"{label}: invalid on_exception list element #{index}: {item!r} "
                    f"({type(item).__name__}); every element must be an "
                    f"ExceptionPolicy"
                )
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


def _make_spec(
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
    """Validate the options of one step declaration (R-DEF-01..16)."""
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
            f"{label}: invalid wait value {wait!r}: must be non-negative (a timedelta "
            f"or a number of seconds, at most 100 years) or None"
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
    raw_job_options = options["job_options"]
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
    try:
        runtime = coerce_duration(max_runtime, name="max_runtime", positive=True)
    except (TypeError, ValueError) as exc:
        raise StepConfigurationError(
            f"{label}: invalid max_runtime {max_runtime!r}: must be a positive "
            f"timedelta or number of seconds, or None"
        ) from exc
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
    )


def _step_label(name: str | None) -> str:
    return "Anonymous step" if name is None else f"Step '{name}'"


def _decorate(
    func: Callable[..., Any],
    options: dict[str, Any],
    location: tuple[str, int],
    resumable: bool,
) -> Callable[..., Any]:
    decorator = "@resumable_step" if resumable else "@step"
    if not inspect.isfunction(func):
        raise StepConfigurationError(
            f"{decorator} decorates a function defined in the workflow class body; "
            f"got {func!r} ({type(func).__name__})"
        )
    if STEP_MARK in func.__dict__:
        raise StepConfigurationError(
            f"{decorator}: {func.__qualname__} is already declared as a step"
        )
    raw_name = options.pop("name")
    name = func.__name__ if raw_name is None else str(raw_name)
    problem = body_problem(func, resumable=resumable)
    if problem is not None:
        raise StepConfigurationError(f"{decorator} {_step_label(name)}: {problem}")
    spec = _make_spec(
        label=_step_label(name),
        name=name,
        method_name=func.__name__,
        body=None,
        body_location=_body_location(func),
        definition_location=location,
        resumable=resumable,
        options=options,
    )
    setattr(func, STEP_MARK, spec)
    return func


def _anonymous(
    body: Callable[..., Any] | str | None,
    options: dict[str, Any],
    location: tuple[str, int],
    resumable: bool,
) -> StepSpec:
    raw_name = options.pop("name", None)
    name = None if raw_name is None else str(raw_name)
    label = _step_label(name)
    if isinstance(body, str):
        if not body.isidentifier():
            raise StepConfigurationError(
                f"{label}: invalid body method name {body!r}: must be a method name "
                f"(identifier) or a callable"
            )
        method_name, function, body_location = body, None, None
    elif body is None:
        method_name, function, body_location = None, None, None
    elif callable(body) and not isinstance(body, type):
        method_name, function, body_location = None, body, _body_location(body)
    else:
        raise StepConfigurationError(
            f"{label}: invalid body {body!r} ({type(body).__name__}): must be a "
            f"callable (self) or a method name"
        )
    return _make_spec(
        label=label,
        name=name,
        method_name=method_name,
        body=function,
        body_location=body_location,
        definition_location=location,
        resumable=resumable,
        options=options,
    )


def _repeat(
    count: object,
    body: Callable[..., Any] | str,
    options: dict[str, Any],
    location: tuple[str, int],
    resumable: bool,
) -> list[StepSpec]:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise StepConfigurationError(
            f"step.repeat: invalid count {count!r}: must be a non-negative integer"
        )
    if options.get("name") is not None:
        raise StepConfigurationError(
            f"step.repeat creates anonymous steps; name={options['name']!r} is not "
            f"allowed"
        )
    return [_anonymous(body, dict(options), location, resumable) for _ in range(count)]


class _StepDecorator:
    """The ``step`` object: ``@step``, ``@step(...)``, ``.anonymous``, ``.repeat``.

    See :data:`step`.
    """

    _resumable = False

    @overload
    def __call__(self, func: Callable[..., Any], /) -> Callable[..., Any]: ...

    @overload
    def __call__(
        self,
        func: None = None,
        /,
        *,
        name: object = None,
        wait: timedelta | float | None = None,
        skip_if: object = None,
        run_if: object = None,
        on_exception: object = None,
        max_reattempts: int | None = _UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...

    def __call__(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: object = None,
        wait: timedelta | float | None = None,
        skip_if: object = None,
        run_if: object = None,
        on_exception: object = None,
        max_reattempts: int | None = _UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
    ) -> Any:
        options = {
            "name": name,
            "wait": wait,
            "skip_if": skip_if,
            "run_if": run_if,
            "on_exception": on_exception,
            "max_reattempts": max_reattempts,
            "terminal_action": terminal_action,
            "before": before,
            "after": after,
            "job_options": job_options,
        }
        return self._apply(func, options, _caller_location(1))

    def _apply(
        self,
        func: object,
        options: dict[str, Any],
        location: tuple[str, int],
    ) -> Any:
        resumable = self._resumable
        if func is None:

            def decorator(target: Callable[..., Any]) -> Callable[..., Any]:
                return _decorate(target, dict(options), location, resumable)

            return decorator
        if not callable(func):
            keyword = "resumable_step" if resumable else "step"
            raise StepConfigurationError(
                f"{keyword}() takes its options as keywords, e.g. "
                f"@{keyword}(name=...); got positional {func!r}"
            )
        return _decorate(func, options, location, resumable)

    def anonymous(
        self,
        body: Callable[..., Any] | str | None,
        /,
        *,
        name: object = None,
        wait: timedelta | float | None = None,
        skip_if: object = None,
        run_if: object = None,
        on_exception: object = None,
        max_reattempts: int | None = _UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
    ) -> StepSpec:
        """Declare a step with an inline body or a method-name body (SPEC §15.2).

        Assign the result to any class attribute; the collector registers it where
        the attribute appears in the class body, named ``step_<N>`` unless ``name``
        is given (R-DEF-03).

        Args:
            body: A callable ``(self)`` or the name of a workflow method.
            name: Optional step name (default: anonymous).
            wait, skip_if, run_if, on_exception, max_reattempts, terminal_action,
                before, after, job_options: As for :data:`step`.

        Raises:
            StepConfigurationError: No body (R-DEF-01) or any invalid option.
        """
        options = {
            "name": name,
            "wait": wait,
            "skip_if": skip_if,
            "run_if": run_if,
            "on_exception": on_exception,
            "max_reattempts": max_reattempts,
            "terminal_action": terminal_action,
            "before": before,
            "after": after,
            "job_options": job_options,
        }
        return _anonymous(body, options, _caller_location(1), self._resumable)

    def repeat(
        self, count: int, body: Callable[..., Any] | str, /, **options: Any
    ) -> list[StepSpec]:
        """Declare ``count`` anonymous steps with the same body and options.

        Args:
            count: How many steps (a non-negative int).
            body: A callable ``(self)`` or the name of a workflow method.
            **options: The keywords of :meth:`anonymous` except ``name``.

        Raises:
            StepConfigurationError: Invalid ``count``, ``name`` given, or any invalid
                option.
            TypeError: An unknown keyword.
        """
        self._check_keywords(options)
        full = self._defaults() | options
        return _repeat(count, body, full, _caller_location(1), self._resumable)

    def _defaults(self) -> dict[str, Any]:
        return {
            "name": None,
            "wait": None,
            "skip_if": None,
            "run_if": None,
            "on_exception": None,
            "max_reattempts": _UNSET,
            "terminal_action": None,
            "before": None,
            "after": None,
            "job_options": None,
        }

    def _check_keywords(self, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - set(self._defaults()))
        if unknown:
            allowed = ", ".join(sorted(self._defaults()))
            raise TypeError(
                f"unknown step option(s) {', '.join(unknown)}; allowed: {allowed}"
            )

    def __repr__(self) -> str:
        return "flask_geneva.step"


class _ResumableStepDecorator(_StepDecorator):
    """The ``resumable_step`` object; see :data:`resumable_step`."""

    _resumable = True

    def __call__(  # adds the resumable-only keywords
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: object = None,
        wait: timedelta | float | None = None,
        skip_if: object = None,
        run_if: object = None,
        on_exception: object = None,
        max_reattempts: int | None = _UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
        max_iterations: int | None = None,
        max_runtime: timedelta | float | None = None,
    ) -> Any:
        options = {
            "name": name,
            "wait": wait,
            "skip_if": skip_if,
            "run_if": run_if,
            "on_exception": on_exception,
            "max_reattempts": max_reattempts,
            "terminal_action": terminal_action,
            "before": before,
            "after": after,
            "job_options": job_options,
            "max_iterations": max_iterations,
            "max_runtime": max_runtime,
        }
        return self._apply(func, options, _caller_location(1))

    def anonymous(  # adds the resumable-only keywords
        self,
        body: Callable[..., Any] | str | None,
        /,
        **options: Any,
    ) -> StepSpec:
        """Declare a resumable step with an inline ``(self, it)`` or method-name body.

        Keywords as for :data:`resumable_step`, plus ``name``.

        Raises:
            StepConfigurationError: No body or any invalid option.
            TypeError: An unknown keyword.
        """
        self._check_keywords(options)
        full = self._defaults() | options
        return _anonymous(body, full, _caller_location(1), True)

    def _defaults(self) -> dict[str, Any]:
        return super()._defaults() | {"max_iterations": None, "max_runtime": None}

    def __repr__(self) -> str:
        return "flask_geneva.resumable_step"


#: Declare a step (SPEC §15.2, R-DEF-01..16).
#:
#: ``@step`` or ``@step(name=None, wait=None, skip_if=None, run_if=None,
#: on_exception=None, max_reattempts=<unset>, terminal_action=None, before=None,
#: after=None, job_options=None)`` on a method ``(self)``; returns the original
#: function, marked with a :class:`StepSpec` under :data:`STEP_MARK`.
#:
#: ``wait``: ``timedelta`` or seconds, non-negative. ``skip_if``/``run_if``: None,
#: bool, method name or callable ``(self)``, not both. ``on_exception``: an action,
#: an :class:`ExceptionPolicy`, a callable ``(workflow, error)`` or a list of
#: policies. ``max_reattempts`` (positive int or None, default 100) and
#: ``terminal_action`` (pause/cancel/skip) only with the action ``reattempt``.
#: ``before``/``after``: name of an already-registered step, not both.
#: ``job_options``: mapping of queue/priority/wait/wait_until.
#:
#: Raises StepConfigurationError for any invalid option, naming the value and the
#: allowed ones. ``step.anonymous(body, **options)`` returns a :class:`StepSpec`;
#: ``step.repeat(n, body, **options)`` a list of n specs.
step = _StepDecorator()

#: Declare a resumable step on a method ``(self, it)`` (SPEC §10, R-DEF-15).
#:
#: Same keywords as :data:`step` plus ``max_iterations`` (positive int or None) and
#: ``max_runtime`` (positive ``timedelta`` or seconds, or None).
resumable_step = _ResumableStepDecorator()


class StepCollection:
    """The ordered, immutable steps of a workflow class (SPEC §5.2, R-ORD-01..05).

    Args:
        definitions: Step definitions in registration order, inherited ones first.

    The execution order is computed once, on first use, by the algorithm of
    R-ORD-01: unpositioned steps in registration order, then each positioned step
    (in registration order) inserted right before its ``before`` target or right
    after its ``after`` target as found in the list built so far.

    Raises:
        StepConfigurationError: Two definitions share a name (R-DEF-02).

    .. versionadded:: 0.1
    """

    __slots__ = ("_by_name", "_ordered", "_positions", "_registered")

    def __init__(self, definitions: Iterable[StepDefinition] = ()) -> None:
        registered = tuple(definitions)
        by_name: dict[str, StepDefinition] = {}
        for definition in registered:
            if definition.name in by_name:
                raise StepConfigurationError(
                    f"step {definition.name!r} is defined twice in the collection"
                )
            by_name[definition.name] = definition
        self._registered = registered
        self._by_name = by_name
        self._ordered: tuple[StepDefinition, ...] | None = None
        self._positions: dict[str, int] = {}

    @property
    def registered(self) -> tuple[StepDefinition, ...]:
        """The definitions in registration order (not execution order)."""
        return self._registered

    @property
    def ordered(self) -> tuple[StepDefinition, ...]:
        """The definitions in execution order (computed once and cached, R-DEF-17)."""
        if self._ordered is None:
            ordered = self._compute_order()
            self._positions = {d.name: i for i, d in enumerate(ordered)}
            self._ordered = ordered
        return self._ordered

    def _compute_order(self) -> tuple[StepDefinition, ...]:
        result = [d for d in self._registered if not d.is_positioned]
        for definition in self._registered:
            if not definition.is_positioned:
                continue
            target = (
                definition.before if definition.before is not None else definition.after
            )
            names = [d.name for d in result]
            if target not in names:
                option = "before" if definition.before is not None else "after"
                raise StepConfigurationError(
                    f"step {definition.name!r}: {option}={target!r} references no step "
                    f"placed before it; only already-defined steps can be referenced"
                )
            index = names.index(target)
            result.insert(
                index if definition.before is not None else index + 1, definition
            )
        return tuple(result)

    @property
    def names(self) -> list[str]:
        """Step names in execution order."""
        return [definition.name for definition in self.ordered]

    @property
    def first(self) -> StepDefinition | None:
        """The first step in execution order, None when there are no steps."""
        ordered = self.ordered
        return ordered[0] if ordered else None

    @property
    def last(self) -> StepDefinition | None:
        """The last step in execution order, None when there are no steps."""
        ordered = self.ordered
        return ordered[-1] if ordered else None

    def named(self, name: object) -> StepDefinition | None:
        """Return the step called ``str(name)``, or None (R-ORD-05)."""
        if name is None:
            return None
        return self._by_name.get(str(name))

    def next_after(self, name: object) -> StepDefinition | None:
        """Return the step after ``name``; the first step for None (R-ORD-03).

        Returns None after the last step and for unknown names.
        """
        ordered = self.ordered
        if name is None:
            return ordered[0] if ordered else None
        position = self._positions.get(str(name))
        if position is None or position + 1 >= len(ordered):
            return None
        return ordered[position + 1]

    def previous_before(self, name: object) -> StepDefinition | None:
        """Return the step before ``name`` (R-ORD-04).

        Returns None for None, for the first step and for unknown names.
        """
        if name is None:
            return None
        ordered = self.ordered
        position = self._positions.get(str(name))
        if position is None or position == 0:
            return None
        return ordered[position - 1]

    def __contains__(self, name: object) -> bool:
        """Whether a step called ``str(name)`` exists; does not compute the order."""
        return name is not None and str(name) in self._by_name

    @overload
    def __getitem__(self, index: int) -> StepDefinition: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[StepDefinition, ...]: ...

    def __getitem__(
        self, index: int | slice
    ) -> StepDefinition | tuple[StepDefinition, ...]:
        """Index into the execution order (ints and slices)."""
        return self.ordered[index]

    def __len__(self) -> int:
        return len(self._registered)

    def __iter__(self) -> Iterator[StepDefinition]:
        return iter(self.ordered)

    def __repr__(self) -> str:
        return f"<StepCollection {self.names!r}>"
