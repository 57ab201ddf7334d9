"""Resolving an exception policy for an error, and deciding the action (SPEC §9).

:func:`resolve_policy` picks the policy that applies to an error (R-POL-40..42),
:func:`decide` turns a declarative policy into a :class:`PolicyResult`
(R-POL-10/32) and :func:`should_report` applies the ``report`` setting
(R-REP-01). Pure: no database, no Flask; the executor runs imperative handlers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from flask_geneva.policies.backoff import BackoffStrategy
from flask_geneva.policies.backoff import jitter_key
from flask_geneva.policies.exception_policy import DEFAULT_POLICY
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import PolicyList

__all__ = [
    "PolicyResolution",
    "PolicyResult",
    "PolicySource",
    "decide",
    "resolve_policy",
    "should_report",
]


PolicySource = Literal[
    "step", "step_list", "class_specific", "class_blanket", "default"
]


@dataclass(frozen=True)
class PolicyResolution:
    """The policy chosen for an error, and why (R-POL-40, R-PDR-01).

    Attributes:
        policy: The applied :class:`ExceptionPolicy`.
        source: ``"step"``, ``"step_list"``, ``"class_specific"``,
            ``"class_blanket"`` or ``"default"``.
        index: Position in the step list (``step_list``) or in the class policy
            tuple (``class_*``); None for ``step`` and ``default``.
        matched_by: Description of the matcher that captured the error; None for
            blanket policies.
        cap: Reattempt cap to apply: the list cap for ``step_list`` (R-POL-32),
            otherwise the policy's own ``max_reattempts`` (R-POL-42).

    .. versionadded:: 0.1
    """

    policy: ExceptionPolicy
    source: PolicySource
    index: int | None
    matched_by: str | None
    cap: int | None


@dataclass(frozen=True)
class PolicyResult:
    """What the executor does with a handled error (SPEC §9.2).

    Attributes:
        action: ``"reattempt"``, ``"cancel"``, ``"skip"``, ``"pause"`` (or
            ``"finish"`` from an imperative handler).
        wait: Delay before a reattempt, None otherwise or for "at once".
        terminal: True when the reattempt cap was reached and the terminal action
            replaced the reattempt.
        report: The policy's report mode (R-REP-01).
        backoff: How a backoff strategy named the wait (e.g. ``"exponential
            backoff"``), None for a fixed wait (R-PDR-07).

    .. versionadded:: 0.1
    """

    action: str
    wait: timedelta | None
    terminal: bool
    report: str
    backoff: str | None = None


def resolve_policy(
    step_policy: ExceptionPolicy | PolicyList | None,
    class_policies: Sequence[ExceptionPolicy],
    error: BaseException,
) -> PolicyResolution:
    """Pick the policy that handles ``error`` (R-POL-40..42).

    Order: (1) the step-level policy or list, first capture in list order (a single
    policy is a one-element list); (2) class-level specific policies, most recently
    declared first; (3) class-level blanket policies, most recently declared first;
    (4) :data:`DEFAULT_POLICY` (pause, report always).

    Args:
        step_policy: The step's ``exception_policy`` (None when the step set none).
        class_policies: The class's policies in registration order, parent's first
            (``WorkflowDefinitions.exception_policies``).
        error: The exception raised by the step body or its conditions.

    Returns:
        A :class:`PolicyResolution`; never None.

    .. versionadded:: 0.1
    """
    if isinstance(step_policy, ExceptionPolicy):
        if step_policy.captures(error):
            return PolicyResolution(
                step_policy,
                "step",
                None,
                step_policy.matched_by(error),
                step_policy.max_reattempts,
            )
    elif isinstance(step_policy, PolicyList):
        found = step_policy.first_capturing(error)
        if found is not None:
            index, policy = found
            return PolicyResolution(
                policy, "step_list", index, policy.matched_by(error), step_policy.cap
            )
    ordered = list(enumerate(class_policies))[::-1]
    for index, policy in ordered:
        if policy.is_specific and policy.captures(error):
            return PolicyResolution(
                policy,
                "class_specific",
                index,
                policy.matched_by(error),
                policy.max_reattempts,
            )
    for index, policy in ordered:
        if policy.is_blanket:
            return PolicyResolution(
                policy, "class_blanket", index, None, policy.max_reattempts
            )
    return PolicyResolution(DEFAULT_POLICY, "default", None, None, None)


def decide(
    resolution: PolicyResolution,
    consecutive_reattempts: int,
    *,
    error: BaseException | None = None,
    workflow_id: object = None,
    step_name: str = "",
) -> PolicyResult:
    """Apply a declarative policy given the consecutive reattempt count (R-POL-10/32).

    A reattempt policy whose cap (``resolution.cap``) is reached, i.e.
    ``consecutive_reattempts >= cap``, yields its ``terminal_action`` with
    ``terminal=True`` and no wait. Otherwise the result is the policy's action (with
    its wait for reattempts) and ``terminal=False``. ``report`` is the policy's.
    A backoff strategy's wait is computed for attempt ``consecutive_reattempts +
    1``, with jitter keyed by ``(workflow_id, step_name, attempt)`` (R-POL-51/52).

    Args:
        resolution: From :func:`resolve_policy`.
        consecutive_reattempts: Count per R-CNT-01 (0 or more).
        error: The exception being handled (read by backoff strategies).
        workflow_id: The workflow's id, for the jitter key.
        step_name: The step's name, for the jitter key.

    Raises:
        TypeError: The resolved policy is imperative; the executor runs handlers.
        BackoffError: A backoff callable returned an unusable wait (R-POL-55);
            whatever the callable raised propagates too.

    .. versionadded:: 0.1
    """
    policy = resolution.policy
    if policy.action is None:
        raise TypeError(
            f"decide() needs a declarative policy; {policy!r} has a handler, which the "
            f"executor runs itself (R-POL-11)"
        )
    if policy.action is Action.REATTEMPT:
        cap = resolution.cap
        if cap is not None and consecutive_reattempts >= cap:
            return PolicyResult(
                action=policy.terminal_action.value,
                wait=None,
                terminal=True,
                report=policy.report,
            )
        if isinstance(policy.wait, BackoffStrategy):
            attempt = consecutive_reattempts + 1
            computed = policy.wait.compute(
                attempt, error, key=jitter_key(workflow_id, step_name, attempt)
            )
            return PolicyResult(
                action=policy.action.value,
                wait=computed.wait,
                terminal=False,
                report=policy.report,
                backoff=computed.label,
            )
        return PolicyResult(
            action=policy.action.value,
            wait=policy.wait,
            terminal=False,
            report=policy.report,
        )
    return PolicyResult(
        action=policy.action.value, wait=None, terminal=False, report=policy.report
    )


def should_report(result: PolicyResult) -> bool:
    """Return whether the error reporter is called for ``result`` (R-REP-01).

    True for report ``"always"``, and for ``"terminal_only"`` when the result is
    terminal; False for ``"never"``.

    .. versionadded:: 0.1
    """
    if result.report == "always":
        return True
    return result.report == "terminal_only" and result.terminal
