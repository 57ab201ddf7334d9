"""The step plan of a workflow's page in words (R-ADM-12, R-ADM-43, R-ADM-122).

Pure code: no Flask, no database. :func:`plan_rows` turns a workflow, its class's
steps and each step's latest execution into the plan's rows: the step, its wait,
its condition, its exception policies, what else it was declared with (a
``wait_for`` and its timeout, children to wait for, limits, a timeout, a
resumable step's bounds) and its marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flask_geneva.admin.presenters import describe_policy
from flask_geneva.admin.presenters import describe_policy_list
from flask_geneva.core.durations import format_interval
from flask_geneva.policies.exception_policy import DEFAULT_POLICY

__all__ = [
    "ENDED_STATES",
    "plan_rows",
    "policy_summary",
    "step_settings",
]

#: Workflow states after which no step runs: no next step, nothing upcoming.
ENDED_STATES = ("finished", "canceled")

_MARKERS = {"completed": "done", "skipped": "skipped", "failed": "failed"}


def plan_rows(
    workflow: Any,
    steps: Any,
    executions: Sequence[Any],
    *,
    reporter_configured: bool,
) -> list[dict[str, Any]]:
    """The step plan's rows (R-ADM-12).

    Args:
        workflow: The workflow (``state``, ``current_step_name``,
            ``next_step_name`` and its class's definitions are read).
        steps: The class's step collection, or None for a class no longer
            defined.
        executions: Each step name's latest execution (``step_name``,
            ``state``), oldest first.
        reporter_configured: Whether the app has a ``GENEVA_ERROR_REPORTER``
            (the policies say so, R-ADM-123).

    Returns:
        One dict per step: ``name``, ``wait`` (words or None), ``condition``,
        ``policy`` (lines), ``settings`` (lines, :func:`step_settings`),
        ``resumable`` and ``marker`` (done, skipped, failed, current, upcoming,
        not run, removed, no longer defined); steps that executed and are no
        longer defined follow the class's steps.
    """
    latest: dict[str, Any] = {}
    for execution in executions:
        # An execution under a renamed step's old name counts for the new step.
        resolved = steps.named(execution.step_name) if steps is not None else None
        latest[resolved.name if resolved else execution.step_name] = execution
    reference = workflow.current_step_name or workflow.next_step_name
    if steps is not None and steps.named(reference) is not None:
        reference = steps.named(reference).name
    ended = workflow.state in ENDED_STATES
    plan: list[dict[str, Any]] = []
    for definition in steps or ():
        execution = latest.get(definition.name)
        if definition.name == reference and not ended:
            marker = "current"
        elif execution is not None:
            marker = _MARKERS.get(execution.state, execution.state)
        elif ended:
            marker = "not run"  # nothing is upcoming once it ended (R-ADM-46)
        else:
            marker = "upcoming"
        plan.append(
            {
                "name": definition.name,
                "wait": format_interval(definition.wait) or None,
                "condition": definition.skip_condition_description() or "",
                "policy": policy_summary(
                    workflow, definition, reporter_configured=reporter_configured
                ),
                "settings": step_settings(definition),
                "resumable": definition.is_resumable,
                "marker": marker,
            }
        )
    defined = {entry["name"] for entry in plan}
    for name in latest:
        if name not in defined:
            plan.append(
                {
                    "name": name,
                    "wait": None,
                    "condition": "",
                    "policy": [],
                    "settings": [],
                    "resumable": False,
                    "marker": "removed"
                    if steps is not None and steps.is_removed(name)
                    else "no longer defined",
                }
            )
    return plan


def policy_summary(
    workflow: Any, definition: Any, *, reporter_configured: bool = True
) -> list[str]:
    """The step plan's policy column in words (R-ADM-12, R-ADM-43): the step's own
    policies, else the class-level ones that apply to it (R-POL-40), else the
    default (pause), each saying whether it reports as its decisions do
    (R-ADM-123)."""
    if definition.exception_policy is not None:
        return describe_policy_list(
            definition.exception_policy, reporter_configured=reporter_configured
        )
    definitions = getattr(type(workflow), "__geneva_definitions__", None)
    class_policies = getattr(definitions, "exception_policies", ())
    if class_policies:
        return [
            "class-level: "
            + describe_policy(policy, reporter_configured=reporter_configured)
            for policy in class_policies
        ]
    return [
        "default: "
        + describe_policy(DEFAULT_POLICY, reporter_configured=reporter_configured)
    ]


def step_settings(definition: Any) -> list[str]:
    """What else a step was declared with, one line each (R-ADM-122).

    In this order: what it waits for (``wait_for``, its ``wait_timeout`` and
    ``on_wait_timeout``), the children it waits for (``wait_for_children``,
    ``on_child_failure``), each limit (concurrency, rate, key, a slot held
    across a resumable chain), the body's ``timeout``, and a resumable step's
    ``max_iterations`` and ``max_runtime``. ``[]`` for a plain step.

    Example: ``["waits for signal payment_confirmed; times out after 2 d,
    then pause", "limit partner-api: 2 at once, 10 starts per 1 min, per
    key tenant_of", "timeout 30 s a run (then StepTimeout)"]``.

    Args:
        definition: A :class:`~flask_geneva.dsl.definitions.StepDefinition`.

    Returns:
        Plain-text lines (the template escapes them).
    """
    lines: list[str] = []
    wait_for = getattr(definition, "wait_for", None)
    if wait_for is not None:
        names = getattr(wait_for, "names", None)
        if names:
            what = "signal " + " or ".join(names)
        else:
            what = f"a signal matching {wait_for.description}"
        timeout = getattr(definition, "wait_timeout", None)
        if timeout is None:
            lines.append(f"waits for {what}; no timeout")
        else:
            then = getattr(definition, "on_wait_timeout", None)
            after = (
                f"then {then}"
                if then
                else "then SignalWaitTimeout goes to the exception policies"
            )
            lines.append(
                f"waits for {what}; times out after {format_interval(timeout)}, {after}"
            )
    children = getattr(definition, "wait_for_children", None)
    if children is not None and children is not False:
        if children is True or children == "all":
            count = "all its children"
        elif children == "any":
            count = "any one child"
        else:
            count = f"{children} children"
        failure = getattr(definition, "on_child_failure", "fail")
        lines.append(
            f"waits for {count} to settle; "
            + (
                "a failed child fails the step (ChildWorkflowFailed)"
                if failure == "fail"
                else "failed children are ignored"
            )
        )
    for limit in getattr(definition, "limits", ()):
        lines.append(_limit_words(limit))
    timeout = getattr(definition, "timeout", None)
    if timeout is not None:
        lines.append(f"timeout {format_interval(timeout)} a run (then StepTimeout)")
    if getattr(definition, "is_resumable", False):
        iterations = getattr(definition, "max_iterations", None)
        runtime = getattr(definition, "max_runtime", None)
        if iterations is not None:
            lines.append(f"at most {iterations} iterations an execution")
        if runtime is not None:
            lines.append(f"at most {format_interval(runtime)} an execution")
    return lines


def _limit_words(limit: Any) -> str:
    """``"limit partner-api: 2 at once, 10 starts per 1 min, per key tenant_of"``."""
    parts = []
    if limit.concurrency is not None:
        parts.append(f"{limit.concurrency} at once")
    if limit.rate is not None:
        parts.append(f"{limit.rate} starts per {format_interval(limit.per)}")
    key = limit.key
    if key is None:
        parts.append("one key for all")
    else:
        name = key if isinstance(key, str) else getattr(key, "__qualname__", "")
        name = str(name).rpartition("<locals>.")[2] or repr(key)
        parts.append(f"per key {name}")
    if limit.hold_across_chain:
        parts.append("slot held across the chain")
    return f"limit {limit.name}: {', '.join(parts)}"
