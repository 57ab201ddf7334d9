"""The cursor codec of resumable steps: Python value <-> JSON document (SPEC §10.5).

A resumable step stores its position in the ``cursor`` column of its step execution
as JSON. This module is pure (no database, no Flask): :func:`serialize_cursor` turns a
cursor into a JSON-compatible structure, :func:`deserialize_cursor` turns it back,
and :func:`dump_cursor` adds the size check a checkpoint applies (R-CUR-10, R-IT-10).

The serialized form:

- ``None``, ``bool``, ``int``, finite ``float`` and ``str`` are stored as themselves;
  ``list`` (and ``tuple``, which comes back as a ``list``) as JSON arrays; ``dict``
  with ``str`` keys as JSON objects, recursively (R-CUR-01, R-CUR-03).
- ``date``, ``datetime``, ``time``, ``timedelta``, ``Decimal`` and ``UUID`` are stored
  as tagged objects ``{"__geneva__": "<type>", "value": "<string>"}`` and come back
  with their type (R-CUR-02)::

      {"__geneva__": "datetime", "value": "2024-05-01T12:30:00.000250+02:00"}
      {"__geneva__": "date", "value": "2024-05-01"}
      {"__geneva__": "time", "value": "12:30:00.000250+02:00"}
      {"__geneva__": "timedelta", "value": "-P1DT2H3M4.000005S"}
      {"__geneva__": "decimal", "value": "1.10"}
      {"__geneva__": "uuid", "value": "12345678-1234-5678-1234-567812345678"}

- A ``float`` whose shortest text has a positive exponent (``1e+16`` and larger
  magnitudes, all whole numbers) is tagged too, ``{"__geneva__": "float", "value":
  "1e+16"}``: PostgreSQL's ``jsonb`` stores the number, not its notation, and
  would give it back as the ``int`` 10000000000000000 (R-CUR-02).

- A user ``dict`` that itself has a ``"__geneva__"`` key is escaped as
  ``{"__geneva__": "dict", "value": {...its serialized entries...}}`` so it cannot be
  mistaken for a tag; this is the one tag whose ``value`` is an object.

Exact types are required: a subclass of a supported type (an ``IntEnum``, a
``StrEnum``, an ``OrderedDict``) raises :class:`CursorSerializationError` rather
than being silently stored as its base type.

.. versionadded:: 0.1
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Callable
from datetime import date
from datetime import datetime
from datetime import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from flask_geneva.exceptions import CursorSerializationError
from flask_geneva.exceptions import CursorTooLargeError

__all__ = [
    "TAG_KEY",
    "check_cursor_size",
    "deserialize_cursor",
    "dump_cursor",
    "encoded_size",
    "nul_character_path",
    "parse_json_text",
    "refuse_nul_character",
    "serialize_cursor",
]

#: The key that marks a tagged value (R-CUR-02).
TAG_KEY = "__geneva__"

_ESCAPED_DICT_TAG = "dict"

_SUPPORTED_TYPES = (
    "None, bool, int, float (finite), str, list, tuple (stored as list), "
    "dict with str keys, datetime.date, datetime.datetime, datetime.time, "
    "datetime.timedelta, decimal.Decimal (finite), uuid.UUID"
)

_NATIVE_SCALARS = (type(None), bool, int, str)

# Signed ISO 8601 duration as written by _format_timedelta, e.g. "-P1DT2H3M4.000005S".
_TIMEDELTA_RE = re.compile(
    r"(?P<sign>-?)P(?P<days>\d+)DT(?P<hours>\d+)H(?P<minutes>\d+)M"
    r"(?P<seconds>\d+)(?:\.(?P<micro>\d{6}))?S"
)

_ONE_MICROSECOND = timedelta(microseconds=1)


def serialize_cursor(value: Any, *, root: str = "cursor") -> Any:
    """Return ``value`` as a JSON-compatible structure (R-CUR-01..03).

    The result holds only None, bool, int, finite float, str, list and dict with str
    keys, so ``json.dumps`` accepts it without a custom encoder. Tagged types become
    ``{"__geneva__": "<type>", "value": "<string>"}``; see the module docstring for
    every shape. The input is not modified.

    Args:
        value: The cursor. Supported: None, bool, int, finite float, str, list,
            tuple (lossy: comes back as a list), dict with str keys (recursively),
            ``datetime.date``, ``datetime.datetime`` (microseconds and UTC offset
            kept, naive stays naive; a named zone such as ``ZoneInfo`` comes back
            as the fixed offset it had), ``datetime.time`` (with its fixed-offset
            tzinfo, if any), ``datetime.timedelta``, finite ``decimal.Decimal``
            (exponent kept) and ``uuid.UUID``. Exact types only, not subclasses.
        root: What the value is, for error messages and paths (``"payload"``
            for a workflow signal's payload, R-WSIG-21).

    Returns:
        The JSON-compatible structure; :func:`deserialize_cursor` inverts it
        (R-CUR-04).

    Raises:
        CursorSerializationError: A value of an unsupported type, a non-str dict
            key, a NaN or infinite float or Decimal, a ``time`` whose tzinfo gives
            no fixed offset, a str that is not valid Unicode (lone surrogates), a
            container that contains itself, or containers nested too deeply for
            the interpreter's stack (several hundred levels). The message names
            the offending type and its path inside the value (``cursor["page"][2]``,
            ``root`` first) and lists the supported types (R-CUR-03).

    .. versionadded:: 0.1
    """
    try:
        return _serialize(value, root, set())
    except RecursionError:
        # Hundreds of nested containers exhaust the stack: refused like any
        # other value that cannot be stored, not a crash of the caller.
        raise _unsupported(root, "containers nested too deeply") from None


def deserialize_cursor(data: Any) -> Any:
    """Return the cursor that :func:`serialize_cursor` turned into ``data`` (R-CUR-04).

    ``deserialize_cursor(serialize_cursor(v)) == v`` for every supported ``v``, with
    the type kept at every position (a ``datetime`` stays a ``datetime``, a
    ``Decimal`` keeps its exponent), except that tuples come back as lists.

    Args:
        data: A serialized cursor as read back from JSON: None, bool, int, float,
            str, list, or dict with str keys, where dicts with a ``"__geneva__"``
            key are tags.

    Returns:
        The cursor, as a new structure; ``data`` is not modified.

    Raises:
        ValueError: ``data`` is not a serialized cursor: a tag names an unknown
            type, has other keys than ``"__geneva__"`` and ``"value"``, or its value
            does not parse; or a non-JSON type appears. The message gives the path.

    .. versionadded:: 0.1
    """
    return _deserialize(data, "cursor")


def encoded_size(serialized: Any) -> int:
    """Return the size in bytes of ``serialized`` as compact UTF-8 JSON (R-CUR-10).

    The encoding is ``json.dumps(serialized, separators=(",", ":"),
    ensure_ascii=False)`` encoded as UTF-8: no insignificant whitespace, non-ASCII
    characters counted by their UTF-8 length.

    Args:
        serialized: The output of :func:`serialize_cursor`.

    Returns:
        The number of bytes.

    Raises:
        ValueError: ``serialized`` holds a NaN or infinite float.
        TypeError: ``serialized`` holds a value ``json.dumps`` cannot encode
            (pass the output of :func:`serialize_cursor`, not the raw cursor).

    .. versionadded:: 0.1
    """
    text = json.dumps(
        serialized, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return len(text.encode("utf-8"))


def check_cursor_size(serialized: Any, max_size: int | None) -> None:
    """Raise if the serialized cursor is over ``max_size`` bytes (R-CUR-10).

    The size is :func:`encoded_size`; exactly ``max_size`` bytes passes.

    Args:
        serialized: The output of :func:`serialize_cursor`.
        max_size: The limit in bytes (``GENEVA_MAX_CURSOR_SIZE``), or None to
            disable the check (nothing is measured then).

    Raises:
        CursorTooLargeError: The encoding is longer than ``max_size`` bytes. The
            message states the size and the limit in bytes, that a cursor must be a
            small position marker rather than a payload, and names the
            ``GENEVA_MAX_CURSOR_SIZE`` setting and that None disables the check.

    .. versionadded:: 0.1
    """
    if max_size is None:
        return
    size = encoded_size(serialized)
    if size > max_size:
        raise CursorTooLargeError(
            f"cursor is {size} bytes as compact JSON, over the limit of {max_size} "
            "bytes. A cursor must be a small position marker (an id, an offset, a "
            "timestamp), not a payload: keep the data elsewhere and store only where "
            "to resume. The limit is the GENEVA_MAX_CURSOR_SIZE setting; set it to "
            "None to disable the check."
        )


def dump_cursor(value: Any, *, max_size: int | None) -> Any:
    """Serialize ``value`` and check its size: what a checkpoint stores (R-IT-10).

    Args:
        value: The cursor; see :func:`serialize_cursor` for the supported types.
        max_size: The limit in bytes (``GENEVA_MAX_CURSOR_SIZE``), or None for no
            limit.

    Returns:
        The JSON-compatible structure to write to the ``cursor`` column.

    Raises:
        CursorSerializationError: ``value`` holds an unsupported type (R-CUR-03),
            or a NUL character in a str or dict key (R-CUR-05), named by path.
        CursorTooLargeError: The serialized cursor is over ``max_size`` bytes
            (R-CUR-10).

    .. versionadded:: 0.1
    """
    serialized = serialize_cursor(value)
    refuse_nul_character(serialized, "cursor")
    check_cursor_size(serialized, max_size)
    return serialized


def dump_document(
    value: Any,
    *,
    root: str,
    max_size: int | None,
    too_large: Callable[[int, int], Exception],
) -> Any:
    """Serialize a stored document (a signal's payload, a workflow's result).

    The cursor codec's types (R-CUR-01..04), no NUL character (R-CUR-05), and
    at most ``max_size`` bytes as compact JSON.

    Args:
        value: The document.
        root: How error paths name it (``"payload"``, ``"result"``).
        max_size: The limit in bytes, or None for none.
        too_large: Builds the error for ``(size, max_size)``.

    Returns:
        The JSON-compatible structure to store.

    Raises:
        CursorSerializationError: An unsupported type or a NUL character,
            named by path ("cannot store the <root>").
        Exception: What ``too_large`` builds, when the document is larger.
    """
    serialized = serialize_cursor(value, root=root)
    refuse_nul_character(serialized, root)
    if max_size is not None:
        size = encoded_size(serialized)
        if size > max_size:
            raise too_large(size, max_size)
    return serialized


def refuse_nul_character(serialized: Any, root: str) -> None:
    """Refuse a serialized value holding a NUL character, on every database.

    PostgreSQL stores no NUL in text or JSON (its flush fails with a
    ``DataError``); refusing it everywhere keeps a workflow the same on each
    (a cursor R-CUR-05, a workflow signal's payload R-WSIG-21).

    Args:
        serialized: What :func:`serialize_cursor` returned.
        root: What the value is (``"cursor"``, ``"payload"``), the start of the path.

    Raises:
        CursorSerializationError: A str or dict key holds ``\\x00``; the message
            names its path (``cursor["k"][1]``).
    """
    nul_at = nul_character_path(serialized, root)
    if nul_at is not None:
        raise CursorSerializationError(
            f"cannot store the {root}: a str with a NUL character at {nul_at} "
            "(PostgreSQL stores no NUL in text or JSON, so no database takes one "
            "here); remove it or encode the value, e.g. as base64"
        )


def nul_character_path(serialized: Any, path: str) -> str | None:
    """Where a serialized value holds a NUL character, in a str or a dict key.

    PostgreSQL stores no NUL character in text or JSON (``\\u0000``), while the
    other databases do; a value meant for every database is checked with this
    (a workflow signal's payload, R-WSIG-21).

    Args:
        serialized: What :func:`serialize_cursor` returned.
        path: The name of the value, the start of the path returned.

    Returns:
        The path of the first such str (``payload["a"][1]``), or None.
    """
    if isinstance(serialized, str):
        return path if "\x00" in serialized else None
    if isinstance(serialized, list):
        children = [(f"{path}[{index}]", item) for index, item in enumerate(serialized)]
    elif isinstance(serialized, dict):
        children = [
            (f"{path}[{json.dumps(key)}]", item) for key, item in serialized.items()
        ]
        for (child_path, _), key in zip(children, serialized, strict=True):
            if "\x00" in key:
                return child_path
    else:
        return None
    for child_path, item in children:
        found = nul_character_path(item, child_path)
        if found is not None:
            return found
    return None


# --- serialization ------------------------------------------------------------


def parse_json_text(text: str) -> Any:
    """Parse JSON an operator typed: a signal's payload in the admin or the CLI.

    Args:
        text: The JSON document.

    Raises:
        ValueError: The text is not JSON; the message is the parser's reason, or
            "nested too deeply" when thousands of nested brackets exhaust its
            stack (refused like any other bad payload, R-WSIG-61).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _unsupported(path: str, detail: str) -> CursorSerializationError:
    root = path.partition("[")[0]
    return CursorSerializationError(
        f"cannot store the {root}: {detail} at {path}. Supported types: "
        f"{_SUPPORTED_TYPES}"
    )


def _type_name(value: Any) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _tag(type_name: str, value: Any) -> dict[str, Any]:
    return {TAG_KEY: type_name, "value": value}


def _serialize(value: Any, path: str, active: set[int]) -> Any:
    # Exact type checks: subclasses (bool is not one here, it is its own type)
    # would come back as their base type and break R-CUR-04.
    cls = type(value)
    if cls in _NATIVE_SCALARS:
        if cls is str:
            _check_unicode(value, path)
        return value
    if cls is float:
        if not math.isfinite(value):
            raise _unsupported(path, f"float {value!r} is not finite")
        if "e+" in repr(value):
            # 1e+16 and up: PostgreSQL's jsonb keeps the number, not its
            # notation, and reads it back as 10000000000000000, an int.
            return _tag("float", repr(value))
        return value
    if cls is list or cls is tuple or cls is dict:
        # Containers on the current path; a cycle would otherwise recurse forever.
        marker = id(value)
        if marker in active:
            raise _unsupported(path, f"{cls.__name__} that contains itself")
        active.add(marker)
        try:
            if cls is dict:
                return _serialize_dict(value, path, active)
            return [
                _serialize(item, f"{path}[{index}]", active)
                for index, item in enumerate(value)
            ]
        finally:
            active.discard(marker)
    if cls is datetime:
        return _tag("datetime", value.isoformat())
    if cls is date:
        return _tag("date", value.isoformat())
    if cls is time:
        if value.tzinfo is not None and value.utcoffset() is None:
            raise _unsupported(
                path,
                f"datetime.time with tzinfo {value.tzinfo!r} that has no fixed "
                "offset (use datetime.timezone)",
            )
        return _tag("time", value.isoformat())
    if cls is timedelta:
        return _tag("timedelta", _format_timedelta(value))
    if cls is Decimal:
        if not value.is_finite():
            raise _unsupported(path, f"decimal.Decimal {value!r} is not finite")
        return _tag("decimal", str(value))
    if cls is uuid.UUID:
        return _tag("uuid", str(value))
    raise _unsupported(path, f"value of type {_type_name(value)}")


def _serialize_dict(value: dict[Any, Any], path: str, active: set[int]) -> Any:
    result: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            raise _unsupported(
                path, f"dict key {key!r} of type {_type_name(key)} (keys must be str)"
            )
        _check_unicode(key, path)
        result[key] = _serialize(item, f"{path}[{json.dumps(key)}]", active)
    if TAG_KEY in result:
        # A user dict with our marker key: wrap it so it cannot read as a tag.
        return _tag(_ESCAPED_DICT_TAG, result)
    return result


def _check_unicode(text: str, path: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _unsupported(
            path, f"str {text!r} that is not valid Unicode ({exc.reason})"
        ) from exc


def _format_timedelta(value: timedelta) -> str:
    micros = value // _ONE_MICROSECOND
    sign = "-" if micros < 0 else ""
    seconds, micro = divmod(abs(micros), 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    fraction = f".{micro:06d}" if micro else ""
    return f"{sign}P{days}DT{hours}H{minutes}M{seconds}{fraction}S"


# --- deserialization ----------------------------------------------------------


def _malformed(path: str, detail: str) -> ValueError:
    return ValueError(f"not a serialized cursor: {detail} at {path}")


def _deserialize(data: Any, path: str) -> Any:
    cls = type(data)
    if cls in _NATIVE_SCALARS or cls is float:
        return data
    if cls is list:
        return [
            _deserialize(item, f"{path}[{index}]") for index, item in enumerate(data)
        ]
    if cls is dict:
        if TAG_KEY in data:
            return _deserialize_tag(data, path)
        return _deserialize_entries(data, path)
    raise _malformed(path, f"value of type {_type_name(data)} is not JSON")


def _deserialize_entries(data: dict[Any, Any], path: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, item in data.items():
        if type(key) is not str:
            raise _malformed(path, f"dict key {key!r} is not a str")
        result[key] = _deserialize(item, f"{path}[{json.dumps(key)}]")
    return result


def _deserialize_tag(data: dict[str, Any], path: str) -> Any:
    if set(data) != {TAG_KEY, "value"}:
        raise _malformed(
            path,
            f"tagged value with keys {sorted(map(str, data))!r}, expected "
            f"{[TAG_KEY, 'value']!r}",
        )
    type_name, text = data[TAG_KEY], data["value"]
    if type_name == _ESCAPED_DICT_TAG:
        if type(text) is not dict:
            raise _malformed(path, "escaped dict whose value is not an object")
        return _deserialize_entries(text, path)
    parse = _PARSERS.get(type_name) if isinstance(type_name, str) else None
    if parse is None:
        raise _malformed(
            path,
            f"unknown tag {type_name!r}, expected one of "
            f"{sorted([*_PARSERS, _ESCAPED_DICT_TAG])!r}",
        )
    if type(text) is not str:
        raise _malformed(path, f"{type_name} tag whose value {text!r} is not a str")
    try:
        return parse(text)
    except (ValueError, ArithmeticError) as exc:
        raise _malformed(path, f"{type_name} tag with value {text!r}") from exc


def _parse_timedelta(text: str) -> timedelta:
    match = _TIMEDELTA_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r}")
    magnitude = timedelta(
        days=int(match["days"]),
        hours=int(match["hours"]),
        minutes=int(match["minutes"]),
        seconds=int(match["seconds"]),
        microseconds=int(match["micro"] or 0),
    )
    return -magnitude if match["sign"] else magnitude


def _parse_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError(f"non-finite decimal {text!r}")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite float {text!r}")
    return value


_PARSERS: dict[str, Any] = {
    "float": _parse_float,
    "date": date.fromisoformat,
    "datetime": datetime.fromisoformat,
    "time": time.fromisoformat,
    "timedelta": _parse_timedelta,
    "decimal": _parse_decimal,
    "uuid": uuid.UUID,
}
