"""The ``step`` and ``resumable_step`` decorators (SPEC §15.2, R-DEF-01..16).

``@step``/``@step(...)`` marks a workflow method with a validated
:class:`~flask_geneva.dsl.definitions.StepSpec` (attribute
:data:`~flask_geneva.dsl.definitions.STEP_MARK`); ``step.anonymous`` and
``step.repeat`` return specs for inline or method-name bodies. The options are
checked by :mod:`flask_geneva.dsl.options`; the collector
(:mod:`flask_geneva.dsl.collect`) registers the specs when the class is created.
Pure code: no database, no Flask.
"""

from __future__ import annotations

import inspect
import itertools
import sys
import types
from collections.abc import Callable
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from typing import overload

from flask_geneva.dsl.definitions import STEP_MARK
from flask_geneva.dsl.definitions import DecoratedStep
from flask_geneva.dsl.definitions import StepSpec
from flask_geneva.dsl.evolution import RemovedStep
from flask_geneva.dsl.evolution import RenamedStep
from flask_geneva.dsl.evolution import declare_removed
from flask_geneva.dsl.evolution import declare_renamed
from flask_geneva.dsl.option_hints import LIMIT_SETTING_NOTES
from flask_geneva.dsl.option_hints import unknown_options_message
from flask_geneva.dsl.options import UNSET
from flask_geneva.dsl.options import make_spec
from flask_geneva.dsl.options import step_label
from flask_geneva.dsl.signatures import body_problem
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import Action

__all__ = ["resumable_step", "step"]

#: The options only ``resumable_step`` takes (R-DEF-15).
_RESUMABLE_ONLY = ("max_iterations", "max_runtime")


def _caller_location(depth: int) -> tuple[str, int]:
    """Return ``(file, line)`` of the frame ``depth`` levels above the caller."""
    frame = sys._getframe(depth + 1)
    return frame.f_code.co_filename, frame.f_lineno


def _body_location(func: Callable[..., Any]) -> tuple[str, int] | None:
    code = getattr(inspect.unwrap(func), "__code__", None)
    if code is None:
        return None
    return code.co_filename, code.co_firstlineno


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
        raise StepConfigurationError(f"{decorator} {step_label(name)}: {problem}")
    spec = make_spec(
        label=step_label(name),
        name=name,
        method_name=func.__name__,
        body=None,
        body_location=_body_location(func),
        definition_location=location,
        resumable=resumable,
        options=options,
    )
    setattr(func, STEP_MARK, spec)
    _record_in_class_body(func, spec)
    return func


_decorated_keys = itertools.count(1)


def _record_in_class_body(func: Callable[..., Any], spec: StepSpec) -> None:
    """Record ``@step`` in the namespace of the class body defining ``func``.

    The class body is the frame a few levels up whose namespace has the
    ``__qualname__`` of ``func``'s class; a function decorated elsewhere
    (defined outside the class, or a lambda) is not recorded. The collector
    then refuses a later definition that replaced it (R-DEF-02).
    """
    owner, _, attribute = func.__qualname__.rpartition(".")
    if not owner or not attribute.isidentifier():
        return
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return
        namespace = frame.f_locals
        if namespace.get("__qualname__") == owner and "__module__" in namespace:
            key = f"__geneva_decorated_step_{next(_decorated_keys)}__"
            namespace[key] = DecoratedStep(attribute, spec)
            return
        frame = frame.f_back


