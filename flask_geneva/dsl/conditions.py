"""Cancel and skip conditions: declaration and evaluation (SPEC §5.4).

A condition is a callable ``(workflow) -> truthy``, the name of a workflow method
(called on the instance, so subclass overrides win), or a constant counted by its
truthiness. Exceptions raised by a condition propagate to the caller (the executor
handles them through exception policies, R-EXE-23). Pure code: no database, no Flask.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from typing import TypeVar

from flask_geneva.dsl.signatures import condition_problem
from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "CANCEL_CONDITION_MARK",
    "cancel_if",
    "describe_condition",
    "evaluate_cancel_conditions",
    "evaluate_condition",
]

#: Attribute set to True on methods decorated with :func:`cancel_if`.
CANCEL_CONDITION_MARK = "__geneva_cancel_condition__"

_F = TypeVar("_F", bound=Callable[..., Any])


def cancel_if(func: _F) -> _F:
    """Mark a predicate method ``(self) -> truthy`` as a cancel condition (R-CND-01).

    Used bare (``@cancel_if``). The collector registers the method by *name* in
    class-body order, after the parent's conditions (R-INH-04); the method itself is
    returned unchanged.

    Raises:
        StepConfigurationError: Applied to something that is not a plain function,
            called with arguments (``@cancel_if(...)``), or applied to an async
            function or one that cannot be called as ``(self)`` (R-DEF-19/20).

    .. versionadded:: 0.1
    """
    name = getattr(func, "__name__", None)
    if not callable(func) or isinstance(func, type) or not isinstance(name, str):
        raise StepConfigurationError(
            f"@cancel_if decorates a predicate method (self) -> bool and takes no "
            f"arguments; got {func!r}"
        )
    problem = condition_problem(func, option="@cancel_if")
    if problem is not None:
        raise StepConfigurationError(problem)
    try:
        setattr(func, CANCEL_CONDITION_MARK, True)
    except AttributeError as exc:
        raise StepConfigurationError(
            f"@cancel_if cannot mark {func!r}: decorate a plain function"
        ) from exc
    return func


def evaluate_condition(workflow: object, condition: object) -> bool:
    """Evaluate one condition against ``workflow`` (R-CND-01, R-CND-02).

    Args:
        workflow: The workflow instance.
        condition: None (False), a bool (itself), a method name (the method is
            called with no arguments; a non-callable attribute counts by its
            truthiness), a callable (called with the workflow), or any other constant
            (its truthiness).

    Returns:
        The truthiness of the condition's value.

    Raises:
        Exception: Whatever the condition raises, unchanged.

    .. versionadded:: 0.1
    """
    if condition is None or isinstance(condition, bool):
        return bool(condition)
    if isinstance(condition, str):
        value = getattr(workflow, condition)
        return bool(value() if callable(value) else value)
    if callable(condition):
        return bool(condition(workflow))
    return bool(condition)


def evaluate_cancel_conditions(
    workflow: object, conditions: Iterable[object]
) -> object | None:
    """Return the first condition that holds for ``workflow``, or None (R-CND-01).

    Conditions are evaluated in order and evaluation stops at the first truthy one.

    Args:
        workflow: The workflow instance.
        conditions: The class's cancel conditions, parent's first
            (``WorkflowDefinitions.cancel_conditions``).

    Returns:
        The condition object itself (pass it to :func:`describe_condition` for
        records, R-PDR-04), or None when none holds.

    Raises:
        Exception: Whatever a condition raises, unchanged.

    .. versionadded:: 0.1
    """
    for condition in conditions:
        if evaluate_condition(workflow, condition):
            return condition
    return None


def describe_condition(condition: object) -> str:
    """Return a short description of a condition for records and logs (R-PDR-04).

    Method names are returned as is, callables by their qualified name (for example
    ``"NewsletterWorkflow.<lambda>"``), constants by ``repr``.

    .. versionadded:: 0.1
    """
    if isinstance(condition, str):
        return condition
    if callable(condition):
        qualname = getattr(condition, "__qualname__", None)
        if isinstance(qualname, str):
            return qualname
    return repr(condition)
