"""Exception policies: which action an error in a step leads to (SPEC §9).

This module is pure (no database, no Flask). It holds the value objects
(:class:`Action`, :class:`ExceptionPolicy`, :class:`PolicyList`) and the
class-level declaration helper :func:`on_exception`. Which errors a policy
captures is in :mod:`flask_geneva.policies.matchers`; picking the policy for an
error and deciding the action is in :mod:`flask_geneva.policies.resolution`.
Imperative handlers are run by the executor, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.backoff import BackoffStrategy
from flask_geneva.policies.backoff import coerce_wait
from flask_geneva.policies.matchers import describe_matcher
from flask_geneva.policies.matchers import matcher_matches
from flask_geneva.policies.matchers import normalize_matchers

__all__ = [
    "DEFAULT_MAX_REATTEMPTS",
    "DEFAULT_POLICY",
    "HANDLER_MARK",
    "REPORT_MODES",
    "Action",
    "ExceptionHandlerDecorator",
    "ExceptionPolicy",
    "PolicyList",
    "coerce_action",
    "describe_matcher",
    "on_exception",
]


class Action(StrEnum):
    """The action an exception policy takes (R-POL-01).

    Members compare equal to their lowercase string values, so ``"pause"`` and
    ``Action.PAUSE`` are interchangeable everywhere.

    .. versionadded:: 0.1
    """

    PAUSE = "pause"
    CANCEL = "cancel"
    REATTEMPT = "reattempt"
    SKIP = "skip"


#: Attribute holding the :class:`ExceptionPolicy` on an ``@on_exception`` handler.
HANDLER_MARK = "__geneva_exception_handler__"

#: Default cap of every reattempt policy when ``max_reattempts`` is omitted (R-POL-04).
DEFAULT_MAX_REATTEMPTS = 100

#: Allowed values of ``report`` (R-POL-02, R-REP-01).
REPORT_MODES: tuple[str, ...] = ("always", "never", "terminal_only")

_TERMINAL_ACTIONS = (Action.PAUSE, Action.CANCEL, Action.SKIP)


class _Unset:
    """Sentinel type for "argument not given" (distinct from an explicit None)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unset>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Unset, ())


_UNSET: Any = _Unset()


def coerce_action(
    value: object,
    *,
    allowed: Iterable[Action] = tuple(Action),
    name: str = "action",
) -> Action:
    """Return ``value`` as an :class:`Action` (R-DEF-08, R-POL-02).

    Args:
        value: An :class:`Action` or its string value; one trailing ``"!"`` is
            tolerated (``"reattempt!"``, the gem's spelling).
        allowed: The actions accepted in this position, e.g. only pause/cancel/skip
            for ``terminal_action``.
        name: The option being validated, for the error message.

    Raises:
        StepConfigurationError: ``value`` is not one of ``allowed``; the message shows
            the value and lists the allowed actions.

    .. versionadded:: 0.1
    """
    allowed_actions = tuple(allowed)
    candidate: Action | None = None
    if isinstance(value, Action):
        candidate = value
    elif isinstance(value, str):
        text = value[:-1] if value.endswith("!") else value
        try:
            candidate = Action(text)
        except ValueError:
            candidate = None
    if candidate is not None and candidate in allowed_actions:
        return candidate
    choices = ", ".join(repr(action.value) for action in allowed_actions)
    raise StepConfigurationError(f"invalid {name} {value!r}: must be one of {choices}")


def _validate_report(report: object) -> str:
    if report not in REPORT_MODES:
        choices = ", ".join(repr(mode) for mode in REPORT_MODES)
        raise StepConfigurationError(
            f"invalid report {report!r}: must be one of {choices}"
        )
    return str(report)


def check_policy_elements(items: Iterable[object], *, what: str) -> None:
    """Refuse a policy list with an element that is no ExceptionPolicy (R-POL-30).

    Raises:
        StepConfigurationError: ``"<what> element #<index>: ..."``, ``what`` being
            the message's start (``"invalid exception policy list"``).
    """
    for index, item in enumerate(items):
        if not isinstance(item, ExceptionPolicy):
            raise StepConfigurationError(
                f"{what} element #{index}: {item!r} ({type(item).__name__}); "
                f"every element must be an ExceptionPolicy"
            )


