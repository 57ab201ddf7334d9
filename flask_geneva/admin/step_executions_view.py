"""The step executions list (R-ADM-13) and an execution's detail page (R-ADM-14).

Only reads (R-ADM-32); the filtering and the detail's content live in
:mod:`flask_geneva.admin.executions`.
"""

from __future__ import annotations

import functools
from typing import Any

from flask import abort
from flask import request
from flask_admin import expose

import flask_geneva.admin.filters as workflow_filters
from flask_geneva.admin.base_view import GenevaView
from flask_geneva.admin.base_view import shows
from flask_geneva.admin.children_panel import parked_for
from flask_geneva.admin.csrf import action_form
from flask_geneva.admin.executions import LIST_FLAGS
from flask_geneva.admin.executions import cursor_display
from flask_geneva.admin.executions import execution_detail
from flask_geneva.admin.executions import filter_executions
from flask_geneva.admin.executions import load_execution
from flask_geneva.admin.executions import recorded_error_message
from flask_geneva.admin.keyset_pages import page_request
from flask_geneva.admin.keyset_pages import position_token
from flask_geneva.admin.keyset_pages import read_list_page
from flask_geneva.admin.limits import limit_wait
from flask_geneva.admin.limits import waited_limit_name
from flask_geneva.admin.list_counts import match_label
from flask_geneva.admin.list_params import PAGE_SIZE
from flask_geneva.admin.row_display import error_class_of
from flask_geneva.admin.row_display import metadata_of
from flask_geneva.admin.signal_display import waiting_line
from flask_geneva.core import clock
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.ext.app_state import current_state
from flask_geneva.models import StepExecutionState

__all__ = ["CURSOR_PREVIEW_CHARS", "ERROR_PREVIEW_CHARS", "StepExecutionsView"]

#: Characters of an error message shown in the list; the whole of it on hover.
ERROR_PREVIEW_CHARS = 160
#: Characters of an error message put into the hover title at most.
_ERROR_TITLE_CHARS = 4000
#: Characters of a cursor shown in the list's cell and put into its title.
CURSOR_PREVIEW_CHARS = 80
_CURSOR_TITLE_CHARS = 2000


def _one_line(text: str) -> str:
    """A cursor's pretty JSON on one line, cut at :data:`CURSOR_PREVIEW_CHARS`."""
    flat = " ".join(part.strip() for part in text.splitlines())
    cut = flat[:CURSOR_PREVIEW_CHARS]
    return cut + ("…" if cut != flat else "")


def _list_row(
    execution: Any, type_name: str, workflow_state: str, columns: Any
) -> dict[str, Any]:
    """One row of the executions list: its error class and message (R-ADM-44),
    whether it raised (R-ADM-121), waits for Resume (R-ADM-120) and its cursor
    (R-ADM-126)."""
    meta = metadata_of(execution, columns)[0]
    message = recorded_error_message(execution, meta)
    first_line = message.split("\n", 1)[0]
    preview = first_line[:ERROR_PREVIEW_CHARS]
    error_class = error_class_of(execution, columns)
    waits_for_resume = execution.state == "scheduled" and workflow_state == "paused"
    cursor = (
        cursor_display(execution.cursor)
        if columns.cursor and execution.cursor is not None
        else None
    )
    return {
        "execution": execution,
        "type": type_name,
        "error_class": error_class,
        "error_message": preview + ("…" if preview != message else ""),
        "error_title": message[:_ERROR_TITLE_CHARS],
        "raised": bool(error_class or message),
        "waits_for_resume": waits_for_resume,
        "overdue": execution.is_overdue and not waits_for_resume,
        # One line: the compact JSON cut to the cell, whole on hover.
        "cursor": _one_line(cursor["text"]) if cursor else None,
        "cursor_title": cursor["text"][:_CURSOR_TITLE_CHARS] if cursor else "",
        # A limit's waiter: "waiting for partner-api" (R-LIM-42).
        "limit": waited_limit_name(execution, columns),
        # A parked one: "waiting for a signal" or "waiting for children".
        "parked_for": parked_for(
            execution.__geneva__.workflow_classes.get(type_name), execution.step_name
        )
        if execution.state == "waiting"
        else None,
    }


