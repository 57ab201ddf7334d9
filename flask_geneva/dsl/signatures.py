"""Signature checks for step bodies and conditions (R-DEF-19..21).

A step body or a condition with the wrong shape used to fail only when its step
ran, which paused the workflow; an ``async def`` body even "succeeded" without
running (its coroutine was never awaited). These checks run where the function is
known: at class definition for functions (``StepConfigurationError``) and, for
method names, at ``init_app`` (:mod:`flask_geneva.ext.startup_checks`). Pure code: no
database, no Flask.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["body_problem", "condition_problem", "key_problem"]


def _is_async(func: Callable[..., Any]) -> bool:
    target = inspect.unwrap(func)
    return inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target)


def _accepts(func: Callable[..., Any], count: int) -> bool:
    """Whether ``func`` can be called with ``count`` positional arguments.

    A callable whose signature cannot be read (some builtins) is given the benefit
    of the doubt.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def body_problem(func: Callable[..., Any], *, resumable: bool) -> str | None:
    """Describe what is wrong with a step body's shape, or return None.

    A regular step body is called as ``(workflow)``; a resumable one as
    ``(workflow, it)`` (R-DEF-01, R-RES-01). Methods are checked unbound, so
    ``self`` counts as the workflow argument.

    Args:
        func: The body function (a method of the workflow class or an inline
            callable).
        resumable: Whether the step is a ``resumable_step``.

    Returns:
        A sentence naming the problem (R-DEF-19 async body, R-DEF-21 resumable
        body without an iterator parameter, R-DEF-20 other arity), or None.

    .. versionadded:: 0.1
    """
    name = _display_name(func)
    if _is_async(func):
        return (
            f"body {name} is an async function; steps run synchronously in the "
            f"worker and its coroutine would never be awaited: use a plain def "
            f"(R-DEF-19)"
        )
    if resumable:
        if not _accepts(func, 2):
            return (
                f"resumable body {name}{_signature_text(func)} must take the "
                f"iterator as its second parameter, e.g. def {_short(func)}"
                f"(self, it) (R-DEF-21)"
            )
    elif not _accepts(func, 1):
        return (
            f"body {name}{_signature_text(func)} must be callable with the "
            f"workflow alone, e.g. def {_short(func)}(self) (R-DEF-20)"
        )
    return None


def condition_problem(func: Callable[..., Any], *, option: str) -> str | None:
    """Describe what is wrong with a condition callable's shape, or return None.

    Conditions (``skip_if``, ``run_if``, cancel conditions) are called as
    ``(workflow)`` and their result is used for its truthiness (R-CND-01).

    Args:
        func: The condition callable or the unbound method a name refers to.
        option: The option for the message (``"skip_if"``, ``"cancel_if"``...).

    Returns:
        A sentence naming the problem (R-DEF-19 async, R-DEF-20 arity), or None.

    .. versionadded:: 0.1
    """
    name = _display_name(func)
    if _is_async(func):
        return (
            f"{option} {name} is an async function; its coroutine would always "
            f"count as true: use a plain def (R-DEF-19)"
        )
    if not _accepts(func, 1):
        return (
            f"{option} {name}{_signature_text(func)} must be callable with the "
            f"workflow alone, e.g. (self) or lambda workflow: ... (R-DEF-20)"
        )
    return None


def key_problem(func: Callable[..., Any]) -> str | None:
    """Describe what is wrong with a limit's key callable, or return None.

    A key is called as ``(workflow)`` and its value is the limit's key
    (R-LIM-02, R-LIM-05).

    Args:
        func: The key callable, or the unbound method a key name refers to.

    Returns:
        A sentence naming the problem (R-DEF-19 async, R-DEF-20 arity), or None.

    .. versionadded:: 0.2
    """
    name = _display_name(func)
    if _is_async(func):
        return (
            f"key {name} is an async function; its coroutine, not its result, "
            f"would be the key: use a plain def (R-DEF-19)"
        )
    if not _accepts(func, 1):
        return (
            f"key {name}{_signature_text(func)} must be callable with the "
            f"workflow alone, e.g. (self) or lambda workflow: ... (R-DEF-20)"
        )
    return None


def _display_name(func: Callable[..., Any]) -> str:
    """The qualified name without its ``<locals>`` path (as written in the body)."""
    qualname = getattr(func, "__qualname__", None)
    if not isinstance(qualname, str):
        return repr(func)
    return qualname.rpartition("<locals>.")[2]


def _signature_text(func: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(func))
    except (TypeError, ValueError):
        return ""


def _short(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", "body")
    return name if name.isidentifier() else "body"
