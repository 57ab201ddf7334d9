"""Named limits on how many executions of limited steps run at once (SPEC §24.1).

A :class:`Limit` is declared once, at module level, and passed to the steps it
limits: ``@step(limit=partner_api)`` (a list for several). Steps of any class
may share it; executions with the same limit name and the same *key* (the
value of the limit's ``key`` for the workflow, one global key without it)
count against the same slots (R-LIM-01..05).

This module is the declaration layer only: the validation of a ``Limit``
(R-LIM-02), of the ``limit=`` step option (R-LIM-03), the collection of the
limits of the registered classes that ``init_app`` checks (R-LIM-04), and the
resolution of a workflow's keys (R-LIM-05). Pure code: no database, no Flask.

``hold_across_chain=True`` keeps a resumable step's slot from one execution of
its chain to the next (R-LIM-26).
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import KW_ONLY
from dataclasses import dataclass
from dataclasses import field
from datetime import timedelta
from typing import TYPE_CHECKING
from typing import Any

from flask_geneva.core.stored_names import MAX_NAME_LENGTH
from flask_geneva.core.stored_names import fits_name_column
from flask_geneva.dsl.signatures import key_problem
from flask_geneva.exceptions import LimitKeyError
from flask_geneva.exceptions import StepConfigurationError

if TYPE_CHECKING:
    from flask_geneva.dsl.definitions import StepDefinition

__all__ = [
    "GLOBAL_KEY",
    "MAX_LIMIT_NAME_LENGTH",
    "MAX_PER",
    "MAX_RATE",
    "Limit",
    "LimitUse",
    "coerce_step_limits",
    "limit_uses",
    "resolve_limit_keys",
]


#: The longest limit name.
MAX_LIMIT_NAME_LENGTH = 64
#: The largest ``rate``: the number of start times kept per key.
MAX_RATE = 10_000
#: The longest ``per`` window.
MAX_PER = timedelta(days=31)
#: The key of a limit without ``key``: one set of slots for every workflow.
GLOBAL_KEY = ""

_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.:-]+")
_NAME_RULE = (
    f"a non-empty str of at most {MAX_LIMIT_NAME_LENGTH} characters, each a "
    "letter, digit, '_', '.', ':' or '-'"
)
_KEY_VALUE_RULE = (
    f"a str, an int (not a bool) or a uuid.UUID whose text is non-empty, at most "
    f"{MAX_NAME_LENGTH} characters long and holds no NUL character, in valid "
    "Unicode"
)
_SHOWN_VALUE_LENGTH = 80


def _shown(value: object) -> str:
    """``repr(value)`` cut to about 80 characters for a message."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the error
        text = f"<{type(value).__name__} object>"
    if len(text) > _SHOWN_VALUE_LENGTH:
        text = f"{text[: _SHOWN_VALUE_LENGTH - 3]}..."
    return text


