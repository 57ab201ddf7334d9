"""The Limits page: who holds and who waits, per limit and key (R-LIM-45).

``GET <limits>/``: one row per (limit, key), most waiting first: running of the
cap, granted, waiting, the oldest wait and a rate limit's starts in its current
window (with the next start's time when the window is full), as ``flask geneva
limits`` prints them (R-LIM-40). Filters: ``limit`` (a name), ``key`` (a
prefix), ``busy`` (only keys with a running, granted or waiting execution). At most
:data:`~flask_geneva.db.queries.limits.MAX_OVERVIEW_KEYS` rows, then "… N more
keys"; declared limits without a key row are listed as idle. A value that
cannot be applied is ignored with a note (R-ADM-31).

``GET <limits>/key?limit=NAME&key=KEY``: that key's counters and its waiters
(granted ones first, then in grant order), each linking to its execution and
workflow. The executions list has no filter on what an execution waits for, so
the key's row links here.

Without the ``add_flow_limits`` unit both pages say how to install it and
query nothing. Only reads, through :mod:`flask_geneva.db.queries.limits`
(R-ADM-32).
"""

from __future__ import annotations

from typing import Any

from flask import request
from flask_admin import expose

from flask_geneva.admin.base_view import GenevaView
from flask_geneva.admin.list_params import quoted
from flask_geneva.core.durations import format_interval
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.engine.limits.describe import waited_limit
from flask_geneva.engine.limits.describe import waiting_sentence

__all__ = [
    "FILTERS",
    "NOT_INSTALLED_NOTE",
    "LimitsView",
    "limit_filters",
    "limit_wait",
    "waited_limit_name",
]

#: The page's query-string filters.
FILTERS = ("limit", "key", "busy")
#: What the admin says where the ``add_flow_limits`` unit is missing.
NOT_INSTALLED_NOTE = (
    "Limits are not installed in this database: run `flask geneva install` and "
    "then `flask db upgrade` to add them (install unit add_flow_limits). Until "
    "then a step declared with a limit fails and pauses its workflow instead of "
    "running unlimited."
)
_MAX_NAME = 64  # limit_name is VARCHAR(64)
_MAX_KEY = 255  # limit_key is VARCHAR(255)


