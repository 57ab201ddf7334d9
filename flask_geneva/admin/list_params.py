"""Paging and sorting parameters of the admin lists (R-ADM-11, R-ADM-31).

A value that is not allowed never fails the page: the list falls back to the
default and a note names the ignored value and the allowed ones.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "MAX_PAGE",
    "PAGE_SIZE",
    "choice",
    "note_past_the_end",
    "page_number",
    "quoted",
]

#: Rows on one list page.
PAGE_SIZE = 50
#: Highest list page accepted; a larger ``page`` is ignored with a note.
MAX_PAGE = 999_999


def choice(
    args: Any, name: str, allowed: tuple[str, ...], default: str, notes: list[str]
) -> str:
    """The value of a list's ``sort`` or ``dir`` parameter, or ``default``.

    An empty value means the default; any other value not in ``allowed`` is
    ignored with a note naming it and the allowed ones (R-ADM-11, R-ADM-31).

    Args:
        args: The query string (or form) mapping.
        name: The parameter's name.
        allowed: The accepted values.
        default: The value when the parameter is empty or not accepted.
        notes: The page's notes; a note is appended for an ignored value.

    Returns:
        The accepted value or ``default``.
    """
    raw = args.get(name, "")
    value = raw.strip() if isinstance(raw, str) else ""
    if not value:
        return default
    if value not in allowed:
        choices = f"{', '.join(allowed[:-1])} or {allowed[-1]}"
        notes.append(f"ignored {name} {quoted(value)}: use {choices}")
        return default
    return value


def page_number(args: Any, notes: list[str]) -> int:
    """The list page asked for: 1 unless ``page`` is a whole number up to MAX_PAGE.

    Anything else (0, a negative or non-ASCII number, text, a number past
    :data:`MAX_PAGE`) shows page 1 with a note naming the value (R-ADM-31).

    Args:
        args: The query string mapping.
        notes: The page's notes; a note is appended for an ignored value.

    Returns:
        The page number, from 1 to :data:`MAX_PAGE`.
    """
    raw = args.get("page", "")
    value = raw.strip() if isinstance(raw, str) else ""
    if not value:
        return 1
    # The length check comes first: int() refuses texts of 4,300+ digits.
    if value.isascii() and value.isdigit() and len(value) <= len(str(MAX_PAGE)):
        number = int(value)
        if 1 <= number <= MAX_PAGE:
            return number
    notes.append(
        f"ignored page {quoted(value)}: use a whole number from 1 to {MAX_PAGE}"
    )
    return 1


def note_past_the_end(page: int, has_rows: bool, notes: list[str]) -> None:
    """Say so when a page after the first has no rows: the list ends before it."""
    if page > 1 and not has_rows:
        notes.append(f"page {page} is past the end of the list: it has no rows")


def quoted(value: str) -> str:
    """``repr`` of a query-string value for a note, cut after 40 characters."""
    return f"{value[:40]!r}…" if len(value) > 40 else repr(value)
