"""Matchers of exception policies: which errors a policy captures (R-POL-05, R-POL-06).

A matcher is an exception class, a dotted class path (matched lazily, by name
first), or a predicate. :func:`normalize_matchers` validates the ``matching``
argument of a policy, :func:`matcher_matches` tests an error against one matcher
and :func:`describe_matcher` names it in records and messages. Pure: no
database, no Flask.
"""

from __future__ import annotations

import builtins
import importlib
import sys
from collections.abc import Sequence

from flask_geneva.exceptions import StepConfigurationError

__all__ = ["describe_matcher", "matcher_matches", "normalize_matchers"]


def describe_matcher(matcher: object) -> str:
    """Return a readable name for an exception matcher (R-PDR-01 ``matched_by``).

    Exception classes are named by their qualified name (``"TimeoutError"`` for
    builtins, ``"module.Name"`` otherwise), lazy string matchers by the string
    itself, and predicates by their qualified name or ``repr``.

    .. versionadded:: 0.1
    """
    if isinstance(matcher, str):
        return matcher
    if isinstance(matcher, type):
        return _class_path(matcher)
    qualname = getattr(matcher, "__qualname__", None)
    if isinstance(qualname, str):
        module = getattr(matcher, "__module__", None)
        return f"{module}.{qualname}" if module else qualname
    return repr(matcher)


def _class_path(cls: type) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _resolve_dotted_path(path: str) -> object | None:
    """Import the object named by ``path``; None when it cannot be found."""
    parts = path.split(".")
    if len(parts) == 1:
        return getattr(builtins, path, None)
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except Exception:  # noqa: BLE001, S112 - lazy matchers never raise (R-POL-05)
                continue
        target: object = module
        for attribute in parts[split:]:
            target = getattr(target, attribute, None)
            if target is None:
                return None
        return target
    return None


def _string_matches(path: str, error: BaseException) -> bool:
    # By name first: works without importing and for classes that cannot be
    # imported by path (defined in __main__ or inside a function).
    for cls in type(error).__mro__:
        if path in (_class_path(cls), f"{cls.__module__}.{cls.__qualname__}"):
            return True
    resolved = _resolve_dotted_path(path)
    return (
        isinstance(resolved, type)
        and issubclass(resolved, BaseException)
        and isinstance(error, resolved)
    )


def matcher_matches(matcher: object, error: BaseException) -> bool:
    if isinstance(matcher, type):
        return isinstance(error, matcher)
    if isinstance(matcher, str):
        return _string_matches(matcher, error)
    try:
        return bool(matcher(error))  # type: ignore[operator]  # validated callable
    except Exception:  # noqa: BLE001 - a raising predicate means "no match" (R-POL-05)
        return False


def normalize_matchers(matching: object) -> tuple[object, ...]:
    """Validate ``matching`` (one matcher or a sequence) into a tuple (R-POL-05)."""
    if matching is None:
        return ()
    if isinstance(matching, list | tuple | set | frozenset):
        items: Sequence[object] = list(matching)
    else:
        items = [matching]
    result: list[object] = []
    for item in items:
        if isinstance(item, type):
            if not issubclass(item, Exception):
                raise StepConfigurationError(
                    f"invalid exception matcher {item!r}: a class matcher must be an "
                    f"Exception subclass"
                )
        elif isinstance(item, str):
            parts = item.split(".")
            if not item or not all(part.isidentifier() for part in parts):
                raise StepConfigurationError(
                    f"invalid exception matcher {item!r}: a string matcher must be a "
                    f"dotted import path such as 'package.module.ErrorClass'"
                )
        elif not callable(item):
            raise StepConfigurationError(
                f"invalid exception matcher {item!r} ({type(item).__name__}): must be "
                f"an Exception subclass, a dotted-path string, or a callable "
                f"predicate (error) -> bool"
            )
        result.append(item)
    return tuple(result)