def limit_filters(args: Any) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The page's filters as ``limit_overview`` arguments (R-LIM-45).

    Args:
        args: The request's query string.

    Returns:
        ``(criteria, kept, notes)``: the keyword arguments for
        :func:`~flask_geneva.db.queries.limits.limit_overview` (``name``,
        ``key_prefix``, ``busy_only``), the accepted values (to refill the form;
        an ignored one is never echoed back) and notes for ignored values.
    """
    criteria: dict[str, Any] = {"name": None, "key_prefix": None, "busy_only": False}
    kept: dict[str, str] = {}
    notes: list[str] = []
    for field, cap, argument in (
        ("limit", _MAX_NAME, "name"),
        ("key", _MAX_KEY, "key_prefix"),
    ):
        raw = args.get(field)
        value = raw.strip() if isinstance(raw, str) else ""
        if not value:
            continue
        if "\x00" in value:  # PostgreSQL text cannot hold NUL (R-ADM-31)
            notes.append(f"ignored {field} {quoted(value)}: contains a NUL byte")
        elif len(value) > cap:
            notes.append(
                f"ignored {field} {quoted(value)}: longer than {cap} characters"
            )
        else:
            criteria[argument] = kept[field] = value
    if args.get("busy") in ("1", "on", "true"):
        criteria["busy_only"] = True
        kept["busy"] = "1"
    return criteria, kept, notes


def limit_wait(session: Any, executions: list[Any], columns: Any) -> Any:
    """The newest limit waiter among ``executions`` and its sentence (R-LIM-42).

    Args:
        session: The admin's session (plain reads).
        executions: Executions on the page, oldest first.
        columns: The optional-column flags; without the unit there is none.

    Returns:
        None, or ``{"execution_id", "step", "limit", "key", "sentence"}`` for
        the workflow and execution pages.
    """
    if not columns.flow_limits:
        return None
    for execution in reversed(executions):
        sentence = waiting_sentence(session, execution)
        waited = waited_limit(execution) if sentence is not None else None
        if waited is not None:
            return {
                "execution_id": execution.id,
                "step": execution.step_name,
                "limit": waited[0],
                "key": waited[1],
                "sentence": sentence,
            }
    return None


def waited_limit_name(execution: Any, columns: Any) -> str | None:
    """The limit a listed execution waits for, from its loaded row (R-LIM-42).

    The executions list's Next run column reads "waiting for partner-api"
    instead of an overdue time. None without the unit.
    """
    if not columns.flow_limits:
        return None
    waited = waited_limit(execution)
    return None if waited is None else waited[0]


def _settings_text(limit: Any) -> str:
    """``concurrency 5``, ``rate 100 per 1 min`` or both."""
    parts = []
    if limit.concurrency is not None:
        parts.append(f"concurrency {limit.concurrency}")
    if limit.rate is not None and limit.per is not None:
        parts.append(f"rate {limit.rate} per {format_interval(limit.per)}")
    return ", ".join(parts)


class LimitsView(GenevaView):
    """``GET <limits>/`` and ``GET <limits>/key`` (R-LIM-45)."""

    @expose("/")
    def index(self) -> str:
        """Render the keys of the limits, filtered, most waiting first."""
        declared = self.geneva.limits
        if not self._columns().flow_limits:
            return self._not_installed(declared)
        criteria, kept, notes = limit_filters(request.args)
        session = self.session
        overview = limit_reads.limit_overview(
            session, limit=limit_reads.MAX_OVERVIEW_KEYS, **criteria
        )
        totals = limit_reads.limit_totals(session)
        stored = [t.limit_name for t in totals]
        shown_names = (
            [criteria["name"]] if criteria["name"] is not None else list(declared)
        )
        with_keys = set(stored)
        return self.render(
            "geneva/admin/limits.html",
            installed=True,
            not_installed_note="",
            keys=[self._row(row, declared) for row in overview.keys],
            more_keys=overview.more,
            # How many keys match, as every list says (R-ADM-127).
            match_count=overview.total,
            idle=[
                {"name": name, "settings": _settings_text(declared[name])}
                for name in shown_names
                if name in declared and name not in with_keys
            ],
            filters=kept,
            notes=notes,
            names=sorted(set(declared) | with_keys),
            max_keys=limit_reads.MAX_OVERVIEW_KEYS,
        )

    @expose("/key")
    def key(self) -> str:
        """Render one key's counters and its waiters."""
        declared = self.geneva.limits
        if not self._columns().flow_limits:
            return self._not_installed(declared)
        name = request.args.get("limit", "")
        key = request.args.get("key", "")
        session = self.session
        activity = None
        waiters: list[Any] = []
        if name and "\x00" not in name + key and len(key) <= _MAX_KEY:
            activity = limit_reads.key_activity(session, name, key)
            waiters = limit_reads.key_waiters(
                session, name, key, limit=limit_reads.MAX_OVERVIEW_KEYS
            )
        return self.render(
            "geneva/admin/limit_key.html",
            name=name,
            key=key,
            row=self._row(activity, declared) if activity is not None else None,
            waiters=waiters,
            max_waiters=limit_reads.MAX_OVERVIEW_KEYS,
        )

    def _row(self, row: limit_reads.KeyActivity, declared: Any) -> dict[str, Any]:
        """A key row with the cap this process declares (else the stored one)."""
        limit = declared.get(row.limit_name)
        return {
            "activity": row,
            "concurrency": limit.concurrency
            if limit is not None and limit.concurrency is not None
            else row.concurrency,
            "declared": limit is not None,
            # The window the key's starts are counted in (R-LIM-23).
            "per": format_interval(row.per) if row.per is not None else "",
        }

    def _not_installed(self, declared: Any) -> str:
        return self.render(
            "geneva/admin/limits.html",
            installed=False,
            not_installed_note=NOT_INSTALLED_NOTE,
            keys=[],
            more_keys=0,
            match_count=0,
            idle=[],
            filters={},
            notes=[],
            names=list(declared),
            max_keys=limit_reads.MAX_OVERVIEW_KEYS,
        )
