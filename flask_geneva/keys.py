"""Primary keys typed by people: URLs, query strings and command-line arguments."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["MAX_BIGINT_KEY", "describe_key_type", "parse_key"]

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


def describe_key_type(key_type: str) -> str:
    """What :func:`parse_key` accepts for ``key_type``, for error messages."""
    if key_type == "uuid":
        return "a UUID"
    return f"an integer from 1 to {MAX_BIGINT_KEY}"
