"""Step history: ``step.removed`` gravestones and ``step.renamed`` (issue 19).

A workflow lives for weeks, its code changes daily. Rows written by an older
deploy carry step names in ``next_step_name``, ``current_step_name`` and their
scheduled executions' ``step_name``. The declarations here tell the running code
what became of such a name:

- ``step.removed("old_name")``, written at the old step's position in the class
  body: the name is a *gravestone*. Navigation and scheduling skip it; an
  execution created under it is recorded skipped and the workflow continues with
  the next runnable step after the gravestone's position (R-EVO-01..03).
- ``step.renamed("old_name", to="new_name")``: executions and ``next_step_name``
  values carrying the old name run the new step (R-EVO-04).

Both are statements of the class body (no assignment needed): the call records
its marker in the class namespace being executed, so that the collector
(:mod:`flask_geneva.dsl.collect`) finds it in class-body order. Invalid
declarations are reported when the class is defined (R-EVO-05) by
:func:`validate_history`. Pure code: no database, no Flask.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Collection
from collections.abc import Mapping
from dataclasses import dataclass

from flask_geneva.exceptions import StepConfigurationError

__all__ = [
    "RemovedStep",
    "RenamedStep",
    "declare_removed",
    "declare_renamed",
    "validate_history",
]

_keys = itertools.count(1)


@dataclass(frozen=True)
class RemovedStep:
    """A gravestone: ``step.removed(name)`` (R-EVO-01).

    Attributes:
        name: The removed step's name.
        location: ``(file, line)`` of the declaration, for error messages.

    .. versionadded:: 0.3
    """

    name: str
    location: tuple[str, int]


@dataclass(frozen=True)
class RenamedStep:
    """A rename: ``step.renamed(old_name, to=new_name)`` (R-EVO-04).

    Attributes:
        old_name: The name older rows carry.
        new_name: The step that runs for them (must be defined in the class).
        location: ``(file, line)`` of the declaration, for error messages.

    .. versionadded:: 0.3
    """

    old_name: str
    new_name: str
    location: tuple[str, int]


def _check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise StepConfigurationError(
            f"{what}: the step name must be a non-empty str; got {value!r} "
            f"({type(value).__name__})"
        )
    return value


def _record_in_class_body(marker: object, depth: int, what: str) -> None:
    """Store ``marker`` in the namespace of the class body ``depth`` frames up."""
    namespace = sys._getframe(depth + 1).f_locals
    if "__module__" not in namespace or "__qualname__" not in namespace:
        raise StepConfigurationError(
            f"{what} must be written in a workflow class body, at the position the "
            f"step had (e.g. `class Signup(Workflow): ... {what}`)"
        )
    namespace[f"__geneva_step_history_{next(_keys)}__"] = marker


def declare_removed(name: object, *, depth: int) -> RemovedStep:
    """Declare a gravestone in the calling class body (``step.removed``, R-EVO-01).

    Args:
        name: The removed step's name (non-empty str).
        depth: How many frames above the caller the class body is.

    Returns:
        The marker (also recorded in the class namespace, so an assignment is not
        needed).

    Raises:
        StepConfigurationError: ``name`` is not a non-empty str, or the call is not
            in a class body.
    """
    what = f"step.removed({name!r})"
    marker = RemovedStep(_check_name(name, what), _location(depth + 1))
    _record_in_class_body(marker, depth + 1, what)
    return marker


def declare_renamed(old_name: object, new_name: object, *, depth: int) -> RenamedStep:
    """Declare a rename in the calling class body (``step.renamed``, R-EVO-04).

    Args:
        old_name: The name older rows carry (non-empty str).
        new_name: The defined step that runs for them (non-empty str).
        depth: How many frames above the caller the class body is.

    Raises:
        StepConfigurationError: A name is not a non-empty str, the two are equal,
            or the call is not in a class body.
    """
    what = f"step.renamed({old_name!r}, to={new_name!r})"
    old = _check_name(old_name, what)
    new = _check_name(new_name, what)
    if old == new:
        raise StepConfigurationError(f"{what}: the old and the new name are the same")
    marker = RenamedStep(old, new, _location(depth + 1))
    _record_in_class_body(marker, depth + 1, what)
    return marker


def _location(depth: int) -> tuple[str, int]:
    frame = sys._getframe(depth + 1)
    return frame.f_code.co_filename, frame.f_lineno


def _where(location: tuple[str, int]) -> str:
    return f" ({location[0]}:{location[1]})"


def validate_history(
    type_name: str,
    live: list[str],
    removed: list[RemovedStep],
    renamed: Mapping[str, RenamedStep],
    inherited: Collection[RemovedStep] = (),
) -> None:
    """Refuse contradictory step history when the class is defined (R-EVO-05).

    Args:
        type_name: The workflow type, for messages.
        live: The names of the defined steps (inherited ones included).
        removed: The gravestones, in declaration order.
        renamed: The renames by old name.
        inherited: The gravestones of ``removed`` that a parent class declared;
            a step of the same name is refused with a message that says the
            gravestone is inherited.

    Raises:
        StepConfigurationError: A removed or renamed name is still a defined step;
            a rename targets an undefined or removed step, or another renamed name
            (a chain or a cycle); a name has two gravestones or two renames, or is
            both removed and renamed. Each message names the values and the
            defined steps.
    """
    defined = ", ".join(repr(name) for name in live) or "none"
    live_names = set(live)
    removed_names = {marker.name for marker in removed}
    for gravestone in removed:
        if gravestone.name in live_names and gravestone in inherited:
            raise StepConfigurationError(
                f"{type_name}: defines a step {gravestone.name!r}, but a parent class "
                f"removed that name (step.removed({gravestone.name!r}), inherited); "
                f"older rows carrying it belong to the removed step, so give the new "
                f"step another name" + _where(gravestone.location)
            )
        if gravestone.name in live_names:
            raise StepConfigurationError(
                f"{type_name}: step.removed({gravestone.name!r}), but a step "
                f"{gravestone.name!r} is still defined; delete the gravestone or the "
                f"step" + _where(gravestone.location)
            )
        if gravestone.name in renamed:
            raise StepConfigurationError(
                f"{type_name}: step {gravestone.name!r} is both removed and renamed "
                f"(to {renamed[gravestone.name].new_name!r}); keep one of the "
                f"declarations" + _where(gravestone.location)
            )
    for old, marker in renamed.items():
        what = f"step.renamed({old!r}, to={marker.new_name!r})"
        if old in live_names:
            raise StepConfigurationError(
                f"{type_name}: {what}, but a step {old!r} is still defined; a "
                f"renamed step keeps only its new name" + _where(marker.location)
            )
        chain = [old, marker.new_name]
        while chain[-1] in renamed and chain[-1] not in chain[:-1]:
            chain.append(renamed[chain[-1]].new_name)
        if len(chain) > 2:
            path = " -> ".join(repr(name) for name in chain)
            if chain[-1] in chain[:-1]:
                raise StepConfigurationError(
                    f"{type_name}: the renames form a cycle {path}; a name can be "
                    f"renamed to a defined step only" + _where(marker.location)
                )
            raise StepConfigurationError(
                f"{type_name}: the renames form a chain {path}; rename {old!r} "
                f"directly to {chain[-1]!r}" + _where(marker.location)
            )
        if marker.new_name in removed_names:
            raise StepConfigurationError(
                f"{type_name}: {what}, but {marker.new_name!r} is a removed step; "
                f"rename to a defined step (defined: {defined})"
                + _where(marker.location)
            )
        if marker.new_name not in live_names:
            raise StepConfigurationError(
                f"{type_name}: {what}, but no step {marker.new_name!r} is defined "
                f"(defined: {defined})" + _where(marker.location)
            )
