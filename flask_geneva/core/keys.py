"""Primary keys typed by people: URLs, query strings and command-line arguments."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = [
    "HERO_SEPARATOR",
    "MAX_BIGINT_KEY",
    "describe_key_type",
    "format_hero",
    "lookup_key",
    "parse_key",
    "split_hero",
]

#: Separator of the one hero notation, ``Type#id`` (``User#17``), used by the CLI
#: (input and output), the admin (columns and search) and log messages (R-ADM-11).
HERO_SEPARATOR = "#"

#: The largest ``bigint`` key (PostgreSQL, MySQL and SQLite integers are 64-bit).
MAX_BIGINT_KEY = 2**63 - 1


def parse_key(raw: str | None, key_type: str) -> Any:
    """Parse a workflow, execution or hero id given as text.

    Args:
        raw: The text given (surrounding blanks ignored), or None.
        key_type: ``"bigint"`` or ``"uuid"`` (``Geneva.key_type``, R-DM-20).

    Returns:
        The key (``int`` from 1 to :data:`MAX_BIGINT_KEY`, or ``uuid.UUID``), or
        None when ``raw`` is not a valid key of that type: negative, zero,
        non-ASCII digits, beyond 64 bits (a database would refuse to compare it),
        or garbage.
    """
    if raw is None:
        return None
    raw = raw.strip()
    if key_type == "uuid":
        try:
            return uuid.UUID(raw)
        except ValueError:
            return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(MAX_BIGINT_KEY)):
        return None
    key = int(raw)
    return key if 1 <= key <= MAX_BIGINT_KEY else None


def lookup_key(value: object, key_type: str, *, what: str = "workflow id") -> Any:
    """The key to look a row up by, from a key given to a public method
    (``Workflow.get``, R-FLT-72).

    Args:
        value: An ``int`` (``"bigint"`` keys) or a ``uuid.UUID`` (``"uuid"``
            keys), or its text (:func:`parse_key`).
        key_type: ``"bigint"`` or ``"uuid"`` (``Geneva.key_type``, R-DM-20).
        what: What the key is, for messages.

    Returns:
        The key; None for an int no row can have (below 1 or beyond
        :data:`MAX_BIGINT_KEY`, which a database would refuse to compare).

    Raises:
        TypeError: ``value`` is neither a key of that type nor text (a bool, a
            float, bytes, None); the message names it and the allowed forms.
        ValueError: Text that is no key of that type.
    """
    allowed = describe_key_type(key_type)
    if isinstance(value, str):
        key = parse_key(value, key_type)
        if key is None:
            raise ValueError(f"invalid {what} {value!r}: expected {allowed}")
        return key
    if key_type == "uuid" and isinstance(value, uuid.UUID):
        return value
    if key_type != "uuid" and isinstance(value, int) and not isinstance(value, bool):
        return value if 1 <= value <= MAX_BIGINT_KEY else None
    raise TypeError(
        f"invalid {what} {value!r} ({type(value).__name__}): expected {allowed} "
        "or its text"
    )


def describe_key_type(key_type: str) -> str:
    """What :func:`parse_key` accepts for ``key_type``, for error messages."""
    if key_type == "uuid":
        return "a UUID"
    return f"an integer from 1 to {MAX_BIGINT_KEY}"


def format_hero(hero_type: Any, hero_id: Any) -> str:
    """Write a hero as ``Type#id`` (R-ADM-11); ``"-"`` when the workflow has none.

    Args:
        hero_type: The stored ``hero_type`` (the hero model's base class name).
        hero_id: The stored ``hero_id``.

    Returns:
        ``f"{hero_type}#{hero_id}"``, the text :func:`split_hero` reads back.
    """
    if hero_type is None or hero_id is None:
        return "-"
    return f"{hero_type}{HERO_SEPARATOR}{hero_id}"


def split_hero(raw: str) -> tuple[str, str] | None:
    """Split a hero written ``Type#id`` into ``(type, id text)`` (R-ADM-11).

    Args:
        raw: The text given, for example ``"Order#357"`` (blanks around it and
            around either part are ignored).

    Returns:
        The hero type and the id text (parse it with :func:`parse_key`), or None
        when ``raw`` is not of that shape (no ``#``, or an empty part).
    """
    hero_type, sep, hero_id = raw.strip().partition(HERO_SEPARATOR)
    hero_type, hero_id = hero_type.strip(), hero_id.strip()
    if not sep or not hero_type or not hero_id:
        return None
    return hero_type, hero_id
