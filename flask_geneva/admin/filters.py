"""The filters of the workflows list and its "all matching" bulk action.

The list page (R-ADM-11) and the bulk action on every workflow matching the current
filter (R-ADM-23) share :func:`parse_workflow_filters`, so a POST re-validates the
filters exactly as the list did. Counts are capped instead of running an unbounded
``COUNT(*)`` (R-ADM-30), and the bulk action walks the matching ids with keyset
pagination over ``id`` (never ``OFFSET``: rows leave a state filter while we act).
The statements and the conditions beyond a column comparison are built in
:mod:`flask_geneva.db.queries.admin_filters`.

Everything here only reads (R-ADM-32).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from datetime import UTC
from datetime import date
from datetime import datetime
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from flask import current_app
from sqlalchemy import orm

from flask_geneva.admin.list_params import quoted
from flask_geneva.admin.presenters import recorded_exception
from flask_geneva.core.heroes import hero_type_of
from flask_geneva.core.heroes import hero_type_spellings
from flask_geneva.core.keys import format_hero
from flask_geneva.core.keys import split_hero
from flask_geneva.db.queries import admin_filters as admin_filter_queries
from flask_geneva.models import InvalidJSON
from flask_geneva.models import WorkflowState

__all__ = [
    "COUNT_CAP",
    "ERROR_CLASS_CAVEAT",
    "FILTER_NAMES",
    "WorkflowFilters",
    "capped_count",
    "error_class_matches",
    "format_count",
    "hero_admin_urls",
    "is_date",
    "latest_error_classes",
    "matching_id_batches",
    "parse_workflow_filters",
    "range_bound",
]

#: Counts stop here: more matching rows show as "10,000+" (R-ADM-30).
COUNT_CAP = 10_000
#: The query-string (and bulk form) parameters that filter the workflows list.
FILTER_NAMES = (
    "type",
    "state",
    "hero_type",
    "hero_id",
    "created_from",
    "created_to",
    "error_class",
    "overdue",
    "q",
    "parent",
)
#: Shown whenever an error class filter is applied (R-SE-21).
ERROR_CLASS_CAVEAT = (
    "the error class filter matches the error_class_name column, which failed "
    "and skipped executions have; reattempted executions keep their error in "
    "metadata only and are not matched"
)
#: What the created range accepts, quoted in the note of an ignored value.
DATE_FORMAT_HELP = "YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC unless an offset is given)"
_MAX_TEXT = 255  # the filtered text columns are VARCHAR(255)
_FLAG_ON = ("1", "on", "yes", "true")
_FLAG_OFF = ("0", "off", "no", "false")
# MariaDB DATETIME holds years 1000..9999; one day is added to an end date.
_FIRST_YEAR, _LAST_YEAR = 1000, 9998


@dataclasses.dataclass(frozen=True)
class WorkflowFilters:
    """The validated filters of one workflows-list request (R-ADM-11).

    Attributes:
        params: The accepted filter parameters (stripped, non-empty), in
            :data:`FILTER_NAMES` order: the list repeats them in its inputs and
            links, the bulk form carries them as hidden fields. An ignored value
            is left out, so it is never echoed back into a form field.
        notes: One sentence per ignored value, naming the value and what is
            accepted (plain text; templates escape it). Any note stops the
            "all matching" bulk action (R-ADM-23).
        conditions: SQL conditions on the workflow class of the accepted values.
        descriptions: One human line per accepted filter, e.g. ``"state = paused"``.
        caveats: Sentences on what an accepted filter does not match, e.g. the
            errors of reattempted executions (R-SE-21); shown, never blocking.
    """

    params: dict[str, str]
    notes: list[str]
    conditions: list[Any]
    descriptions: list[str]
    caveats: list[str] = dataclasses.field(default_factory=list)

    @property
    def is_active(self) -> bool:
        """True when at least one accepted filter narrows the list."""
        return bool(self.conditions)


def parse_workflow_filters(
    args: Mapping[str, str],
    *,
    workflow_cls: Any,
    execution_cls: Any,
    parse_key: Callable[[str], Any],
    has_error_class_column: bool,
    now: datetime,
    has_child_workflows: bool = False,
) -> WorkflowFilters:
    """Validate the list filters of ``args`` into SQL conditions (R-ADM-11).

    Invalid values (a NUL byte, text longer than the column, an unknown state, an
    id that is not a key, a date that does not parse) are ignored with a note; they
    never raise. Filters: ``type`` (class), ``state``, ``hero_type``, ``hero_id``,
    ``created_from`` / ``created_to`` (dates or datetimes in UTC; a date as the end
    includes that whole day), ``error_class`` (the class of the workflow's latest
    recorded error, see :func:`error_class_matches`), ``overdue`` (has a
    scheduled execution with ``scheduled_for`` before ``now``) and ``q`` (a
    workflow id or hero id, a hero written ``Type#id`` as the list and the CLI
    show it, or else text in a failed or skipped execution's error message;
    R-ADM-50). Hero types match ignoring case.

    Args:
        args: The query string of a GET or the form of a POST (other keys ignored).
        workflow_cls: The Workflow model.
        execution_cls: The StepExecution model.
        parse_key: Turns id text into a key, or None when it is not a valid key.
        has_error_class_column: The executions table has ``error_class_name``.
        now: Aware UTC time of the request, for the ``overdue`` filter.
        has_child_workflows: The ``add_child_workflows`` unit is installed
            (the ``parent`` filter reads ``parent_workflow_id``).

    Returns:
        The accepted conditions and parameters, and the notes.
    """
    params: dict[str, str] = {}
    for name in FILTER_NAMES:
        raw = args.get(name, "")
        given = raw.strip() if isinstance(raw, str) else ""
        if given:
            params[name] = given
    accepted: set[str] = set()
    notes: list[str] = []
    conditions: list[Any] = []
    descriptions: list[str] = []
    caveats: list[str] = []

    def text(name: str, label: str) -> str | None:
        value = params.get(name)
        if value is None:
            return None
        if "\x00" in value:  # PostgreSQL text cannot hold NUL
            notes.append(f"ignored {name} filter {value!r}: contains a NUL byte")
            return None
        if len(value) > _MAX_TEXT:
            notes.append(
                f"ignored {name} filter {value[:40]!r}…: longer than {_MAX_TEXT} "
                "characters"
            )
            return None
        accepted.add(name)
        descriptions.append(f"{label} = {value}")
        return value

    value = text("type", "class")
    if value is not None:
        conditions.append(workflow_cls.type == value)
    state = params.get("state")
    allowed = [member.value for member in WorkflowState]
    if state is not None and state not in allowed:
        notes.append(f"ignored state filter {state!r}: not one of {', '.join(allowed)}")
    elif state is not None:
        accepted.add("state")
        descriptions.append(f"state = {state}")
        conditions.append(workflow_cls.state == state)
    value = text("hero_type", "hero type")
    if value is not None:
        conditions.append(
            admin_filter_queries.hero_type_in(
                workflow_cls, hero_type_spellings(workflow_cls, value)
            )
        )
    hero_id = params.get("hero_id")
    if hero_id is not None:
        key = parse_key(hero_id)
        if key is None:
            notes.append(f"ignored hero_id filter {hero_id!r}: not a valid id")
        else:
            accepted.add("hero_id")
            descriptions.append(f"hero id = {key}")
            conditions.append(workflow_cls.hero_id == key)
    start = range_bound(params, "created_from", notes, end=False)
    if start is not None:
        accepted.add("created_from")
        descriptions.append(f"created at or after {_utc_text(start)}")
        conditions.append(workflow_cls.created_at >= start)
    end = range_bound(params, "created_to", notes, end=True)
    if end is not None:
        accepted.add("created_to")
        if is_date(params["created_to"]):
            descriptions.append(f"created before {_utc_text(end)}")
            conditions.append(workflow_cls.created_at < end)
        else:
            descriptions.append(f"created at or before {_utc_text(end)}")
            conditions.append(workflow_cls.created_at <= end)
    error_class = params.get("error_class")
    if error_class is not None and not has_error_class_column:
        notes.append(
            f"ignored error_class filter {error_class!r}: the step executions table "
            "has no error_class_name column"
        )
    else:
        value = text("error_class", "latest error class")
        if value is not None:
            if "." not in value:
                descriptions[-1] += f" or <module>.{value}"
            conditions.append(
                admin_filter_queries.latest_error_class_is(
                    workflow_cls, execution_cls, value
                )
            )
            caveats.append(ERROR_CLASS_CAVEAT)
    flag = params.get("overdue")
    if flag is not None and flag.lower() in _FLAG_ON + _FLAG_OFF:
        accepted.add("overdue")
    if flag is not None and flag.lower() in _FLAG_ON:
        descriptions.append("has an overdue execution")
        conditions.append(
            admin_filter_queries.has_overdue_execution(workflow_cls, execution_cls, now)
        )
    elif flag is not None and flag.lower() not in _FLAG_OFF:
        notes.append(f"ignored overdue filter {flag!r}: use 1 (on) or 0 (off)")
    search = text("q", "search") if "q" in params else None
    if search is not None:
        descriptions.pop()  # replaced by what the search turned out to be
        hero = split_hero(search)
        key = parse_key(search) if hero is None else parse_key(hero[1])
        if hero is not None and key is not None:
            descriptions.append(f"hero = {format_hero(hero[0], key)}")
            conditions.append(
                admin_filter_queries.hero_type_in(
                    workflow_cls, hero_type_spellings(workflow_cls, hero[0])
                )
            )
            conditions.append(workflow_cls.hero_id == key)
        elif hero is None and key is not None:
            descriptions.append(f"workflow id or hero id = {key}")
            conditions.append(admin_filter_queries.id_or_hero_id_is(workflow_cls, key))
        elif hero is not None and hero[0].replace(".", "_").isidentifier():
            notes.append(f"ignored search {search!r}: not a valid hero id")
            accepted.discard("q")
        elif hero is None and search.isdigit():
            notes.append(
                f"ignored search {search!r}: not a valid workflow id or hero id"
            )
            accepted.discard("q")
        else:
            # Neither an id nor a hero: the text of a recorded error (R-ADM-50).
            descriptions.append(f"error message contains {search!r}")
            caveats.append(
                "the search reads the newest "
                f"{admin_filter_queries.ERROR_SEARCH_DEPTH:,} recorded errors "
                "(failed or skipped executions); older errors are not searched"
            )
            conditions.append(
                admin_filter_queries.error_text_contains(
                    workflow_cls, execution_cls, search
                )
            )
    parent = params.get("parent")
    if parent is not None:
        key = parse_key(parent)
        if not has_child_workflows:
            notes.append(
                f"ignored parent filter {quoted(parent)}: child workflows are not "
                "installed in this database (install unit add_child_workflows: "
                "flask geneva install, then flask db upgrade)"
            )
        elif key is None:
            notes.append(
                f"ignored parent filter {quoted(parent)}: not a valid workflow id"
            )
        else:
            accepted.add("parent")
            descriptions.append(f"child of workflow {key}")
            conditions.append(workflow_cls.parent_workflow_id == key)
    kept = {name: value for name, value in params.items() if name in accepted}
    return WorkflowFilters(kept, notes, conditions, descriptions, caveats)


def is_date(raw: str) -> bool:
    """Whether ``raw`` is a date without a time (a range's end then means the
    whole day: before the next midnight).

    Args:
        raw: The value of a ``..._from``/``..._to`` parameter.
    """
    try:
        date.fromisoformat(raw)
    except ValueError:
        return False
    return True


def range_bound(
    params: dict[str, str], name: str, notes: list[str], *, end: bool
) -> datetime | None:
    """Parse a date-range bound of a list filter (R-ADM-11, R-WSIG-69).

    A date means midnight UTC; as the end (``end=True``) the next midnight. A
    value that does not parse, or a year outside what every database stores,
    is ignored with a note naming it and :data:`DATE_FORMAT_HELP`.

    Args:
        params: The filter values by name.
        name: The bound's parameter name (``created_from``, ``received_to``...).
        notes: The page's notes; a note is appended for an ignored value.
        end: Whether this is the range's end.

    Returns:
        The aware UTC instant, or None (absent or ignored).
    """
    raw = params.get(name)
    if raw is None:
        return None
    try:
        if is_date(raw):
            day = date.fromisoformat(raw)
            value = datetime(day.year, day.month, day.day, tzinfo=UTC)
        else:
            value = datetime.fromisoformat(raw)
            value = (
                value.replace(tzinfo=UTC)
                if value.tzinfo is None
                else value.astimezone(UTC)
            )
    except (ValueError, OverflowError):
        notes.append(
            f"ignored {name} {raw!r}: not a date or datetime; use {DATE_FORMAT_HELP}"
        )
        return None
    if not _FIRST_YEAR <= value.year <= _LAST_YEAR:
        notes.append(
            f"ignored {name} {raw!r}: the year must be from {_FIRST_YEAR} to "
            f"{_LAST_YEAR}; use {DATE_FORMAT_HELP}"
        )
        return None
    if end and is_date(raw):
        value += timedelta(days=1)
    return value


def _utc_text(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


#: Re-exported for the executions list (R-SE-20).
error_class_matches = admin_filter_queries.error_class_matches


def latest_error_classes(
    session: orm.Session,
    execution_cls: Any,
    workflow_ids: Sequence[Any],
    *,
    has_error_class_column: bool,
    has_metadata_column: bool,
) -> dict[Any, str]:
    """Return ``{workflow id: class of its latest recorded error}`` in one query.

    Workflows without a recorded error are absent. The class comes from
    ``error_class_name`` or, without that column, from the ``"exception"``
    metadata (R-SE-20); an error with no class maps to ``""``.

    Args:
        session: The admin's session (read only).
        execution_cls: The StepExecution model.
        workflow_ids: The ids of one list page.
        has_error_class_column: The executions table has ``error_class_name``.
        has_metadata_column: The executions table has ``metadata``.
    """
    rows = admin_filter_queries.latest_error_sources(
        session,
        execution_cls,
        workflow_ids,
        has_error_class_column=has_error_class_column,
        has_metadata_column=has_metadata_column,
    )
    return {workflow_id: _class_text(value) for workflow_id, value in rows}


def _class_text(value: Any) -> str:
    if value is None or isinstance(value, InvalidJSON):
        return ""
    if isinstance(value, str):
        return value
    return str(recorded_exception(value).get("class") or "")


def capped_count(
    session: orm.Session, workflow_cls: Any, filters: WorkflowFilters
) -> tuple[int, bool]:
    """Count matching workflows, stopping after :data:`COUNT_CAP` (R-ADM-30).

    Returns:
        ``(count, more)``: the count, at most ``COUNT_CAP``, and whether more
        workflows match than that.
    """
    total = admin_filter_queries.matching_workflow_count(
        session, workflow_cls, filters.conditions, COUNT_CAP
    )
    return min(total, COUNT_CAP), total > COUNT_CAP


def format_count(count: int, more: bool) -> str:
    """``"1,234"``, or ``"10,000+"`` for a capped count (R-ADM-30)."""
    return f"{count:,}+" if more else f"{count:,}"


def matching_id_batches(
    session: orm.Session,
    workflow_cls: Any,
    filters: WorkflowFilters,
    *,
    batch_size: int,
    created_until: datetime,
) -> Iterator[list[Any]]:
    """Yield the ids of matching workflows, ``batch_size`` at a time (R-ADM-23).

    Keyset pagination: each batch is ``WHERE <filters> AND id > <last id> ORDER BY
    id LIMIT batch_size``, so workflows that stop matching while the caller acts
    on earlier batches (a state filter) shift nothing. Workflows created after
    ``created_until`` are left out, so a busy system cannot keep the walk going.
    Each batch is read when the caller asks for it; the caller ends the reading
    transaction before acting.

    Args:
        session: The admin's session.
        workflow_cls: The Workflow model.
        filters: The validated filters.
        batch_size: Ids per batch, ``GENEVA_HOUSEKEEPING_BATCH_SIZE``.
        created_until: Aware UTC instant the action was confirmed.
    """
    return admin_filter_queries.matching_workflow_id_batches(
        session,
        workflow_cls,
        filters.conditions,
        batch_size=batch_size,
        created_until=created_until,
    )


def hero_admin_urls(rows: Sequence[Any]) -> dict[tuple[str, str], str]:
    """Map ``(hero_type, str(hero_id))`` of ``rows`` to the hero's admin page URL.

    The app's Flask-Admin model views (found through the app's registered view
    functions, which are bound methods of their views) are searched for an
    accessible one whose model's hero type (``__geneva_hero_type__`` or base
    class name) is the row's ``hero_type``; it links to its details view when
    enabled, else its edit view. Heroes without such a view are absent
    (R-ADM-11).

    Args:
        rows: Workflows (anything with ``hero_type`` and ``hero_id``).
    """
    wanted = {
        row.hero_type
        for row in rows
        if row.hero_type is not None and row.hero_id is not None
    }
    if not wanted:
        return {}
    views: dict[str, tuple[Any, str]] = {}
    for view in _model_views():
        model = getattr(view, "model", None)
        if model is None or sa.inspect(model, raiseerr=False) is None:
            continue
        if getattr(view, "can_view_details", False):
            target = "details_view"
        elif getattr(view, "can_edit", False):
            target = "edit_view"
        else:
            continue
        hero_type = hero_type_of(model)
        if hero_type in wanted and hero_type not in views and view.is_accessible():
            views[hero_type] = (view, target)
    urls: dict[tuple[str, str], str] = {}
    for row in rows:
        found = views.get(row.hero_type) if row.hero_id is not None else None
        if found is not None:
            view, target = found
            urls[(row.hero_type, str(row.hero_id))] = view.get_url(
                f"{view.endpoint}.{target}", id=row.hero_id
            )
    return urls


def _model_views() -> list[Any]:
    """The app's Flask-Admin model views, in registration order, each once.

    Flask-Admin registers every exposed method of a view as a Flask view
    function bound to the view, so ``app.view_functions`` (public Flask API)
    names them all without reading Flask-Admin's private view list.
    """
    from flask_admin.model import BaseModelView

    seen: dict[int, Any] = {}
    for function in current_app.view_functions.values():
        view = getattr(function, "__self__", None)
        if isinstance(view, BaseModelView) and id(view) not in seen:
            seen[id(view)] = view
    return list(seen.values())