def validate_max_reattempts(value: object, label: str | None = None) -> int | None:
    """Validate ``max_reattempts`` (None = unlimited) of a policy or a step (R-POL-02).

    Raises:
        StepConfigurationError: Not a positive int (bools too); the message starts
            with ``"<label>: "`` when a ``label`` (``"Step 'charge'"``) is given.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        prefix = "" if label is None else f"{label}: "
        raise StepConfigurationError(
            f"{prefix}invalid max_reattempts {value!r}: must be a positive integer "
            f"or None (None = unlimited)"
        )
    return value


@dataclass(frozen=True, eq=False, init=False, repr=False)
class ExceptionPolicy:
    """An immutable rule mapping exceptions to an action (SPEC §9.1).

    Two modes (R-POL-01): *declarative*, with an ``action`` (pause, cancel,
    reattempt, skip), or *imperative*, with a ``handler`` that is called with the
    workflow and the error and steers the workflow with flow-control methods.
    Policies are frozen and compare by identity, so one instance can be reused as a
    module constant across steps and workflow classes (R-POL-08).

    Args:
        action: An :class:`Action` or action string (trailing ``!`` tolerated).
        matching: One matcher or a sequence of matchers (R-POL-05): an ``Exception``
            subclass (matches subclasses too), a dotted import path string resolved
            lazily at match time, or a predicate ``(error) -> bool``. None or empty
            makes the policy blanket (R-POL-06).
        wait: Delay before the reattempt, a ``timedelta`` or seconds, or a
            backoff strategy (:class:`~flask_geneva.policies.backoff.Backoff`, or a
            callable ``(attempt, error) -> timedelta``, R-POL-50); only with
            ``reattempt``.
        max_reattempts: Consecutive reattempts allowed before ``terminal_action``
            applies; a positive int, or None for unlimited; only with ``reattempt``.
            Omitted: 100 for reattempt policies (R-POL-04), None otherwise.
        terminal_action: Action once ``max_reattempts`` is used up: pause (default),
            cancel or skip; a non-default value only with ``reattempt``.
        report: ``"always"`` (default), ``"never"`` or ``"terminal_only"`` (R-REP-01).
        handler: Imperative handler: a callable ``(workflow, error)`` or the name of
            a workflow method ``(self, error)`` looked up on the instance at run time.

    Attributes:
        action: The :class:`Action`, None for imperative policies.
        wait: The reattempt delay as ``timedelta`` or backoff strategy, or None.
        max_reattempts: The cap, None for unlimited or for non-reattempt policies.
        terminal_action: The :class:`Action` applied when the cap is reached.
        report: The report mode string.
        matchers: Tuple of the matchers given (classes, strings, callables).
        handler: The handler callable or method name, None for declarative policies.

    Raises:
        StepConfigurationError: Neither or both of ``action``/``handler``; an invalid
            action, terminal action, report mode or matcher; ``wait``,
            ``max_reattempts`` or a non-default ``terminal_action`` with a
            non-reattempt action or with a handler; a non-positive or non-int
            ``max_reattempts``; a negative ``wait`` (R-POL-02, R-POL-03, R-POL-05).

    .. versionadded:: 0.1
    """

    action: Action | None
    wait: timedelta | BackoffStrategy | None
    max_reattempts: int | None
    terminal_action: Action
    report: str
    matchers: tuple[object, ...]
    handler: Callable[..., Any] | str | None

    def __init__(
        self,
        action: Action | str | None = None,
        *,
        matching: object = None,
        wait: timedelta | float | BackoffStrategy | Callable[..., Any] | None = None,
        max_reattempts: int | None = _UNSET,
        terminal_action: Action | str = Action.PAUSE,
        report: str = "always",
        handler: Callable[..., Any] | str | None = None,
    ) -> None:
        matchers = normalize_matchers(matching)
        report_mode = _validate_report(report)
        terminal = coerce_action(
            terminal_action, allowed=_TERMINAL_ACTIONS, name="terminal_action"
        )
        explicit_max = max_reattempts is not _UNSET
        if handler is not None:
            coerced_action = None
            coerced_wait = None
            cap = None
            self._check_imperative(action, wait, max_reattempts, terminal, handler)
        elif action is None:
            raise StepConfigurationError(
                "ExceptionPolicy: either an action or a handler is required "
                "(action: one of 'pause', 'cancel', 'reattempt', 'skip')"
            )
        else:
            coerced_action = coerce_action(action)
            is_reattempt = coerced_action is Action.REATTEMPT
            if wait is not None and not is_reattempt:
                raise StepConfigurationError(
                    f"ExceptionPolicy: wait={wait!r} is only allowed with action "
                    f"'reattempt', not {coerced_action.value!r}"
                )
            if explicit_max and max_reattempts is not None and not is_reattempt:
                raise StepConfigurationError(
                    f"ExceptionPolicy: max_reattempts={max_reattempts!r} is only "
                    f"allowed with action 'reattempt', not {coerced_action.value!r}"
                )
            if terminal is not Action.PAUSE and not is_reattempt:
                raise StepConfigurationError(
                    f"ExceptionPolicy: terminal_action={terminal.value!r} is only "
                    f"allowed with action 'reattempt', not {coerced_action.value!r}"
                )
            try:
                coerced_wait = coerce_wait(wait)
            except StepConfigurationError as exc:
                raise StepConfigurationError(f"ExceptionPolicy: {exc}") from exc
            if not is_reattempt:
                cap = None
            elif explicit_max:
                cap = validate_max_reattempts(max_reattempts)
            else:
                cap = DEFAULT_MAX_REATTEMPTS
        set_field = object.__setattr__
        set_field(self, "action", coerced_action)
        set_field(self, "wait", coerced_wait)
        set_field(self, "max_reattempts", cap)
        set_field(self, "terminal_action", terminal)
        set_field(self, "report", report_mode)
        set_field(self, "matchers", matchers)
        set_field(self, "handler", handler)

    @staticmethod
    def _check_imperative(
        action: object,
        wait: object,
        max_reattempts: object,
        terminal: Action,
        handler: object,
    ) -> None:
        if not (callable(handler) or (isinstance(handler, str) and handler)):
            raise StepConfigurationError(
                f"ExceptionPolicy: invalid handler {handler!r}: must be a callable "
                f"(workflow, error) or a method name"
            )
        given = []
        if action is not None:
            given.append(f"action={action!r}")
        if wait is not None:
            given.append(f"wait={wait!r}")
        if max_reattempts is not _UNSET and max_reattempts is not None:
            given.append(f"max_reattempts={max_reattempts!r}")
        if terminal is not Action.PAUSE:
            given.append(f"terminal_action={terminal.value!r}")
        if given:
            raise StepConfigurationError(
                f"ExceptionPolicy: a handler cannot be combined with "
                f"{', '.join(given)}; only matching and report are allowed with a "
                f"handler (the handler decides the action)"
            )

    @property
    def is_declarative(self) -> bool:
        """Whether the policy has an action rather than a handler (R-POL-07)."""
        return self.handler is None

    @property
    def is_specific(self) -> bool:
        """Whether the policy has matchers (R-POL-06)."""
        return bool(self.matchers)

    @property
    def is_blanket(self) -> bool:
        """Whether the policy has no matchers and so captures every exception."""
        return not self.matchers

    @property
    def policies(self) -> list[ExceptionPolicy]:
        """The policy as a one-element list, like :attr:`PolicyList.policies`."""
        return [self]

    @property
    def handler_name(self) -> str | None:
        """The handler's qualified name (or method name), None if declarative."""
        if self.handler is None:
            return None
        if isinstance(self.handler, str):
            return self.handler
        return describe_matcher(self.handler)

    def captures(self, error: BaseException) -> bool:
        """Return whether this policy applies to ``error`` (R-POL-06).

        Blanket policies capture everything; specific ones capture when any matcher
        matches. Never raises: an unresolvable string matcher or a raising predicate
        counts as no match (R-POL-05).
        """
        if not self.matchers:
            return True
        return any(matcher_matches(matcher, error) for matcher in self.matchers)

    def matched_by(self, error: BaseException) -> str | None:
        """Return the description of the first matcher capturing ``error``.

        Returns None for a blanket policy and when nothing matches. Used for the
        ``matched_by`` field of policy decision records (R-PDR-01).
        """
        for matcher in self.matchers:
            if matcher_matches(matcher, error):
                return describe_matcher(matcher)
        return None

    def invoke_handler(self, workflow: object, error: BaseException) -> Any:
        """Call the imperative handler for ``error`` (R-POL-11).

        A callable handler is called as ``handler(workflow, error)``; a method-name
        handler as ``getattr(workflow, name)(error)``, so a subclass override of the
        method takes effect. Whatever the handler raises propagates (flow-control
        signals included); the executor interprets it.

        Raises:
            TypeError: The policy is declarative (has no handler).
        """
        if self.handler is None:
            raise TypeError("invoke_handler() called on a declarative ExceptionPolicy")
        if isinstance(self.handler, str):
            return getattr(workflow, self.handler)(error)
        return self.handler(workflow, error)

    def __repr__(self) -> str:
        parts: list[str] = []
        if self.action is not None:
            parts.append(repr(self.action.value))
        if self.matchers:
            names = ", ".join(describe_matcher(matcher) for matcher in self.matchers)
            parts.append(f"matching=({names})")
        if self.wait is not None:
            parts.append(f"wait={self.wait!r}")
        if self.action is Action.REATTEMPT:
            parts.append(f"max_reattempts={self.max_reattempts!r}")
            parts.append(f"terminal_action={self.terminal_action.value!r}")
        if self.handler is not None:
            parts.append(f"handler={self.handler_name}")
        if self.report != "always":
            parts.append(f"report={self.report!r}")
        return f"ExceptionPolicy({', '.join(parts)})"

    def _with_handler(self, handler: Callable[..., Any] | str) -> ExceptionPolicy:
        """Return a copy of this imperative policy with another handler."""
        return ExceptionPolicy(
            matching=self.matchers, report=self.report, handler=handler
        )


