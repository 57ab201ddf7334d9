"""Tagged logging: ``[tag] [tag] message`` through a ``logging.LoggerAdapter`` (R-LOG).

Every line the executor logs, and every line a step logs through ``self.logger``,
carries the workflow tag and, during an executor call, the execution tag::

    [request=8f] [Signup id=1 hero_type=User hero_id=7] [execution_id=9 step_name=a] ok

Tags of an injected base adapter come first (R-LOG-03): a
:class:`TaggedLoggerAdapter` passes its tags on, any other ``LoggerAdapter`` is
wrapped, so its own ``process()`` (prefixes, ``extra``) still applies, outside ours.

Every line is safe to tail in a terminal (R-LOG-07): the tags and the arguments
a message formats (exception messages, stored names, hero reprs) have their
control characters escaped as the CLI prints them
(:func:`~flask_geneva.core.terminal_text.escape_control_characters`), so an ANSI
escape cannot drive the terminal and a newline cannot forge a second line. Each
module of the package logs through :func:`module_logger`, an adapter without
tags, for the same reason.

Every record also carries structured fields (R-OLOG, :mod:`~flask_geneva.core.
log_fields`): a tagged adapter built for a workflow passes that workflow's
``workflow_id``, ``workflow_type``, ``execution_id``, ``step``, ``hero_type``
and ``hero_id`` in ``extra``; any other adapter passes those of the workflow
being acted on in the current context; both add the current span's
``trace_id`` and ``span_id``. Keys the caller passed in ``extra`` win.
"""

from __future__ import annotations

import logging
import numbers
import operator
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import MutableMapping
from typing import Any

from flask_geneva.core import log_fields
from flask_geneva.core.terminal_text import escape_control_characters

__all__ = [
    "BASE_LOGGER_NAME",
    "TaggedLoggerAdapter",
    "as_tagged",
    "column_values",
    "execution_logger",
    "execution_tag",
    "module_logger",
    "workflow_log_fields",
    "workflow_logger",
    "workflow_tag",
]

#: Name of the default base logger (R-LOG-04).
BASE_LOGGER_NAME = "flask_geneva"

_Target = logging.Logger | logging.LoggerAdapter[Any]


class _Escaped:
    """A log argument whose ``%s`` and ``%r`` forms have their control
    characters escaped (R-LOG-07); formatted only when a handler emits it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return escape_control_characters(str(self.value))

    def __repr__(self) -> str:
        return escape_control_characters(repr(self.value))


def _escaped(value: Any) -> Any:
    # Numbers keep %d, %.3f and %g working and hold no control character.
    return value if isinstance(value, numbers.Number) else _Escaped(value)


def _escaped_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` as :meth:`TaggedLoggerAdapter.log` passes them on: escaped."""
    if len(args) == 1 and isinstance(args[0], Mapping) and args[0]:
        # logging formats "%(key)s" from a lone non-empty mapping argument.
        return ({key: _escaped(value) for key, value in args[0].items()},)
    return tuple(map(_escaped, args))


