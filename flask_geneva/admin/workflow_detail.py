"""A workflow's page (R-ADM-12): step plan, executions, chains, chart, buttons.

The execution timeline is paged (R-ADM-57): ``?page=1`` (the default) holds the
newest :data:`TIMELINE_PAGE_SIZE` executions, each further page the next older
ones; the chart draws the rows of the page shown.

A parked step says what it waits for, and the page lists the workflow's
signals with a "Deliver signal…" form (R-WSIG-66..68); a step waiting for a
limit's slot says which, where it stands and since when (R-LIM-42). A child
links its parent and a parent lists its children (R-CHD-61).

Only reads (R-ADM-32); the buttons post to
:class:`~flask_geneva.admin.flow_control_actions.WorkflowActionEndpoint`.
"""

from __future__ import annotations

import math
from typing import Any

from flask import abort
from flask import get_template_attribute
from flask import request
from flask import url_for
from flask_admin import expose

from flask_geneva.admin.access import permits
from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.children_panel import children_panel
from flask_geneva.admin.children_panel import children_wait
from flask_geneva.admin.children_panel import parent_link
from flask_geneva.admin.csrf import action_form
from flask_geneva.admin.executions import cursor_display
from flask_geneva.admin.executions import recorded_backtrace
from flask_geneva.admin.executions import recorded_error_message
from flask_geneva.admin.flow_control_actions import disabled_reasons
from flask_geneva.admin.flow_control_actions import workflow_buttons
from flask_geneva.admin.limits import limit_wait
from flask_geneva.admin.list_params import note_past_the_end
from flask_geneva.admin.list_params import page_number
from flask_geneva.admin.list_params import quoted
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.admin.presenters import format_duration
from flask_geneva.admin.presenters import pretty_json
from flask_geneva.admin.presenters import recovery_sentence
from flask_geneva.admin.resume_at_form import resume_at_form
from flask_geneva.admin.row_display import error_class_of
from flask_geneva.admin.row_display import hero_reference_of
from flask_geneva.admin.row_display import metadata_of
from flask_geneva.admin.signal_delivery import signal_form
from flask_geneva.admin.signal_display import NOT_INSTALLED_NOTE
from flask_geneva.admin.signal_display import signal_panel
from flask_geneva.admin.signal_display import waiting_line
from flask_geneva.admin.step_plan import ENDED_STATES
from flask_geneva.admin.step_plan import plan_rows
from flask_geneva.admin.time_display import time_tag
from flask_geneva.admin.timeline_chart import layout
from flask_geneva.core import clock
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.engine.deadlines.describe import deadline_fact
from flask_geneva.engine.operator_transaction import allowed_from
from flask_geneva.exceptions import GenevaError
from flask_geneva.ext.app_state import current_state

__all__ = [
    "ENDED_STATES",
    "TIMELINE_COUNT_CAP",
    "TIMELINE_PAGE_SIZE",
    "WorkflowDetailPage",
]

#: Workflow states in which a scheduled execution runs when due.
RUNNING_STATES = ("ready", "performing")

#: Executions on one page of a workflow's timeline (R-ADM-57): a 1,000-execution
#: workflow's page renders a tenth of its rows (R-ADM-30).
TIMELINE_PAGE_SIZE = 100
#: The timeline's execution count reads at most this many rows, then says "N+".
TIMELINE_COUNT_CAP = 100_000
# Stands for the execution id in a URL built once per page: building a URL per
# row cost about 7 % of a 1,000-execution page's rendering (R-ADM-30).
_ID_SLOT = "geneva-execution-id"