#: The policy used when nothing else captures an error (R-POL-40 step 4).
DEFAULT_POLICY = ExceptionPolicy(Action.PAUSE)


@dataclass(frozen=True, eq=False, init=False)
class PolicyList:
    """A step-level list of policies walked in order (R-POL-30..33).

    Args:
        policies: The policies, in precedence order (put specific ones first).

    Attributes:
        policies: Tuple of :class:`ExceptionPolicy`.
        cap: The minimum of the finite ``max_reattempts`` in the list, or None when
            no policy has one (R-POL-32).

    Raises:
        StepConfigurationError: An element is not an :class:`ExceptionPolicy`.

    .. versionadded:: 0.1
    """

    policies: tuple[ExceptionPolicy, ...]
    cap: int | None

    def __init__(self, policies: Iterable[ExceptionPolicy]) -> None:
        items = tuple(policies)
        check_policy_elements(items, what="invalid exception policy list")
        caps = [p.max_reattempts for p in items if p.max_reattempts is not None]
        object.__setattr__(self, "policies", items)
        object.__setattr__(self, "cap", min(caps) if caps else None)

    def first_capturing(
        self, error: BaseException
    ) -> tuple[int, ExceptionPolicy] | None:
        """Return ``(index, policy)`` of the first capturing policy (R-POL-30).

        Returns None when no policy in the list captures it (R-POL-31).
        """
        for index, policy in enumerate(self.policies):
            if policy.captures(error):
                return index, policy
        return None

    def __len__(self) -> int:
        return len(self.policies)

    def __iter__(self) -> Any:
        return iter(self.policies)


