"""Keyset paging of the admin lists: the ``after``/``before`` links (R-ADM-150).

A list page's "next" link carries ``after=<key of its last row>``, its
"previous" link ``before=<key of its first row>``; the key is the row's sort
column value and id (``2026-12-07T04:41:06.123456,1234``, ``null,1234`` for a
NULL value, the id alone for an id sort). The rows are then read from that key
along the list's index (:func:`flask_geneva.db.queries.keyset.keyset_rows`),
never skipped with ``OFFSET``. ``page`` stays in the links as the page's number
(counted from the page the walk started on); without a key it is a bookmark of
the former links and read with ``OFFSET`` (R-ADM-151). A key that does not parse
never fails the page: page 1 shows with a note naming it (R-ADM-31).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from datetime import UTC
from datetime import datetime
from typing import Any

from flask_geneva.admin.list_params import MAX_PAGE
from flask_geneva.admin.list_params import page_number
from flask_geneva.admin.list_params import quoted
from flask_geneva.db.queries.keyset import Position

__all__ = [
    "ListPage",
    "PageRequest",
    "page_request",
    "position_token",
    "read_list_page",
]

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?")
_NULL = "null"
# MariaDB DATETIME holds years 1000..9999.
_FIRST_YEAR = 1000


@dataclasses.dataclass(frozen=True)
class PageRequest:
    """Which rows a list page shows (R-ADM-150, R-ADM-151).

    Attributes:
        page: The page's number as shown (a label once a key is given).
        after: Show the rows after this key.
        before: Show the rows before this key.
        offset: Rows skipped (a bookmarked ``?page=N`` without a key).
    """

    page: int
    after: Position | None = None
    before: Position | None = None
    offset: int = 0


def position_token(value: Any, key: Any, *, by_id: bool) -> str:
    """The URL form of a row's sort key (R-ADM-150).

    Args:
        value: The row's sort column value (an aware datetime, or None).
        key: The row's id.
        by_id: The list is sorted by the id alone: the token is the id.
    """
    if by_id:
        return str(key)
    if value is None:
        return f"{_NULL},{key}"
    stamp = value.astimezone(UTC).replace(tzinfo=None)
    return f"{stamp:%Y-%m-%dT%H:%M:%S.%f},{key}"


def _parse_position(
    raw: str, *, by_id: bool, nullable: bool, parse_key: Callable[[str], Any]
) -> Position | None:
    """The key of a token, or None when it is not one of this list's keys."""
    if by_id:
        key = parse_key(raw)
        return None if key is None else Position(None, key)
    value_text, comma, key_text = raw.rpartition(",")
    if not comma:
        return None
    key = parse_key(key_text)
    if key is None:
        return None
    if value_text == _NULL:
        return Position(None, key) if nullable else None
    if not _TIME.fullmatch(value_text):
        return None
    try:
        value = datetime.fromisoformat(value_text).replace(tzinfo=UTC)
    except ValueError:  # 2026-02-30 and the like
        return None
    if value.year < _FIRST_YEAR:
        return None
    return Position(value, key)


def page_request(
    args: Any,
    notes: list[str],
    *,
    by_id: bool,
    nullable: bool,
    parse_key: Callable[[str], Any],
    page_size: int,
) -> PageRequest:
    """The rows a list page is asked for: ``after``, ``before`` or ``page``.

    A key that does not parse as this list's (a time and an id for a time sort,
    an id for an id sort; another sort's key, text, an id of the wrong type), or
    both ``after`` and ``before``, shows page 1 with a note naming the value and
    the form expected (R-ADM-151, R-ADM-31).

    Args:
        args: The query string mapping.
        notes: The page's notes; a note is appended for an ignored value.
        by_id: The list is sorted by the id alone.
        nullable: The sort column can be NULL (``null,<id>`` keys).
        parse_key: Parses an id; returns None for text that is not one.
        page_size: Rows on one page.
    """
    page = page_number(args, notes)
    given = {
        name: args[name].strip()
        for name in ("after", "before")
        if isinstance(args.get(name), str) and args[name].strip()
    }
    if not given:
        return PageRequest(page=page, offset=(page - 1) * page_size)
    if len(given) > 1:
        notes.append(
            "ignored after and before: use one of them; showing the first page"
        )
        return PageRequest(page=1)
    ((name, raw),) = given.items()
    position = _parse_position(raw, by_id=by_id, nullable=nullable, parse_key=parse_key)
    if position is None:
        form = (
            "the id of a listed row"
            if by_id
            else "YYYY-MM-DDTHH:MM:SS.ffffff,<id>"
            + (" or null,<id>" if nullable else "")
        )
        notes.append(
            f"ignored {name} {quoted(raw)}: use {form}; showing the first page"
        )
        return PageRequest(page=1)
    if name == "after":
        return PageRequest(page=page, after=position)
    return PageRequest(page=page, before=position)