def _key_text(key: object) -> str:
    """How messages and reprs show a ``key``: the method name or the function."""
    if key is None or isinstance(key, str):
        return repr(key)
    qualname = getattr(key, "__qualname__", None)
    if isinstance(qualname, str):
        return qualname.rpartition("<locals>.")[2]
    return _shown(key)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class Limit:
    """A named limit on the executions of the steps that declare it (R-LIM-01).

    Declare it once and pass it to each step it limits, of any workflow
    class: ``@step(limit=partner_api)``, or a list for several limits.
    Executions whose limit has one name and whose workflows give one key
    share the limit's slots; a step over its limit is neither failed nor run
    but waits its turn (enforced by the engine, SPEC §24).

    Example::

        partner_api = Limit("partner-api", concurrency=2, key=tenant_of)

    Two limits are equal, and hash alike, when all their settings are equal
    (a ``key`` function compares by identity); ``init_app`` refuses two
    different limits with one name (R-LIM-04).

    Args:
        name: The limit's name: 1 to 64 characters, each a letter, digit,
            ``_``, ``.``, ``:`` or ``-``.
        concurrency: At most this many executions of the limit's steps run at
            once per key: a positive int (not a bool), or None.
        rate: At most this many starts per key in any ``per`` window: a
            positive int of at most 10,000, or None; given with ``per``.
            Exact by the database's clock (R-LIM-23).
        per: The ``rate`` window, a positive ``timedelta`` of at most 31
            days, or None; given with ``rate``.
        key: What partitions the slots: None (one global key), a callable
            ``(workflow)`` (a plain ``def`` or lambda, not ``async``), or the
            name of a workflow method ``(self)`` (checked at ``init_app``).
            Its value must be a str, int or ``uuid.UUID`` (R-LIM-05).
        hold_across_chain: Whether a resumable step's chain keeps its slot
            from one execution to its successor (a bool, R-LIM-26); False: each
            execution of the chain takes a slot anew.

    Attributes:
        definition_location: ``(file, line)`` where the limit was constructed,
            named by ``init_app``'s messages; not part of its equality.

    Raises:
        StepConfigurationError: Any invalid setting, naming the value and the
            allowed ones (R-LIM-02): neither ``concurrency`` nor ``rate``; a
            ``concurrency`` or ``rate`` that is not a positive int; ``rate``
            without ``per`` or ``per`` without ``rate``; ``per`` not a positive
            ``timedelta`` or over 31 days; ``rate`` over 10,000; an invalid
            name; a ``key`` that is not None, a str or a callable, an async or
            unhashable key callable; a ``hold_across_chain`` that is not a
            bool.

    .. versionadded:: 0.2
    """

    name: str
    _: KW_ONLY
    concurrency: int | None = None
    rate: int | None = None
    per: timedelta | None = None
    key: Callable[[Any], object] | str | None = None
    hold_across_chain: bool = False
    definition_location: tuple[str, int] = field(
        init=False, compare=False, repr=False, default=("<unknown>", 0)
    )

    def __post_init__(self) -> None:
        _check_name(self.name)
        label = f"Limit {self.name!r}"
        _check_counts(self, label)
        _check_key(self.key, label)
        if not isinstance(self.hold_across_chain, bool):
            raise StepConfigurationError(
                f"{label}: invalid hold_across_chain {_shown(self.hold_across_chain)} "
                f"({type(self.hold_across_chain).__name__}): must be True or False"
            )
        frame = sys._getframe(2)  # __post_init__ <- __init__ <- the declaration
        object.__setattr__(
            self, "definition_location", (frame.f_code.co_filename, frame.f_lineno)
        )

    @property
    def where(self) -> str:
        """``"file:line"`` of :attr:`definition_location`."""
        return f"{self.definition_location[0]}:{self.definition_location[1]}"

    def __repr__(self) -> str:
        settings = [repr(self.name)]
        for option in ("concurrency", "rate", "per"):
            value = getattr(self, option)
            if value is not None:
                settings.append(f"{option}={value!r}")
        if self.key is not None:
            settings.append(f"key={_key_text(self.key)}")
        if self.hold_across_chain:
            settings.append("hold_across_chain=True")
        return f"Limit({', '.join(settings)})"


def _check_name(name: object) -> None:
    """Refuse a limit name outside the rule (R-LIM-02)."""
    if not isinstance(name, str):
        problem = f"({type(name).__name__})"
    elif "\x00" in name:
        problem = "(holds a NUL character)"
    elif len(name) > MAX_LIMIT_NAME_LENGTH:
        problem = f"({len(name)} characters)"
    elif not _NAME_PATTERN.fullmatch(name):
        problem = "(empty)" if not name else "(a character outside the rule)"
    else:
        return
    raise StepConfigurationError(
        f"invalid limit name {_shown(name)} {problem}: a limit name must be "
        f"{_NAME_RULE}, e.g. 'partner-api'"
    )