class ExceptionHandlerDecorator:
    """What :func:`on_exception` returns without an action: a method decorator.

    Applying it to a method ``(self, error)`` marks the method as a class-level
    imperative handler (attribute ``__geneva_exception_handler__``, an
    :class:`ExceptionPolicy` whose handler is the method *name*, so subclass
    overrides take effect) and returns the method unchanged. The undecorated object
    itself is not a policy: the collector rejects it in ``exception_policies``.

    .. versionadded:: 0.1
    """

    def __init__(self, matchers: tuple[object, ...], report: str) -> None:
        self.matchers = matchers
        self.report = report

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """Mark ``func`` as a class-level imperative exception handler (R-POL-43).

        Raises:
            StepConfigurationError: ``func`` is not a plain function.
        """
        name = getattr(func, "__name__", None)
        if not callable(func) or isinstance(func, type) or not isinstance(name, str):
            raise StepConfigurationError(
                f"on_exception(...) without an action decorates a method "
                f"(self, error); got {func!r}"
            )
        policy = ExceptionPolicy(
            matching=self.matchers, report=self.report, handler=name
        )
        try:
            setattr(func, HANDLER_MARK, policy)
        except AttributeError as exc:
            raise StepConfigurationError(
                f"on_exception(...) cannot mark {func!r}: decorate a plain function"
            ) from exc
        return func

    def __repr__(self) -> str:
        names = ", ".join(describe_matcher(matcher) for matcher in self.matchers)
        return f"on_exception({names}) handler decorator"