@dataclasses.dataclass(frozen=True)
class ListPage:
    """One page of a list and its links (R-ADM-150).

    Attributes:
        rows: The page's rows, in the list's order.
        page: The page's number as shown.
        next_args: The query arguments of the "next" link, or None.
        previous_args: Those of the "previous" link, or None.
        first_args: Those of the first page's link (the list's arguments without
            a key or page), or None on the first page.
    """

    rows: list[Any]
    page: int
    next_args: dict[str, Any] | None
    previous_args: dict[str, Any] | None
    first_args: dict[str, Any] | None


def read_list_page(
    read: Callable[..., list[Any]],
    request: PageRequest,
    *,
    page_size: int,
    token_of: Callable[[Any], str],
    link_args: dict[str, Any],
    notes: list[str],
) -> ListPage:
    """Read one page with ``read`` and make its next/previous/first links.

    Args:
        read: Reads rows: ``read(after=, before=, offset=, limit=)`` returns the
            rows in the list's order (a store function with its filters bound).
        request: What :func:`page_request` made of the query string.
        page_size: Rows on one page; one more is read to know whether more
            exist that way.
        token_of: The URL key of a row (:func:`position_token` of its values).
        link_args: The list's own query arguments (filters, sort), carried by
            every link.
        notes: The page's notes: a key with no rows after or before it says so.

    Returns:
        The page's rows (at most ``page_size``) and links.
    """
    rows = read(
        after=request.after,
        before=request.before,
        offset=request.offset,
        limit=page_size + 1,
    )
    page = request.page
    if request.before is not None:
        more_before = len(rows) > page_size
        rows = rows[-page_size:] if rows else rows
        if not rows:
            notes.append("no rows come before that row: showing the first page")
            rows = read(after=None, before=None, offset=0, limit=page_size + 1)
            return _first_page(rows, page_size, token_of, link_args)
        has_next, has_previous = True, more_before
        if not has_previous:
            page = 1  # the walk back reached the list's start
    else:
        has_next = len(rows) > page_size
        rows = rows[:page_size]
        has_previous = request.after is not None or page > 1
        if request.after is not None and not rows:
            notes.append("no rows come after that row: the list ends before it")
        elif request.after is None and page > 1 and not rows:
            notes.append(f"page {page} is past the end of the list: it has no rows")
    return ListPage(
        rows=rows,
        page=page,
        next_args=dict(
            link_args, after=token_of(rows[-1]), page=min(page + 1, MAX_PAGE)
        )
        if has_next and rows
        else None,
        previous_args=_previous(rows, page, has_previous, token_of, link_args),
        first_args=dict(link_args) if page > 1 or has_previous else None,
    )


def _previous(
    rows: list[Any],
    page: int,
    has_previous: bool,
    token_of: Callable[[Any], str],
    link_args: dict[str, Any],
) -> dict[str, Any] | None:
    if not has_previous or not rows:
        return None
    if page <= 2:
        return dict(link_args)  # the first page itself
    return dict(link_args, before=token_of(rows[0]), page=page - 1)


def _first_page(
    rows: list[Any],
    page_size: int,
    token_of: Callable[[Any], str],
    link_args: dict[str, Any],
) -> ListPage:
    """The list's first page from its first ``page_size + 1`` rows."""
    has_next = len(rows) > page_size
    rows = rows[:page_size]
    return ListPage(
        rows=rows,
        page=1,
        next_args=dict(link_args, after=token_of(rows[-1]), page=2)
        if has_next
        else None,
        previous_args=None,
        first_args=None,
    )