class TaggedLoggerAdapter(logging.LoggerAdapter[_Target]):
    """A logger adapter prefixing each message with its tags in brackets (R-LOG-03).

    ``adapter.info("sent")`` with tags ``("a", "b c")`` logs ``"[a] [b c] sent"``.
    The adapter is immutable in practice: :meth:`tagged` returns a new one.

    The tags and the message's arguments are logged with their control
    characters escaped (R-LOG-07): ``adapter.info("got %s", "a\\nb")`` logs
    ``"got a\\x0ab"``. The message itself is the caller's format string, kept
    as it is.

    Args:
        logger: The underlying :class:`logging.Logger`, or another adapter whose
            processing then applies after ours (so its prefixes come first).
        tags: Tags, outermost first (e.g. a task id tag injected by the Celery
            task).
        fields: The structured fields of the workflow the adapter is for
            (:func:`~flask_geneva.core.log_fields.workflow_fields`), or None
            to log those of the workflow acted on in the current context
            (R-OLOG-02).

    Attributes:
        tags: The tags as a tuple of strings, in output order, escaped.
        fields: The fields given, or None.

    .. versionchanged:: 0.1
        ``fields`` (R-OLOG-01..02).

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        logger: _Target,
        tags: tuple[str, ...] = (),
        fields: log_fields.Fields | None = None,
    ) -> None:
        super().__init__(logger, {})
        self.tags = tuple(escape_control_characters(str(tag)) for tag in tags)
        self.fields = fields
        self._prefix: str | None = None  # built by the first emitted record
        # A foreign adapter's process() may replace "extra" (the stdlib's does):
        # ours are merged under what it returns (R-OLOG-02).
        self._foreign = isinstance(logger, logging.LoggerAdapter) and not isinstance(
            logger, TaggedLoggerAdapter
        )

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """Log ``msg % args`` with the tags, the arguments escaped (R-LOG-07).

        Every level method (``info``, ``exception``…) ends here. The record
        names the caller's file, line and function, not this method, and
        carries the structured fields (R-OLOG-01..03).
        """
        if not self.isEnabledFor(level):
            return
        msg, options = self.process(msg, kwargs)
        options["stacklevel"] = options.get("stacklevel", 1) + 1
        target = self.logger
        if self._foreign and isinstance(target, logging.LoggerAdapter):
            ours = options.get("extra")
            msg, options = target.process(msg, options)
            theirs = options.get("extra")
            if ours is not None and theirs is not ours:
                options["extra"] = {**ours, **theirs} if theirs else ours
            target = target.logger
        target.log(level, msg, *_escaped_args(args), **options)

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Prefix ``msg`` with ``[tag] `` for each tag, in order (R-LOG-03).

        ``kwargs["extra"]`` gains the workflow and trace fields under the
        caller's keys (R-OLOG-02).
        """
        extra = log_fields.record_extra(self.fields, kwargs.get("extra"))
        if extra is not None:
            kwargs["extra"] = extra
        prefix = self._prefix
        if prefix is None:
            prefix = self._prefix = "".join(f"[{tag}] " for tag in self.tags)
        return f"{prefix}{msg}", kwargs

    def tagged(self, *tags: str) -> TaggedLoggerAdapter:
        """Return a new adapter with ``tags`` appended, the same fields."""
        return TaggedLoggerAdapter(self.logger, self.tags + tuple(tags), self.fields)


def module_logger(name: str) -> TaggedLoggerAdapter:
    """The logger a module of the package logs with: ``name``'s, escaping (R-LOG-07).

    A :class:`TaggedLoggerAdapter` without tags over ``logging.getLogger(name)``:
    records carry ``name`` as usual, and the arguments of every message are
    logged with their control characters escaped.

    .. versionadded:: 0.1
    """
    return TaggedLoggerAdapter(logging.getLogger(name))


def as_tagged(base: Any) -> TaggedLoggerAdapter:
    """Return ``base`` as a :class:`TaggedLoggerAdapter`, keeping its tags (R-LOG-03).

    Args:
        base: None (the ``flask_geneva`` logger, R-LOG-04), a
            :class:`logging.Logger`, a :class:`TaggedLoggerAdapter` (returned as
            is), or any other :class:`logging.LoggerAdapter` (wrapped, so its
            processing still applies and its prefixes come first).

    Raises:
        TypeError: ``base`` is none of these; the message names its type.

    .. versionadded:: 0.1
    """
    if isinstance(base, TaggedLoggerAdapter):
        return base
    if base is None:
        return TaggedLoggerAdapter(logging.getLogger(BASE_LOGGER_NAME))
    if isinstance(base, logging.Logger | logging.LoggerAdapter):
        return TaggedLoggerAdapter(base)
    raise TypeError(
        f"logger must be None, a logging.Logger or a logging.LoggerAdapter, got "
        f"{base!r} ({type(base).__name__})"
    )


_default: list[TaggedLoggerAdapter] = []


def _default_adapter() -> TaggedLoggerAdapter:
    """``as_tagged(None)``, built once: the ``flask_geneva`` logger, no tags.

    ``logging.getLogger`` returns the same logger for a name for the life of the
    process, and the adapter is immutable.
    """
    if not _default:
        _default.append(as_tagged(None))
    return _default[0]


_WORKFLOW_TAG_KEYS = ("type", "id", "hero_type", "hero_id")
_EXECUTION_TAG_KEYS = ("id", "step_name")


#: One ``operator.itemgetter`` per key tuple :func:`column_values` was asked for
#: (the callers' tuples are constants): a C-level read of several keys.
_GETTERS: dict[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] = {}