def _is_action_value(value: object) -> bool:
    if isinstance(value, Action):
        return True
    if isinstance(value, str):
        text = value[:-1] if value.endswith("!") else value
        return text in {action.value for action in Action}
    return False


def on_exception(
    *matchers: object,
    action: Action | str | None = None,
    wait: timedelta | float | BackoffStrategy | Callable[..., Any] | None = None,
    max_reattempts: int | None = _UNSET,
    terminal_action: Action | str = Action.PAUSE,
    report: str = "always",
) -> ExceptionPolicy | ExceptionHandlerDecorator:
    """Declare a class-level exception policy (SPEC §15.2, R-POL-43).

    With an action (the first positional argument equal to an action name or
    :class:`Action`, or ``action=``) this returns a declarative
    :class:`ExceptionPolicy` for a class's ``exception_policies`` list (or for
    step-level use)::

        exception_policies = [
            on_exception(TimeoutError, action="reattempt", wait=10, max_reattempts=3),
            on_exception("cancel"),  # blanket
        ]

    Without an action it returns an :class:`ExceptionHandlerDecorator` for a method
    ``(self, error)``::

        @on_exception(RateLimited, report="never")
        def on_rate_limit(self, error): ...

    Args:
        *matchers: Exception classes, dotted-path strings or predicates (R-POL-05);
            none means blanket. A first string equal to an action name is the action.
        action: The action, as an alternative to passing it first positionally.
        wait: Reattempt delay (``timedelta``, seconds or a backoff strategy,
            R-POL-50); only with ``reattempt``.
        max_reattempts: Positive int or None (unlimited); default 100 for
            ``reattempt`` (R-POL-04).
        terminal_action: pause (default), cancel or skip; only with ``reattempt``.
        report: ``"always"``, ``"never"`` or ``"terminal_only"``.

    Raises:
        StepConfigurationError: The action is given both positionally and by keyword,
            an action name appears after the first position, ``wait``/
            ``max_reattempts``/``terminal_action`` are given without an action, or any
            :class:`ExceptionPolicy` validation fails.

    .. versionadded:: 0.1
    """
    rest = list(matchers)
    if rest and _is_action_value(rest[0]):
        if action is not None:
            raise StepConfigurationError(
                f"on_exception: action given twice, positionally ({rest[0]!r}) and as "
                f"action={action!r}; pass it once"
            )
        action = rest.pop(0)  # type: ignore[assignment]  # checked by _is_action_value
    for item in rest:
        if _is_action_value(item):
            raise StepConfigurationError(
                f"on_exception: action {item!r} must be the first positional argument "
                f"(or action=); matchers follow it"
            )
    if action is not None:
        return ExceptionPolicy(
            action,
            matching=tuple(rest) or None,
            wait=wait,
            max_reattempts=max_reattempts,
            terminal_action=terminal_action,
            report=report,
        )
    given = []
    if wait is not None:
        given.append(f"wait={wait!r}")
    if max_reattempts is not _UNSET:
        given.append(f"max_reattempts={max_reattempts!r}")
    terminal = coerce_action(
        terminal_action, allowed=_TERMINAL_ACTIONS, name="terminal_action"
    )
    if terminal is not Action.PAUSE:
        given.append(f"terminal_action={terminal_action!r}")
    if given:
        raise StepConfigurationError(
            f"on_exception: {', '.join(given)} requires an action "
            f"('pause', 'cancel', 'reattempt', 'skip'); a handler decides the action "
            f"itself"
        )
    return ExceptionHandlerDecorator(
        normalize_matchers(tuple(rest)), _validate_report(report)
    )
