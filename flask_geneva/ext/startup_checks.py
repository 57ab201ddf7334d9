"""Start-up checks of the registered workflow classes (R-CFG-03, R-CFG-05, R-LIM-04).

Class definition already rejects what a decorator can see on its own (R-DEF-01..23).
What needs the finished class, a method named by a string, is checked here when
``init_app`` runs: a ``skip_if="no_such_method"`` or a body method that does not
exist, an ``async def`` or wrongly shaped method behind a name, a subclass
override that changed a step method's shape, and a class that declares no step
without being marked ``__geneva_abstract__ = True`` (R-CFG-05), a limit's
``key="no_such_method"``, and two different limits of one name, across classes
(R-LIM-04), and an ``admin_startable`` that is not a bool (R-ADM-200). Every
problem of every class is collected and reported in one
:class:`~flask_geneva.exceptions.GenevaConfigurationError`, so a deployment
fails at start-up instead of pausing workflows when the step runs. Pure code: no
database.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from flask_geneva.dsl.limits import limit_uses
from flask_geneva.dsl.signatures import body_problem
from flask_geneva.dsl.signatures import condition_problem
from flask_geneva.dsl.signatures import key_problem
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "check_workflow_class",
    "format_problems",
    "limit_conflicts",
    "raise_for_problems",
]

_MISSING = object()

#: ``{function: {question: answer}}``: what :func:`_shape_problem` found for a
#: body or condition function. A function's parameters are fixed when it is
#: defined, so the answer is kept for as long as the function lives: an app
#: factory that runs ``init_app`` again (every test of a suite builds an app)
#: asks ``inspect.signature`` once per function, not once per app.
_shape_answers: weakref.WeakKeyDictionary[Callable[..., Any], dict[Any, str | None]] = (
    weakref.WeakKeyDictionary()
)


def _shape_problem(
    check: Callable[..., str | None], func: Callable[..., Any], **question: Any
) -> str | None:
    """``check(func, **question)``, computed once per function and question."""
    answers = _shape_answers.get(func)
    if answers is None:
        answers = _shape_answers.setdefault(func, {})
    key = (check, *sorted(question.items()))
    if key not in answers:
        answers[key] = check(func, **question)
    return answers[key]


def check_workflow_class(cls: type[Any]) -> list[str]:
    """List the problems of one workflow class that only the whole class reveals.

    Args:
        cls: A subclass of ``geneva.Workflow`` (its ``__geneva_definitions__`` are
            read).

    Returns:
        One sentence per problem, each starting with the class's stored type name;
        ``[]`` when the class is sound.

    .. versionadded:: 0.2
    """
    label = getattr(cls, "__geneva_type__", cls.__qualname__)
    definitions = cls.__geneva_definitions__
    problems: list[str] = []
    abstract = cls.__dict__.get("__geneva_abstract__", False)
    if not isinstance(abstract, bool):
        problems.append(
            f"{label}: __geneva_abstract__ must be True or False, got {abstract!r}"
        )
    elif not abstract and not definitions.steps.registered:
        # R-CFG-05: a forgotten @step would finish every workflow at creation.
        problems.append(
            f"{label}: declares no steps; declare them with @step, or mark a base "
            "class with __geneva_abstract__ = True (a workflow of a class without "
            "steps is finished at creation, R-WF-12)"
        )
    startable = getattr(cls, "admin_startable", True)
    if not isinstance(startable, bool):
        # R-ADM-200: a truthy string or None would decide the admin's form.
        problems.append(
            f"{label}: admin_startable must be True or False, got {startable!r} "
            f"({type(startable).__name__})"
        )
    for definition in definitions.steps.registered:
        where = f"{label}: step {definition.name!r}"
        if definition.method_name is not None:
            problem = _method_problem(
                cls, definition.method_name, resumable=definition.is_resumable
            )
            if problem is not None:
                problems.append(f"{where}: {problem}")
        for option in ("skip_if", "run_if"):
            value = getattr(definition, option)
            if isinstance(value, str):
                problem = _named_condition_problem(cls, value, option=option)
                if problem is not None:
                    problems.append(f"{where}: {problem}")
        for limit in definition.limits:
            if isinstance(limit.key, str):
                problem = _named_key_problem(cls, limit.key)
                if problem is not None:
                    problems.append(f"{where}: limit {limit.name!r}: {problem}")
    for condition in definitions.cancel_conditions:
        if isinstance(condition, str):
            problem = _named_condition_problem(cls, condition, option="cancel_if")
            if problem is not None:
                problems.append(f"{label}: {problem}")
    return problems


def limit_conflicts(workflow_classes: Iterable[type[Any]]) -> list[str]:
    """List the limit names declared with different settings (R-LIM-04).

    Steps of any class may share a :class:`~flask_geneva.dsl.limits.Limit`;
    two limits of one name share their slots, so their settings must be equal.

    Args:
        workflow_classes: The registered workflow classes.

    Returns:
        One sentence per conflicting name, sorted by name, naming each
        different declaration with its ``file:line`` and a step using it;
        ``[]`` when every name has one setting.

    .. versionadded:: 0.2
    """
    variants: dict[str, dict[Any, str]] = {}
    for use in limit_uses(workflow_classes):
        variants.setdefault(use.limit.name, {}).setdefault(use.limit, use.describe())
    return [
        f"limit {name!r} is declared with different settings: "
        f"{' and '.join(described.values())}"
        + _same_looking_keys(list(described))
        + "; a name has one setting: share one Limit object, or give the other "
        "limit its own name"
        for name, described in sorted(variants.items())
        if len(described) > 1
    ]


def _same_looking_keys(limits: list[Any]) -> str:
    """Why limits that print alike differ: their key functions are different
    objects (a ``key`` callable compares by identity, R-LIM-01)."""
    settings = {
        (limit.concurrency, limit.rate, limit.per, limit.hold_across_chain)
        for limit in limits
    }
    if len(settings) > 1 or not all(callable(limit.key) for limit in limits):
        return ""
    return " (they differ only in their key functions, which are different objects)"


def format_problems(problems: Iterable[str]) -> str:
    """Join problems into one message, one numbered line each."""
    items = list(problems)
    lines = [f"{len(items)} problem(s) found when flask_geneva started:"]
    lines.extend(f"  {index}. {text}" for index, text in enumerate(items, 1))
    return "\n".join(lines)


def raise_for_problems(workflow_classes: Iterable[type[Any]]) -> None:
    """Raise one error listing every problem of ``workflow_classes`` (R-CFG-03).

    Args:
        workflow_classes: The registered workflow classes
            (``geneva.workflow_classes.values()``).

    Raises:
        GenevaConfigurationError: At least one class has a problem; the message
            lists all of them, one per line.

    .. versionadded:: 0.2
    """
    classes = list(workflow_classes)
    problems = [problem for cls in classes for problem in check_workflow_class(cls)]
    problems.extend(limit_conflicts(classes))
    if problems:
        raise GenevaConfigurationError(format_problems(problems))


def _lookup(cls: type[Any], name: str) -> tuple[Any, Any]:
    """``(static attribute, attribute as the instance sees it)`` or ``_MISSING``."""
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        return _MISSING, _MISSING
    return static, getattr(cls, name, _MISSING)


def _method_problem(cls: type[Any], name: str, *, resumable: bool) -> str | None:
    static, value = _lookup(cls, name)
    if static is _MISSING:
        return f"its body method {name!r} is not defined on {cls.__qualname__}"
    if inspect.isfunction(static):
        return _shape_problem(body_problem, static, resumable=resumable)
    if not callable(value):
        return f"its body {name!r} is not a method ({type(value).__name__})"
    return None


def _named_condition_problem(cls: type[Any], name: str, *, option: str) -> str | None:
    static, _ = _lookup(cls, name)
    if static is _MISSING:
        return (
            f"{option}={name!r} names no attribute of {cls.__qualname__}; "
            f"define a method {name}(self) or fix the name"
        )
    if inspect.isfunction(static):
        return _shape_problem(condition_problem, static, option=f"{option}={name!r}:")
    return None


def _named_key_problem(cls: type[Any], name: str) -> str | None:
    static, value = _lookup(cls, name)
    if static is _MISSING:
        return (
            f"key={name!r} names no attribute of {cls.__qualname__}; define a "
            f"method {name}(self) returning the key, or fix the name"
        )
    if inspect.isfunction(static):
        problem = key_problem(static)
        return None if problem is None else f"key={name!r}: {problem}"
    if not callable(value):
        return (
            f"key={name!r} is not a method of {cls.__qualname__} "
            f"({type(value).__name__}); the key is called as "
            f"workflow.{name}()"
        )
    return None