class WorkflowDetailPage(WorkflowPages):
    """A workflow's page, ``GET <workflows>/<id>`` (R-ADM-12)."""

    @expose("/<workflow_id>")
    def detail(self, workflow_id: str) -> Any:
        """Render the workflow's page, or 404 for an id that is none or unknown."""
        key = self._parse_key(workflow_id)
        workflow = self._load(key) if key is not None else None
        if workflow is None:
            abort(404)
        return self._render_detail(workflow)

    def _render_detail(self, workflow: Any) -> str:
        session = self.session
        columns = self._columns()
        execution_cls = self.geneva.StepExecution
        notes: list[str] = []
        page = page_number(request.args, notes)
        anchor = self._timeline_anchor(execution_cls, workflow.id, notes)
        executions, head, pages = _timeline_page(
            session, execution_cls, workflow.id, page, anchor
        )
        note_past_the_end(page, bool(executions), notes)
        known = workflow.type in self.geneva.workflow_classes
        steps = type(workflow).step_collection() if known else None
        url = url_for(f"{self.executions_endpoint}.detail", execution_id=_ID_SLOT)
        now = clock.now()
        paused = workflow.state == "paused"
        timeline = [
            _execution_row(e, steps, columns, url, now, paused=paused)
            for e in executions
        ]
        # The state badges of each (state, outcome) pair, from the overridable
        # macro, made once per pair instead of once per row (R-ADM-30).
        badges = get_template_attribute("geneva/admin/_macros.html", "state_badges")
        made: dict[tuple[Any, Any, bool], Any] = {}
        for row in timeline:
            # An execution that raised and was reattempted says so (R-ADM-121).
            key = (row["execution"].state, row["execution"].outcome, row["raised"])
            if key not in made:
                made[key] = badges(*key)
            row["badges"] = made[key]
        meta, meta_problem = metadata_of(workflow, columns)
        actions = meta.get("operator_actions")
        operator_actions = (
            [a for a in actions if isinstance(a, dict)]
            if isinstance(actions, list)
            else []
        )
        buttons = workflow_buttons(
            session, execution_cls, workflow, steps, head, columns
        )
        ended = workflow.state in ENDED_STATES
        # The shown page's executions, then the newest page's (both oldest first).
        context = head if executions is head else executions + head
        signals = signal_panel(
            session, self.geneva.WorkflowSignal, workflow, context, columns
        )
        children = children_panel(
            session,
            self.geneva.Workflow,
            workflow.id,
            columns,
            request.args,
            self._parse_key,
        )
        return self.render(
            "geneva/admin/workflow_detail.html",
            workflow=workflow,
            ended=ended,
            # A paused workflow's scheduled execution does not run (R-ADM-44).
            next_run=_next_run(head) if workflow.state in RUNNING_STATES else None,
            known=known,
            hero=hero_reference_of(workflow),
            hero_label=_hero_label(workflow),
            job_options=_job_options(meta),
            plan=plan_rows(
                workflow,
                steps,
                admin_queries.latest_execution_per_step(
                    session, execution_cls, workflow.id
                ),
                reporter_configured=reporter_configured(),
            ),
            timeline=timeline,
            timeline_pages=pages,
            notes=notes,
            chains=_chains(timeline),
            chart=layout(
                executions,
                error_classes={row["id"]: row["error_class"] for row in timeline},
            ),
            operator_actions=list(reversed(operator_actions)),
            metadata_problem=meta_problem,
            buttons=buttons,
            disabled_reasons=disabled_reasons(buttons),
            action_form=action_form(),
            resume_at_form=resume_at_form(steps)
            if steps is not None
            and workflow.state in allowed_from("resume_at")
            and permits("resume_at", workflow)
            else None,
            step_label=steps.display_name if steps is not None else str,
            # Workflow signals (R-WSIG-66..70); a wait for children (R-CHD-61).
            waiting=children_wait(waiting_line(head, steps, columns, now), children),
            # A step waiting for a limit's slot (R-LIM-42).
            limit_wait=limit_wait(session, head, columns)
            if workflow.state in RUNNING_STATES or workflow.state == "paused"
            else None,
            signals=signals,
            signals_note=NOT_INSTALLED_NOTE,
            # Child workflows (R-CHD-61): nothing read without the unit.
            parent=parent_link(session, self.geneva.Workflow, workflow.id, columns),
            # The workflow's deadline (R-DL-60): nothing read without the unit.
            deadline=deadline_fact(session, workflow, now),
            children=children,
            signal_form=signal_form()
            if signals["installed"]
            and not ended
            and permits("deliver_signal", workflow)
            else None,
        )

    def _timeline_anchor(
        self, execution_cls: Any, workflow_id: Any, notes: list[str]
    ) -> tuple[Any, Any] | None:
        """The ``upto`` execution the pager's links count from (R-ADM-57).

        None without ``upto``; an ``upto`` that is not one of the workflow's
        executions is ignored with a note (the newest is counted from).
        """
        raw = request.args.get("upto")
        if not raw:
            return None
        key = self._parse_key(raw)
        anchor = (
            admin_queries.timeline_anchor(self.session, execution_cls, workflow_id, key)
            if key is not None
            else None
        )
        if anchor is None:
            notes.append(
                f"upto={quoted(raw)} is not an execution of this workflow: the "
                "timeline is counted from its newest execution"
            )
        return anchor