def _check_counts(limit: Limit, label: str) -> None:
    """Refuse wrong ``concurrency``/``rate``/``per`` values (R-LIM-02)."""
    for option in ("concurrency", "rate"):
        value = getattr(limit, option)
        if value is not None and not _is_count(value):
            raise StepConfigurationError(
                f"{label}: invalid {option} {_shown(value)} "
                f"({type(value).__name__}): must be a positive int (not a bool), "
                "or None"
            )
    if limit.concurrency is None and limit.rate is None:
        if limit.per is not None:
            raise StepConfigurationError(
                f"{label}: per={limit.per!r} without rate: give the number of "
                "starts allowed in the window as well, e.g. rate=100"
            )
        raise StepConfigurationError(
            f"{label}: declares neither concurrency nor rate: give concurrency=<a "
            "positive int> (at most that many at once per key), or rate=<starts> "
            "and per=<a timedelta> (at most that many starts in any window)"
        )
    if limit.rate is not None and limit.per is None:
        raise StepConfigurationError(
            f"{label}: rate={limit.rate!r} without per: give the window as well, "
            "e.g. per=timedelta(minutes=1)"
        )
    if limit.per is not None and limit.rate is None:
        raise StepConfigurationError(
            f"{label}: per={limit.per!r} without rate: give the number of starts "
            "allowed in the window as well, e.g. rate=100"
        )
    per = limit.per
    if per is not None and (
        not isinstance(per, timedelta) or per <= timedelta(0) or per > MAX_PER
    ):
        raise StepConfigurationError(
            f"{label}: invalid per {_shown(per)} ({type(per).__name__}): must be a "
            f"positive timedelta of at most {MAX_PER.days} days"
        )
    if limit.rate is not None and limit.rate > MAX_RATE:
        raise StepConfigurationError(
            f"{label}: invalid rate {limit.rate!r}: at most {MAX_RATE:,} starts per "
            "window; use a shorter per with a proportionally smaller rate (e.g. "
            "rate=1000, per=timedelta(seconds=6) instead of rate=10000, "
            "per=timedelta(minutes=1))"
        )


def _check_key(key: object, label: str) -> None:
    """Refuse a ``key`` that is not None, a method name or a sync callable."""
    if key is None:
        return
    if isinstance(key, str):
        if not key.isidentifier():
            raise StepConfigurationError(
                f"{label}: invalid key {_shown(key)}: a method name must be an "
                "identifier; allowed: None, a method name, a callable (workflow)"
            )
        return
    if not callable(key) or isinstance(key, type):
        raise StepConfigurationError(
            f"{label}: invalid key {_shown(key)} ({type(key).__name__}): must be "
            "None (one global key), the name of a workflow method, or a callable "
            "(workflow)"
        )
    problem = key_problem(key)
    if problem is not None:
        raise StepConfigurationError(f"{label}: {problem}")
    try:
        hash(key)
    except TypeError as exc:
        raise StepConfigurationError(
            f"{label}: key {_shown(key)} is not hashable, and a Limit must be: "
            "use a function or a method name"
        ) from exc


def coerce_step_limits(value: object, *, label: str) -> tuple[Limit, ...]:
    """Validate a step's ``limit=`` option into a tuple of limits (R-LIM-03).

    Args:
        value: None, a :class:`Limit`, or a list or tuple of limits with
            distinct names.
        label: How the message names the step (``"Step 'push'"``).

    Returns:
        The limits, in the order given; ``()`` for None or an empty list.

    Raises:
        StepConfigurationError: A str (the hint: pass the ``Limit`` object, not
            its name), a dict, any other value, an element that is not a
            ``Limit``, or two limits of one name.
    """
    if value is None:
        return ()
    if isinstance(value, Limit):
        return (value,)
    if isinstance(value, list | tuple):
        limits = tuple(value)
        for item in limits:
            if not isinstance(item, Limit):
                raise StepConfigurationError(
                    f"{label}: invalid limit {_shown(item)} ({type(item).__name__}) "
                    f"in limit={_shown(value)}: each must be a Limit"
                    f"{_limit_hint(item)}"
                )
        names = [limit.name for limit in limits]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise StepConfigurationError(
                f"{label}: limit={_shown(value)} names "
                f"{', '.join(map(repr, twice))} more than once: give each limit once"
            )
        return limits
    raise StepConfigurationError(
        f"{label}: invalid limit {_shown(value)} ({type(value).__name__}): must be "
        f"a Limit, a list of Limits, or None{_limit_hint(value)}"
    )


