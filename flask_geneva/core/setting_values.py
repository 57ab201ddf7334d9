"""Readers of one ``GENEVA_*`` value: type and range checked (R-CFG-01).

Each takes the merged settings and a key and returns the value, or raises
:class:`~flask_geneva.exceptions.GenevaConfigurationError` naming the key and
what it got. :mod:`flask_geneva.core.config` builds
:class:`~flask_geneva.core.config.GenevaConfig` from them.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from flask_geneva.core.durations import coerce_duration
from flask_geneva.exceptions import GenevaConfigurationError

__all__ = [
    "MAX_INT_SETTING",
    "bool_value",
    "callable_or_none",
    "choice_value",
    "duration_value",
    "import_string",
    "non_negative_int",
    "positive_int",
]


def import_string(value: Any, *, setting: str) -> Any:
    """Resolve ``"package.module:attr"`` or ``"package.module.attr"``; pass others.

    Raises:
        GenevaConfigurationError: The string cannot be imported; names the setting.
    """
    if not isinstance(value, str):
        return value
    module_name, sep, attr = value.partition(":")
    if not sep:
        module_name, _, attr = value.rpartition(".")
    if not module_name or not attr:
        raise GenevaConfigurationError(
            f"{setting} must be a callable/object or an import path such as "
            f"'package.module:name', got {value!r}"
        )
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise GenevaConfigurationError(
            f"{setting} must be a callable/object or an import path, "
            f"could not import {value!r}: {exc}"
        ) from exc


def duration_value(
    mapping: Mapping[str, Any], key: str, *, allow_none: bool, positive: bool = False
) -> Any:
    """A duration setting as ``timedelta`` (None where ``allow_none``), see
    :func:`~flask_geneva.core.durations.coerce_duration`."""
    try:
        return coerce_duration(
            mapping[key], name=key, allow_none=allow_none, positive=positive
        )
    except (TypeError, ValueError) as exc:
        raise GenevaConfigurationError(str(exc)) from exc


#: The largest int setting: a 64-bit signed integer, the widest value every
#: supported database binds (a batch size goes into a ``LIMIT``; R-CFG-01).
MAX_INT_SETTING = 2**63 - 1


def positive_int(mapping: Mapping[str, Any], key: str) -> int:
    """An int setting from 1 to :data:`MAX_INT_SETTING` (``bool`` refused)."""
    return _int_from(mapping, key, 1, "a positive int")


def bool_value(mapping: Mapping[str, Any], key: str) -> bool:
    """A setting that must be ``True`` or ``False``."""
    value = mapping[key]
    if not isinstance(value, bool):
        raise GenevaConfigurationError(
            f"{key} must be True or False, got {value!r} ({type(value).__name__})"
        )
    return value


def choice_value(mapping: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """A setting that must be one of ``allowed``."""
    value = mapping[key]
    if value not in allowed:
        raise GenevaConfigurationError(
            f"{key} must be one of {', '.join(map(repr, allowed))}, got {value!r}"
        )
    return str(value)


def callable_or_none(mapping: Mapping[str, Any], key: str) -> Any:
    """A callable, an import path of one (:func:`import_string`), or None."""
    value = import_string(mapping[key], setting=key)
    if value is not None and not callable(value):
        raise GenevaConfigurationError(
            f"{key} must be a callable, an import path or None, "
            f"got {value!r} ({type(value).__name__})"
        )
    return value


def non_negative_int(mapping: Mapping[str, Any], key: str) -> int:
    """An int setting from 0 to :data:`MAX_INT_SETTING` (``bool`` refused)."""
    return _int_from(mapping, key, 0, "an int >= 0")


def _int_from(mapping: Mapping[str, Any], key: str, lowest: int, what: str) -> int:
    """``mapping[key]``, an int from ``lowest`` to :data:`MAX_INT_SETTING`.

    Raises:
        GenevaConfigurationError: Not an int (a ``bool`` is refused), or out of
            range; the message names ``key``, the value and the allowed range.
    """
    value = mapping[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not lowest <= value <= MAX_INT_SETTING
    ):
        raise GenevaConfigurationError(
            f"{key} must be {what}, got {value!r} "
            f"({type(value).__name__}); allowed: {lowest} to {MAX_INT_SETTING}"
        )
    return value
