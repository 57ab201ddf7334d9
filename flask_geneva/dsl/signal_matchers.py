"""What a ``wait_for`` step waits for: workflow-signal matchers (R-WSIG-05..07).

A *workflow signal* is an external event sent to one workflow
(``workflow.signal("payment_confirmed", payload)``). A step declared with
``@step(wait_for=...)`` parks until a matching one arrives. ``wait_for`` takes:

- a signal name (``"payment_confirmed"``);
- a :class:`SignalMatcher` (a name and an optional ``where(self, payload) ->
  bool`` predicate evaluated on the workflow);
- any object with a ``matches(signal) -> bool`` method (it sees the stored
  signal row: ``name``, ``payload``, ``idempotency_key``, ``created_at``).

Pure code: no database, no Flask. The blinker instrumentation signals of
:mod:`flask_geneva.signals` are something else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from datetime import timedelta
from typing import Any

from flask_geneva.core.durations import coerce_duration
from flask_geneva.core.stored_names import NAME_RULE
from flask_geneva.core.stored_names import fits_name_column
from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "WAIT_TIMEOUT_ACTIONS",
    "SignalMatcher",
    "WaitFor",
    "unawaited_signal_message",
    "validate_wait_options",
]

#: What ``on_wait_timeout`` may say (R-WSIG-41).
WAIT_TIMEOUT_ACTIONS = ("skip", "cancel", "pause")


class SignalMatcher:
    """Match workflow signals by name and, optionally, a predicate (R-WSIG-05).

    Args:
        name: The signal name, a non-empty str.
        where: None, or a callable ``(workflow, payload) -> bool`` (use a
            function or a lambda taking ``self`` first); a signal with the name
            matches only when it returns truthy. It runs when the signal is sent
            (for a parked step) and at the step's gate (for a buffered signal);
            an exception it raises never fails the sender: it surfaces on the
            workflow through the step's exception policies (R-WSIG-33).

    Raises:
        StepConfigurationError: ``name`` is not a non-empty str, or ``where`` is
            neither None nor callable.
    """

    __slots__ = ("name", "where")

    def __init__(
        self, name: str, *, where: Callable[[Any, Any], Any] | None = None
    ) -> None:
        if not fits_name_column(name):
            raise StepConfigurationError(
                f"SignalMatcher name must be {NAME_RULE}, got {name!r}"
            )
        if where is not None and not callable(where):
            raise StepConfigurationError(
                f"SignalMatcher where= must be a callable (workflow, payload) -> "
                f"bool or None, got {where!r}"
            )
        self.name = name
        self.where = where

    def __repr__(self) -> str:
        if self.where is None:
            return f"SignalMatcher({self.name!r})"
        return f"SignalMatcher({self.name!r}, where={_describe(self.where)})"


@dataclass(frozen=True)
class WaitFor:
    """The normalized ``wait_for`` of a step (R-WSIG-05..07).

    Attributes:
        names: The signal names that can match (the store reads only those), or
            None when a custom matcher may match any name.
        description: How logs, errors and test helpers name what is awaited:
            the signal name, or the matcher's repr.
        matcher: The :class:`SignalMatcher` or custom object given.
    """

    names: tuple[str, ...] | None
    description: str
    matcher: Any

    def matches(self, workflow: Any, signal: Any) -> bool:
        """Tell whether ``signal`` (a stored row) is what the step waits for.

        Raises:
            Exception: Whatever a ``where`` predicate or custom ``matches``
                raises, unchanged (the caller decides: the sender stores it,
                the gate hands it to the exception policies, R-WSIG-33).
        """
        matcher = self.matcher
        if isinstance(matcher, SignalMatcher):
            if signal.name != matcher.name:
                return False
            predicate = matcher.where
            return predicate is None or bool(predicate(workflow, signal.payload))
        return bool(matcher.matches(signal))


def unawaited_signal_message(workflow_cls: Any, name: str) -> str | None:
    """Why no step of ``workflow_cls`` can claim a signal ``name``, or None (R-WSIG-73).

    The one check behind ``workflow.signal()``'s warning, the admin's flash and
    ``flask geneva signal``'s note (R-WSIG-60, R-WSIG-68): a misspelt name is
    stored and stays pending unseen otherwise.

    Args:
        workflow_cls: The workflow's class, or None when no class is registered
            for its stored type (nothing is said then, R-WSIG-72).
        name: The signal name.

    Returns:
        ``"no step of <type> waits for '<name>'; its steps wait for '<a>',
        '<b>'"`` (the names sorted), ``"no step of <type> waits for a signal"``,
        or None when a step waits for ``name``, a custom matcher may take any
        name, or ``workflow_cls`` is None.
    """
    if workflow_cls is None:
        return None
    awaited: set[str] = set()
    for step in workflow_cls.step_collection().ordered:
        if step.wait_for is None:
            continue
        if step.wait_for.names is None:
            return None
        awaited.update(step.wait_for.names)
    if name in awaited:
        return None
    workflow_type = workflow_cls.__geneva_type__
    if not awaited:
        return f"no step of {workflow_type} waits for a signal"
    return (
        f"no step of {workflow_type} waits for {name!r}; its steps wait for "
        f"{', '.join(repr(n) for n in sorted(awaited))}"
    )


def _describe(value: Any) -> str:
    return getattr(value, "__qualname__", None) or repr(value)


def _wait_for(value: Any, label: str) -> WaitFor:
    if isinstance(value, str):
        if not fits_name_column(value):
            raise StepConfigurationError(
                f"{label}: invalid wait_for {value!r}: a signal name is "
                f"{NAME_RULE} (no signal could have this one)"
            )
        return WaitFor((value,), value, SignalMatcher(value))
    if isinstance(value, SignalMatcher):
        return WaitFor((value.name,), value.name, value)
    if callable(getattr(value, "matches", None)):
        return WaitFor(None, repr(value), value)
    raise StepConfigurationError(
        f"{label}: invalid wait_for {value!r} ({type(value).__name__}): must be a "
        "signal name (str), a SignalMatcher(name, where=...), or an object with "
        f"a matches(signal) -> bool method{_wait_hint(value)}"
    )


def _wait_hint(value: Any) -> str:
    """Point a duration or time given to ``wait_for`` at ``wait`` (R-DEF-22).

    Returns:
        ``"; ..."`` naming ``wait=<value>`` for a ``timedelta`` or a number of
        seconds, ``job_options={'wait_until': <value>}`` for a ``datetime``;
        else ``""``.
    """
    if isinstance(value, timedelta) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    ):
        literal = repr(value).removeprefix("datetime.")
        return (
            "; wait_for waits for a workflow signal: to delay the step by a "
            f"fixed time, use wait={literal}"
        )
    if isinstance(value, datetime):
        return (
            "; wait_for waits for a workflow signal: to run the step no earlier "
            f"than a time, use job_options={{'wait_until': {value!r}}} (wait= "
            "takes a duration)"
        )
    return ""


def validate_wait_options(
    options: dict[str, Any], label: str
) -> tuple[WaitFor | None, timedelta | None, str | None]:
    """Validate ``wait_for``, ``wait_timeout`` and ``on_wait_timeout`` (R-WSIG-05..08).

    Args:
        options: The step declaration's keywords (missing keys count as None).
        label: How messages name the step.

    Returns:
        ``(wait_for, wait_timeout, on_wait_timeout)``, normalized.

    Raises:
        StepConfigurationError: An invalid value or combination, naming the
            value and the option to use instead: ``wait_timeout`` or
            ``on_wait_timeout`` without ``wait_for``, ``on_wait_timeout``
            without ``wait_timeout``, a non-positive ``wait_timeout``, an
            ``on_wait_timeout`` other than skip/cancel/pause.
    """
    raw_wait_for = options.get("wait_for")
    raw_timeout = options.get("wait_timeout")
    action = options.get("on_wait_timeout")
    if raw_wait_for is None:
        if raw_timeout is not None or action is not None:
            option = "wait_timeout" if raw_timeout is not None else "on_wait_timeout"
            raise StepConfigurationError(
                f"{label}: {option} needs wait_for (the signal to wait for); to "
                "delay a step by a fixed time use wait=..."
            )
        return None, None, None
    wait_for = _wait_for(raw_wait_for, label)
    timeout = None
    if raw_timeout is not None:
        try:
            timeout = coerce_duration(raw_timeout, name="wait_timeout", positive=True)
        except (TypeError, ValueError) as exc:
            raise StepConfigurationError(
                f"{label}: invalid wait_timeout {raw_timeout!r}: must be a positive "
                "timedelta or number of seconds (at most 100 years), or None to "
                "wait without a limit"
            ) from exc
    if action is not None:
        if timeout is None:
            raise StepConfigurationError(
                f"{label}: on_wait_timeout={action!r} needs wait_timeout (how long "
                "to wait)"
            )
        text = str(getattr(action, "value", action)).rstrip("!")
        if text not in WAIT_TIMEOUT_ACTIONS:
            hint = (
                "; to retry, leave on_wait_timeout unset and give the step "
                "on_exception=ExceptionPolicy('reattempt', matching=SignalWaitTimeout)"
                if text == "reattempt"
                else ""
            )
            raise StepConfigurationError(
                f"{label}: invalid on_wait_timeout {action!r}: must be one of "
                f"{', '.join(map(repr, WAIT_TIMEOUT_ACTIONS))} or None (the "
                f"timeout then raises SignalWaitTimeout into the exception "
                f"policies){hint}"
            )
        action = text
    return wait_for, timeout, action