def _limit_hint(value: object) -> str:
    if isinstance(value, str):
        return (
            "; pass the Limit object, not its name (e.g. partner_api = "
            f"Limit({value!r}, concurrency=2) at module level, then "
            "@step(limit=partner_api))"
        )
    if isinstance(value, dict):
        return "; build it with Limit(name, concurrency=...) instead of a dict"
    return ""


@dataclass(frozen=True)
class LimitUse:
    """One step of one workflow class that declares a limit (R-LIM-04).

    Attributes:
        limit: The limit.
        workflow_type: The class's stored type name.
        step_name: The step.
        step_location: ``(file, line)`` of the step's declaration.
    """

    limit: Limit
    workflow_type: str
    step_name: str
    step_location: tuple[str, int]

    def describe(self) -> str:
        """``"Limit(...) at file:line (step Sync.push)"`` for messages."""
        return (
            f"{self.limit!r} at {self.limit.where} (step "
            f"{self.workflow_type}.{self.step_name})"
        )


def limit_uses(workflow_classes: Iterable[type[Any]]) -> list[LimitUse]:
    """Every use of a limit by a step of ``workflow_classes`` (R-LIM-04).

    Args:
        workflow_classes: Workflow classes (their ``__geneva_definitions__``
            are read).

    Returns:
        One :class:`LimitUse` per step and limit, in class, then step order.
    """
    uses: list[LimitUse] = []
    for cls in workflow_classes:
        type_name = getattr(cls, "__geneva_type__", cls.__qualname__)
        for definition in cls.__geneva_definitions__.steps.registered:
            uses.extend(
                LimitUse(
                    limit=limit,
                    workflow_type=type_name,
                    step_name=definition.name,
                    step_location=definition.definition_location,
                )
                for limit in definition.limits
            )
    return uses


def resolve_limit_keys(workflow: object, step: StepDefinition) -> list[tuple[str, str]]:
    """The ``(limit name, key)`` pairs of ``step``'s limits for ``workflow`` (R-LIM-05).

    A limit's key is ``key(workflow)`` for a callable, ``getattr(workflow,
    key)()`` for a method name, and the global key ``""`` without ``key``; the
    value must be a str, an int (not a bool) or a ``uuid.UUID`` and is used as
    its text, non-empty, at most 255 characters long and without NUL.

    Args:
        workflow: The workflow instance.
        step: The step definition (its ``limits`` and ``name`` are read).

    Returns:
        The pairs, sorted by limit name then key (the order slots are taken
        in); ``[]`` for a step without limits.

    Raises:
        LimitKeyError: A key function or method raised (chained from its
            error), or its value is of another type or its text breaks the
            rule; the message names the limit, the step and the value (cut to
            about 80 characters) or the error.
    """
    return sorted(
        (limit.name, _key_of(limit, workflow, step.name)) for limit in step.limits
    )


def _key_of(limit: Limit, workflow: object, step_name: str) -> str:
    key = limit.key
    if key is None:
        return GLOBAL_KEY
    where = f"limit {limit.name!r} of step {step_name!r}"
    what = f"key method {key!r}" if isinstance(key, str) else f"key {_key_text(key)}"
    try:
        value = getattr(workflow, key)() if isinstance(key, str) else key(workflow)
    except Exception as exc:
        raise LimitKeyError(
            f"{where}: its {what} raised {type(exc).__name__}: {_shown(str(exc))}",
            limit_name=limit.name,
            step_name=step_name,
        ) from exc
    if isinstance(value, bool) or not isinstance(value, str | int | uuid.UUID):
        problem = f"{_shown(value)} ({type(value).__name__})"
    else:
        text = str(value)
        if fits_name_column(text):
            return text
        problem = _shown(value)
        if len(text) > MAX_NAME_LENGTH:
            problem += f" ({len(text)} characters)"
    raise LimitKeyError(
        f"{where}: its {what} returned {problem}: a key must be {_KEY_VALUE_RULE}",
        limit_name=limit.name,
        step_name=step_name,
    )