def _timeline_page(
    session: Any,
    execution_cls: Any,
    workflow_id: Any,
    page: int,
    anchor: tuple[Any, Any] | None = None,
) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """``(executions, head, pages)`` of the timeline's ``page`` (R-ADM-57).

    ``executions``: the page's rows, oldest first; ``head``: the newest page's
    (the same list on page 1), which decides the buttons, the waiting line and
    the next run, as the active execution is the newest one; ``pages``: the
    pager's values. ``first``/``last`` are the shown rows' positions counted
    from the newest execution (1 is the newest), ``total`` the workflow's
    executions ("N+" past :data:`TIMELINE_COUNT_CAP`), ``older``/``newer`` the
    page numbers the links lead to (past the end, ``newer`` is the last page
    with rows), or None. Counted only when paged. Pages are counted from
    ``anchor`` (``(created_at, id)`` of the ``upto`` execution) when given;
    the links carry ``upto``, the newest execution when the pager was made,
    so executions created in between shift no page (R-ADM-57).
    """
    size = TIMELINE_PAGE_SIZE
    # One row more than a page says whether older executions exist.
    newest_first = admin_queries.timeline_executions(
        session,
        execution_cls,
        workflow_id,
        limit=size + 1,
        offset=(page - 1) * size,
        upto=anchor,
    )
    has_older = len(newest_first) > size
    executions = list(reversed(newest_first[:size]))
    if page == 1 and anchor is None:
        head = executions
    else:
        newest = admin_queries.timeline_executions(
            session, execution_cls, workflow_id, limit=size
        )
        head = list(reversed(newest))
    is_paged = page > 1 or has_older
    total = (
        admin_queries.count_workflow_executions(
            session, execution_cls, workflow_id, TIMELINE_COUNT_CAP, anchor
        )
        if is_paged
        else len(executions)
    )
    first = (page - 1) * size + 1
    # Past the end, "newer" leads to the last page with rows.
    last_page = max(1, math.ceil(min(total, TIMELINE_COUNT_CAP) / size))
    pages = {
        "page": page,
        "size": size,
        "first": first,
        "last": first + len(executions) - 1,
        "total": f"{min(total, TIMELINE_COUNT_CAP):,}"
        + ("+" if total > TIMELINE_COUNT_CAP else ""),
        "is_paged": is_paged,
        "older": page + 1 if has_older else None,
        "newer": min(page - 1, last_page) if page > 1 else None,
        "anchored": anchor is not None,
        # The execution the links count from: this view's, or the newest now.
        "upto": anchor[1] if anchor is not None else (head[-1].id if head else None),
    }
    return executions, head, pages


def _next_run(executions: list[Any]) -> Any:
    """When the workflow's scheduled execution is due, or None (R-ADM-44)."""
    due = [e.scheduled_for for e in executions if e.state == "scheduled"]
    return min(due) if due else None