def _anonymous(
    body: Callable[..., Any] | str | None,
    options: dict[str, Any],
    location: tuple[str, int],
    resumable: bool,
) -> StepSpec:
    raw_name = options.pop("name", None)
    name = None if raw_name is None else str(raw_name)
    label = step_label(name)
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
    return make_spec(
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
    _keyword = "step"

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
        max_reattempts: int | None = UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        wait_for: object = None,
        wait_timeout: timedelta | float | None = None,
        on_wait_timeout: str | None = None,
        limit: object = None,
        wait_for_children: object = None,
        on_child_failure: str | None = None,
        timeout: timedelta | float | None = None,
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
        max_reattempts: int | None = UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        wait_for: object = None,
        wait_timeout: timedelta | float | None = None,
        on_wait_timeout: str | None = None,
        limit: object = None,
        wait_for_children: object = None,
        on_child_failure: str | None = None,
        timeout: timedelta | float | None = None,
        **unknown: Any,
    ) -> Any:
        self._check_keywords(unknown, f"@{self._keyword}")
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
            "priority": priority,
            "wait_for": wait_for,
            "wait_timeout": wait_timeout,
            "on_wait_timeout": on_wait_timeout,
            "limit": limit,
            "wait_for_children": wait_for_children,
            "on_child_failure": on_child_failure,
            "timeout": timeout,
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
        max_reattempts: int | None = UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        wait_for: object = None,
        wait_timeout: timedelta | float | None = None,
        on_wait_timeout: str | None = None,
        limit: object = None,
        wait_for_children: object = None,
        on_child_failure: str | None = None,
        timeout: timedelta | float | None = None,
        **unknown: Any,
    ) -> StepSpec:
        """Declare a step with an inline body or a method-name body (SPEC §15.2).

        Assign the result to any class attribute; the collector registers it where
        the attribute appears in the class body, named ``step_<N>`` unless ``name``
        is given (R-DEF-03).

        Args:
            body: A callable ``(self)`` or the name of a workflow method.
            name: Optional step name (default: anonymous).
            wait, skip_if, run_if, on_exception, max_reattempts, terminal_action,
                before, after, job_options, priority, wait_for, wait_timeout,
                on_wait_timeout, limit, wait_for_children, on_child_failure,
                timeout: As for :data:`step`.

        Raises:
            StepConfigurationError: No body (R-DEF-01), any invalid option, or
                an unknown one (R-DEF-23).
        """
        self._check_keywords(unknown, f"{self._keyword}.anonymous")
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
            "priority": priority,
            "wait_for": wait_for,
            "wait_timeout": wait_timeout,
            "on_wait_timeout": on_wait_timeout,
            "limit": limit,
            "wait_for_children": wait_for_children,
            "on_child_failure": on_child_failure,
            "timeout": timeout,
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
            StepConfigurationError: Invalid ``count``, ``name`` given, any invalid
                option, or an unknown one (R-DEF-23).
        """
        self._check_keywords(options, f"{self._keyword}.repeat")
        full = self._defaults() | options
        return _repeat(count, body, full, _caller_location(1), self._resumable)

    def removed(self, name: str, /) -> RemovedStep:
        """Declare a gravestone for a deleted step (issue 19, R-EVO-01..03).

        Write it in the class body where the step stood; no assignment is needed.
        Executions created under ``name`` by an older deploy are recorded skipped
        and the workflow continues with the next defined step after this
        position; a paused workflow whose ``next_step_name`` is ``name`` resumes
        there too. Delete the gravestone once
        ``MyWorkflow.removed_steps_in_flight()`` no longer lists it.

        Args:
            name: The removed step's name.

        Raises:
            StepConfigurationError: ``name`` is not a non-empty str or the call is
                not in a class body; when the class is created, ``name`` is still a
                defined step, is renamed too, or has two gravestones (R-EVO-05).
        """
        return declare_removed(name, depth=1)

    def renamed(self, old_name: str, /, *, to: str) -> RenamedStep:
        """Declare that the step ``old_name`` is now called ``to`` (R-EVO-04).

        Executions and ``next_step_name`` values carrying ``old_name`` run the
        step ``to``; the admin and the CLI show ``"to (was old_name)"``. A
        declaration of the class body rather than a step option, so that the
        history stays readable in one place next to the gravestones, and a rename
        outlives later edits of the step's own options.

        Args:
            old_name: The name older rows carry.
            to: The defined step that runs for them.

        Raises:
            StepConfigurationError: A name is not a non-empty str, the names are
                equal, or the call is not in a class body; when the class is
                created, ``old_name`` is still defined, ``to`` is not a defined
                step, or the renames form a chain or a cycle (R-EVO-05).
        """
        return declare_renamed(old_name, to, depth=1)

    def _defaults(self) -> dict[str, Any]:
        return {
            "name": None,
            "wait": None,
            "skip_if": None,
            "run_if": None,
            "on_exception": None,
            "max_reattempts": UNSET,
            "terminal_action": None,
            "before": None,
            "after": None,
            "job_options": None,
            "priority": None,
            "wait_for": None,
            "wait_timeout": None,
            "on_wait_timeout": None,
            "limit": None,
            "wait_for_children": None,
            "on_child_failure": None,
            "timeout": None,
        }

    def _check_keywords(self, options: Mapping[str, Any], what: str) -> None:
        """Refuse keywords the declaration does not take, naming the nearest.

        Raises:
            StepConfigurationError: Naming each unknown keyword, the nearest
                allowed one (or the declaration that takes it) and every allowed
                one (R-DEF-23).
        """
        allowed = self._defaults()
        unknown = set(options) - set(allowed)
        if unknown:
            elsewhere = {
                option: f"{option} is an option of @resumable_step"
                for option in _RESUMABLE_ONLY
                if option not in allowed
            } | LIMIT_SETTING_NOTES
            raise StepConfigurationError(
                unknown_options_message(what, unknown, allowed, elsewhere=elsewhere)
            )

    def __repr__(self) -> str:
        return "flask_geneva.step"


class _ResumableStepDecorator(_StepDecorator):
    """The ``resumable_step`` object; see :data:`resumable_step`."""

    _resumable = True
    _keyword = "resumable_step"

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
        max_reattempts: int | None = UNSET,
        terminal_action: Action | str | None = None,
        before: object = None,
        after: object = None,
        job_options: Mapping[str, Any] | None = None,
        priority: int | None = None,
        wait_for: object = None,
        wait_timeout: timedelta | float | None = None,
        on_wait_timeout: str | None = None,
        limit: object = None,
        wait_for_children: object = None,
        on_child_failure: str | None = None,
        timeout: timedelta | float | None = None,
        max_iterations: int | None = None,
        max_runtime: timedelta | float | None = None,
        **unknown: Any,
    ) -> Any:
        self._check_keywords(unknown, f"@{self._keyword}")
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
            "priority": priority,
            "wait_for": wait_for,
            "wait_timeout": wait_timeout,
            "on_wait_timeout": on_wait_timeout,
            "limit": limit,
            "wait_for_children": wait_for_children,
            "on_child_failure": on_child_failure,
            "timeout": timeout,
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
            StepConfigurationError: No body, any invalid option, or an unknown
                one (R-DEF-23).
        """
        self._check_keywords(options, f"{self._keyword}.anonymous")
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
#: after=None, job_options=None, priority=None, wait_for=None, wait_timeout=None,
#: on_wait_timeout=None)`` on a method ``(self)``; returns the original
#: function, marked with a :class:`StepSpec` under :data:`STEP_MARK`.
#:
#: ``wait``: ``timedelta`` or seconds, non-negative. ``skip_if``/``run_if``: None,
#: bool, method name or callable ``(self)``, not both. ``on_exception``: an action,
#: an :class:`ExceptionPolicy`, a callable ``(workflow, error)`` or a list of
#: policies. ``max_reattempts`` (positive int or None, default 100) and
#: ``terminal_action`` (pause/cancel/skip) only with the action ``reattempt``.
#: ``before``/``after``: name of an already-registered step, not both.
#: ``job_options``: mapping of queue/priority/wait/wait_until.
#: ``priority``: an int, the same as ``job_options={"priority": n}`` (higher runs
#: first; giving both with different values is refused, R-PRI-01).
#: ``wait_for``: a workflow-signal name, a ``SignalMatcher(name, where=...)`` or
#: an object with ``matches(signal)``: the step parks until a matching signal
#: arrives (after ``wait``), and its body reads it as ``self.received_signal``;
#: ``wait_timeout`` bounds the wait, ``on_wait_timeout`` (skip/cancel/pause) says
#: what then, else ``SignalWaitTimeout`` goes to the policies (R-WSIG-05..08).
#: ``limit``: a :class:`~flask_geneva.dsl.limits.Limit` or a list of limits
#: with distinct names, never a limit's name (R-LIM-03).
#: ``wait_for_children``: True or ``"all"``, ``"any"`` or a positive int N: the
#: step parks until that many of the workflow's children have settled
#: (finished, canceled or paused by an error); ``on_child_failure`` (``"fail"``,
#: the default, or ``"ignore"``) says whether a failed child then raises
#: ``ChildWorkflowFailed`` into the step's policies (R-CHD-21..23).
#: ``timeout``: a positive ``timedelta`` or seconds: one run of the body that
#: takes longer raises ``StepTimeout`` into the step's policies (Celery's soft
#: time limit in a prefork worker, R-STO-01..14).
#:
#: Raises StepConfigurationError for any invalid option, naming the value and the
#: allowed ones, and for an unknown keyword, naming the nearest option
#: (R-DEF-23). ``step.anonymous(body, **options)`` returns a :class:`StepSpec`;
#: ``step.repeat(n, body, **options)`` a list of n specs.
step = _StepDecorator()

#: Declare a resumable step on a method ``(self, it)`` (SPEC §10, R-DEF-15).
#:
#: Same keywords as :data:`step` plus ``max_iterations`` (positive int or None) and
#: ``max_runtime`` (positive ``timedelta`` or seconds, or None).
resumable_step = _ResumableStepDecorator()