class StepExecutionsView(GenevaView):
    """The step executions list (R-ADM-13) and an execution's detail page (R-ADM-14)."""

    @expose("/")
    def index(self) -> str:
        """Render the filtered, paged list, newest first (R-ADM-13)."""
        session = self.session
        columns = self._columns()
        execution_cls = self.geneva.StepExecution
        workflow_cls = self.geneva.Workflow
        config = current_state().config
        criteria, filters, notes = filter_executions(
            request.args,
            execution_cls=execution_cls,
            workflow_cls=workflow_cls,
            columns=columns,
            config=config,
            now=clock.now(),
        )
        # Newest id first; pages are read from the last (or first) row's id
        # along the primary key, never with OFFSET (R-ADM-150).
        listed = read_list_page(
            functools.partial(
                admin_queries.execution_list_page,
                session,
                execution_cls,
                workflow_cls,
                criteria,
            ),
            page_request(
                request.args,
                notes,
                by_id=True,
                nullable=False,
                parse_key=self._parse_key,
                page_size=PAGE_SIZE,
            ),
            page_size=PAGE_SIZE,
            token_of=lambda row: position_token(None, row[0].id, by_id=True),
            link_args=dict(filters),
            notes=notes,
        )
        # The match count, capped: never an unbounded COUNT(*) (R-ADM-127, 30);
        # past the cap PostgreSQL's estimate, "about 4.9 M" (R-ADM-152).
        cap = workflow_filters.COUNT_CAP  # read per request: tests lower it
        join_workflows = "type" in filters
        matched = admin_queries.count_execution_list(
            session,
            execution_cls,
            workflow_cls,
            criteria,
            cap=cap,
            join_workflows=join_workflows,
        )
        label = match_label(
            matched,
            cap,
            lambda: admin_queries.estimate_execution_list(
                session,
                execution_cls,
                workflow_cls,
                criteria,
                join_workflows=join_workflows,
                cap=cap,
            ),
        )
        return self.render(
            "geneva/admin/step_executions.html",
            executions=[
                _list_row(execution, type_name, workflow_state, columns)
                for execution, type_name, workflow_state in listed.rows
            ],
            match_count=min(matched, cap),
            match_label=label,
            show_cursor=bool(columns.cursor),
            filters=filters,
            notes=notes,
            page=listed.page,
            pager=listed,
            states=[state.value for state in StepExecutionState],
            known_types=sorted(self.geneva.workflow_classes),
            flags=LIST_FLAGS,
        )

    @expose("/<execution_id>")
    def detail(self, execution_id: str) -> str:
        """All stored columns of one execution and its neighbours (R-ADM-14)."""
        key = self._parse_key(execution_id)
        if key is None:
            abort(404)
        session = self.session
        execution = load_execution(session, self.geneva.StepExecution, key)
        if execution is None:
            abort(404)
        columns = self._columns()
        meta, problem = metadata_of(execution, columns)
        return self.render(
            "geneva/admin/step_execution_detail.html",
            **execution_detail(
                session,
                self.geneva,
                execution,
                meta=meta,
                metadata_problem=problem,
                error_class=error_class_of(execution, columns),
                config=current_state().config,
                now=clock.now(),
            ),
            action_form=action_form(),  # Recover on an in-progress one (R-HK-28)
            recover_shown=shows("recover", execution.workflow),  # R-ADM-213
            waiting=self._waiting(execution, columns),
            limit_wait=limit_wait(session, [execution], columns),  # R-LIM-42
        )

    def _waiting(self, execution: Any, columns: Any) -> Any:
        """A parked execution's "waiting for X since …" facts (R-WSIG-66)."""
        workflow_type = execution.workflow.type if execution.workflow else None
        workflow_cls = self.geneva.workflow_classes.get(workflow_type or "")
        steps = workflow_cls.step_collection() if workflow_cls is not None else None
        return waiting_line([execution], steps, columns, clock.now())