def reporter_configured() -> bool:
    """Whether the current app has a ``GENEVA_ERROR_REPORTER`` (R-ADM-123)."""
    return current_state().config.error_reporter is not None


def _hero_label(workflow: Any) -> tuple[str, str]:
    """``(label, marker)``: the hero's ``str()`` or a marker (R-ADM-31)."""
    if workflow.hero_type is None or workflow.hero_id is None:
        return "", "no hero"
    try:
        hero = workflow.hero
    except GenevaError as error:
        return "", f"hero type cannot be resolved: {error}"
    if hero is None:
        return "", "hero not found (deleted?)"
    return str(hero), ""


def _execution_row(
    execution: Any, steps: Any, columns: Any, url: str, now: Any, *, paused: bool
) -> dict[str, Any]:
    """One timeline row's values, its link and times made here, not per row in
    the template (a 1,000-execution page, R-ADM-30). In a ``paused`` workflow
    a scheduled execution waits for Resume, not for its time or the
    dispatcher (R-ADM-120)."""
    waits_for_resume = paused and execution.state == "scheduled"
    meta, problem = metadata_of(execution, columns)
    decision = meta.get("policy_decision")
    cursor = None
    if columns.resumable and execution.cursor is not None:
        cursor = cursor_display(execution.cursor)
        if cursor["problem"]:
            problem = problem or "unparsable cursor"
    end = execution.finished_at or execution.completed_at or execution.failed_at
    interrupt = meta.get("interrupt")
    error_class = error_class_of(execution, columns)
    error_message = recorded_error_message(execution, meta)
    return {
        "execution": execution,
        "id": execution.id,
        "url": url.replace(_ID_SLOT, str(execution.id)),
        "times": {
            "scheduled": time_tag(execution.scheduled_for, now),
            "started": time_tag(execution.started_at, now),
            "finished": time_tag(execution.finished_at, now),
        },
        # A reattempted execution keeps its error in metadata only (R-SE-21).
        "error_message": error_message,
        "step_defined": steps is not None and steps.is_known(execution.step_name),
        "step_removed": steps is not None and steps.is_removed(execution.step_name),
        "overdue": execution.is_overdue and not waits_for_resume,
        "waits_for_resume": waits_for_resume,
        "duration": format_duration(execution.started_at, end),
        "error_class": error_class,
        "raised": bool(error_class or error_message),
        "recovery": recovery_sentence(execution, meta),
        "backtrace": recorded_backtrace(execution, meta),
        "policy_sentence": describe_policy_decision(decision)
        if decision is not None
        else "",
        "flow_control": meta.get("flow_control"),
        "interrupt": interrupt if isinstance(interrupt, dict) else None,
        "precondition": meta.get("precondition"),
        "cursor": cursor["text"] if cursor else None,
        "cursor_preview": cursor["preview"] if cursor else None,
        "cursor_truncated": cursor["truncated"] if cursor else False,
        "continues_from_id": execution.continues_from_id if columns.resumable else None,
        "metadata_problem": problem,
    }


def _job_options(meta: dict[str, Any]) -> str:
    options = meta.get("step_job_options")
    return pretty_json(options) if options else ""


def _chains(timeline: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group rows linked by ``continues_from_id`` into chains of 2+ (R-ADM-12)."""
    by_id = {row["id"]: row for row in timeline}
    successors: dict[Any, dict[str, Any]] = {}
    for row in timeline:
        parent = row["continues_from_id"]
        if parent is not None and parent in by_id:
            successors[parent] = row
    chains = []
    for row in timeline:
        parent = row["continues_from_id"]
        if parent is not None and parent in by_id:
            continue  # not a head
        chain = [row]
        seen = {row["id"]}
        while chain[-1]["id"] in successors:
            nxt = successors[chain[-1]["id"]]
            if nxt["id"] in seen:
                break
            seen.add(nxt["id"])
            chain.append(nxt)
        if len(chain) > 1 or row["cursor"] is not None:
            chains.append(chain)
    return chains
