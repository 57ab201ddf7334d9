"""The signals list: every workflow signal across workflows (R-WSIG-69).

Filters: ``state`` (pending, claimed, consumed, expired), ``name`` (exact),
``type`` (the workflow's class), ``received_from`` / ``received_to`` (dates or
datetimes in UTC, as the workflows list's created range). Newest first, one page
plus one row along the primary key (``created_at`` for UUID keys); the match
count reads at most 10,001 rows, never an unbounded ``COUNT(*)`` (R-ADM-127,
R-ADM-30). A value that cannot be applied is ignored with a note
(R-ADM-31). Without the ``add_workflow_signals`` unit the page says how to
install it and queries nothing (R-WSIG-70). Only reads (R-ADM-32).
"""

from __future__ import annotations

import functools
from typing import Any

from flask import request
from flask_admin import expose

import flask_geneva.admin.filters as workflow_filters
from flask_geneva.admin.base_view import GenevaView
from flask_geneva.admin.filters import is_date
from flask_geneva.admin.filters import range_bound
from flask_geneva.admin.keyset_pages import ListPage
from flask_geneva.admin.keyset_pages import page_request
from flask_geneva.admin.keyset_pages import position_token
from flask_geneva.admin.keyset_pages import read_list_page
from flask_geneva.admin.list_counts import match_label
from flask_geneva.admin.list_params import PAGE_SIZE
from flask_geneva.admin.list_params import quoted
from flask_geneva.admin.signal_display import NOT_INSTALLED_NOTE
from flask_geneva.admin.signal_display import SIGNAL_STATES
from flask_geneva.admin.signal_display import signal_row
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.db.queries import admin_workflow_signals as admin_signal_queries

__all__ = ["FILTERS", "SignalsView"]

#: The list's query-string filters.
FILTERS = ("state", "name", "type", "received_from", "received_to")
#: Names offered as suggestions come from this many newest signals.
_NAME_SUGGESTIONS_FROM = 1000
_MAX_TEXT = 255  # name and type are VARCHAR(255)


class SignalsView(GenevaView):
    """``GET <signals>/``: the workflow signals of every workflow (R-WSIG-69)."""

    @expose("/")
    def index(self) -> str:
        """Render one page of the filtered list, or the install note."""
        if not self._columns().workflow_signals:
            return self.render(
                "geneva/admin/signals.html",
                installed=False,
                not_installed_note=NOT_INSTALLED_NOTE,
                **self._empty_context(),
            )
        args = request.args
        notes: list[str] = []
        params = {
            name: args[name].strip()
            for name in FILTERS
            if isinstance(args.get(name), str) and args[name].strip()
        }
        criteria: dict[str, Any] = {}
        kept: dict[str, str] = {}
        descriptions: list[str] = []
        state = params.get("state")
        if state is not None:
            if state in SIGNAL_STATES:
                criteria["state"] = kept["state"] = state
                descriptions.append(f"state is {state}")
            else:
                notes.append(
                    f"ignored state {quoted(state)}: use {', '.join(SIGNAL_STATES)}"
                )
        for field, column, what in (
            ("name", "name", "name"),
            ("type", "workflow_type", "workflow class"),
        ):
            value = params.get(field)
            if value is None:
                continue
            if "\x00" in value:  # PostgreSQL text cannot hold NUL (R-ADM-31)
                notes.append(f"ignored {field} {quoted(value)}: contains a NUL byte")
                continue
            if len(value) > _MAX_TEXT:
                notes.append(
                    f"ignored {field} {quoted(value)}: longer than {_MAX_TEXT} "
                    "characters"
                )
                continue
            criteria[column] = kept[field] = value
            descriptions.append(f"{what} is {value!r}")
        start = range_bound(params, "received_from", notes, end=False)
        if start is not None:
            criteria["received_from"] = start
            kept["received_from"] = params["received_from"]
            descriptions.append(f"received at or after {start:%Y-%m-%d %H:%M:%S} UTC")
        end = range_bound(params, "received_to", notes, end=True)
        if end is not None:
            kept["received_to"] = params["received_to"]
            if is_date(params["received_to"]):
                criteria["received_before"] = end
                descriptions.append(f"received before {end:%Y-%m-%d %H:%M:%S} UTC")
            else:
                criteria["received_until"] = end
                descriptions.append(
                    f"received at or before {end:%Y-%m-%d %H:%M:%S} UTC"
                )
        session = self.session
        signal_cls = self.geneva.WorkflowSignal
        by_created_at = self.geneva.key_type == "uuid"
        # Newest first; pages are read from the last (or first) row's key along
        # the primary key (created_at then id for UUID keys), never with OFFSET
        # (R-ADM-150).
        listed = read_list_page(
            functools.partial(
                admin_signal_queries.signal_list_page,
                session,
                signal_cls,
                self.geneva.Workflow,
                order_by_created_at=by_created_at,
                **criteria,
            ),
            page_request(
                args,
                notes,
                by_id=not by_created_at,
                nullable=False,
                parse_key=self._parse_key,
                page_size=PAGE_SIZE,
            ),
            page_size=PAGE_SIZE,
            token_of=lambda row: position_token(
                row[0].created_at, row[0].id, by_id=not by_created_at
            ),
            link_args=dict(kept),
            notes=notes,
        )
        cap = workflow_filters.COUNT_CAP  # read per request: tests lower it
        matched = admin_signal_queries.count_signal_list(
            session, signal_cls, self.geneva.Workflow, cap=cap, **criteria
        )
        # Past the cap PostgreSQL's estimate, "about 4.9 M" (R-ADM-152).
        label = match_label(
            matched,
            cap,
            lambda: admin_signal_queries.estimate_signal_list(
                session, signal_cls, self.geneva.Workflow, cap=cap, **criteria
            ),
        )
        signals = []
        for signal, workflow_type, workflow_state in listed.rows:
            row = signal_row(signal)
            row["workflow_type"] = workflow_type
            row["workflow_state"] = workflow_state
            signals.append(row)
        return self.render(
            "geneva/admin/signals.html",
            installed=True,
            not_installed_note="",
            signals=signals,
            match_count=min(matched, cap),
            match_label=label,
            filters=kept,
            filter_descriptions=descriptions,
            notes=notes,
            page=listed.page,
            pager=listed,
            states=SIGNAL_STATES,
            known_types=self._types(),
            names=admin_signal_queries.signal_names_stored(
                session, self.geneva.WorkflowSignal, limit=_NAME_SUGGESTIONS_FROM
            ),
        )

    def _types(self) -> list[str]:
        """The defined classes, then stored classes whose code is gone."""
        defined = sorted(self.geneva.workflow_classes)
        stored = admin_queries.workflow_types_stored(self.session, self.geneva.Workflow)
        return defined + [name for name in stored if name not in defined]

    def _empty_context(self) -> dict[str, Any]:
        return {
            "signals": [],
            "match_count": 0,
            "match_label": "0",
            "filters": {},
            "filter_descriptions": [],
            "notes": [],
            "page": 1,
            "pager": ListPage([], 1, None, None, None),
            "states": SIGNAL_STATES,
            "known_types": [],
            "names": [],
        }