def _getter(keys: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    getter = _GETTERS.get(keys)
    if getter is None:
        if len(keys) == 1:
            key = keys[0]
            getter = _GETTERS[keys] = lambda values: (values[key],)
        else:
            getter = _GETTERS[keys] = operator.itemgetter(*keys)
    return getter


def column_values(instance: Any, keys: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of the attributes ``keys`` of ``instance``, in that order.

    Loaded column values of an ORM instance sit in its ``__dict__`` (exactly
    what the attributes return), so they are read from there without the
    attribute machinery; when one is not loaded (expired, deferred) or the
    object has no ``__dict__``, every key is read through its attribute, which
    loads it as usual. Used on the executor's per-step path (log tags, error
    context, signal payloads).

    Args:
        instance: A workflow or step execution instance (or any object).
        keys: Attribute names.

    Returns:
        One value per key.

    Raises:
        AttributeError: ``instance`` has no attribute of a key.
    """
    try:
        return _getter(keys)(instance.__dict__)
    except (AttributeError, KeyError):
        return tuple(getattr(instance, key) for key in keys)


def _workflow_tag(values: tuple[Any, ...], workflow: Any) -> str:
    type_name, id_, hero_type, hero_id = values
    tag = f"{type_name or type(workflow).__name__} id={id_}"
    if hero_id not in (None, ""):
        tag += f" hero_type={hero_type} hero_id={hero_id}"
    return tag


def _workflow_values(workflow: Any) -> tuple[Any, ...]:
    """``(type, id, hero_type, hero_id)``, the type defaulting to the class name."""
    type_name, id_, hero_type, hero_id = column_values(workflow, _WORKFLOW_TAG_KEYS)
    return (type_name or type(workflow).__name__, id_, hero_type, hero_id)


def workflow_tag(workflow: Any) -> str:
    """Return ``"<Type> id=<id>"``, plus hero type and id when set (R-LOG-01)."""
    return _workflow_tag(_workflow_values(workflow), workflow)


def execution_tag(execution: Any) -> str:
    """Return ``"execution_id=<id> step_name=<name>"`` (R-LOG-02)."""
    id_, step_name = column_values(execution, _EXECUTION_TAG_KEYS)
    return f"execution_id={id_} step_name={step_name}"


def workflow_logger(workflow: Any, base: Any = None) -> TaggedLoggerAdapter:
    """Return the workflow-tagged logger (R-LOG-01, R-LOG-05 outside executor calls).

    Its records carry the workflow's structured fields, ``execution_id`` and
    ``step`` None (R-OLOG-01).

    Args:
        workflow: The workflow instance.
        base: Base logger or adapter whose tags come first (see :func:`as_tagged`).
    """
    outer = as_tagged(base) if base is not None else _default_adapter()
    values = _workflow_values(workflow)
    return TaggedLoggerAdapter(
        outer.logger,
        (*outer.tags, _workflow_tag(values, workflow)),
        log_fields.workflow_fields(values, None),
    )


def execution_logger(
    workflow: Any, execution: Any, base: Any = None
) -> TaggedLoggerAdapter:
    """Return the workflow- and execution-tagged logger (R-LOG-02, R-LOG-05).

    Its records carry the workflow's and the execution's structured fields
    (R-OLOG-01).

    Args:
        workflow: The workflow instance.
        execution: The step execution being run.
        base: Base logger or adapter whose tags come first (see :func:`as_tagged`).
    """
    # One adapter, as workflow_logger(...).tagged(...) composes it (once per step).
    outer = as_tagged(base) if base is not None else _default_adapter()
    values = _workflow_values(workflow)
    id_, step_name = column_values(execution, _EXECUTION_TAG_KEYS)
    return TaggedLoggerAdapter(
        outer.logger,
        (
            *outer.tags,
            _workflow_tag(values, workflow),
            f"execution_id={id_} step_name={step_name}",
        ),
        log_fields.workflow_fields(values, (id_, step_name)),
    )


def workflow_log_fields(workflow: Any, execution: Any = None) -> log_fields.Fields:
    """The structured log fields of ``workflow`` (and ``execution``) (R-OLOG-01).

    For :func:`~flask_geneva.core.log_fields.logging_about`, when the records
    of a block are about one workflow.

    Args:
        workflow: The workflow instance.
        execution: The step execution the block is about, or None.
    """
    step = None if execution is None else column_values(execution, _EXECUTION_TAG_KEYS)
    return log_fields.workflow_fields(_workflow_values(workflow), step)
