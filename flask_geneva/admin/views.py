"""Flask-Admin views of the Geneva admin: overview, lists, detail pages (SPEC §20).

The pages only read (R-ADM-32): plain selects, no row locks, no writes. The two
writing endpoints, ``POST <workflows>/<id>/action`` and ``POST <workflows>/bulk``,
check the CSRF token (R-ADM-05) and ``GENEVA_ADMIN_CAN_ACT`` (R-ADM-03), then
call each workflow's own flow-control method, one transaction per workflow, with
``via="admin"`` and the actor (R-ADM-21, R-ADM-23, R-ADM-24).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from typing import Literal

import sqlalchemy as sa
from flask import Blueprint
from flask import Response
from flask import abort
from flask import current_app
from flask import flash
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for
from flask_admin import BaseView
from flask_admin import expose

from flask_geneva import clock
from flask_geneva import store
from flask_geneva.admin import csrf
from flask_geneva.admin import executions
from flask_geneva.admin import filters
from flask_geneva.admin import presenters
from flask_geneva.admin import running_step
from flask_geneva.admin import timeline_chart
from flask_geneva.exceptions import GenevaError
from flask_geneva.keys import format_hero
from flask_geneva.keys import parse_key
from flask_geneva.models import InvalidJSON
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState
from flask_geneva.runtime import current_state

__all__ = ["OverviewView", "StepExecutionsView", "WorkflowsView", "asset_dir"]

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
PAGE_SIZE = 50
#: Highest list page accepted; a larger ``page`` is ignored with a note.
MAX_PAGE = 999_999
#: Executions shown on a detail page (the newest ones when there are more).
MAX_TIMELINE_ROWS = 1000
_SORTS = ("id", "created_at", "transitioned_at")
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'self'"
)


def asset_dir(name: Literal["templates", "static"]) -> Path:
    """Return the installed asset folder, or the checkout's top-level one.

    Raises:
        RuntimeError: Neither ``flask_geneva/<name>`` nor ``<repo>/<name>`` exists.
    """
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if (candidate / "geneva").is_dir():
            return candidate
    raise RuntimeError(f"flask_geneva {name}/ folder not found next to {_PACKAGE_DIR}")


# -- access (R-ADM-02..04) ------------------------------------------------------------


def _admin_config() -> Any:
    return current_state().config.admin


def access_is_open_by_default() -> bool:
    """True when access is granted only because debug/testing is on (R-ADM-02)."""
    return _admin_config().access is None and bool(
        current_app.debug or current_app.testing
    )


def has_access() -> bool:
    """Evaluate ``GENEVA_ADMIN_ACCESS`` for this request (R-ADM-02)."""
    access = _admin_config().access
    if access is None:
        return bool(current_app.debug or current_app.testing)
    return bool(access())


def can_act() -> bool:
    """Evaluate ``GENEVA_ADMIN_CAN_ACT`` (default: access) per request (R-ADM-03)."""
    check = _admin_config().can_act
    if check is None:
        return has_access()
    return has_access() and bool(check())


def current_actor() -> str | None:
    """The operator recorded with an action (R-ADM-04).

    ``GENEVA_ADMIN_ACTOR()`` when set; else the Flask-Login user id when a user is
    logged in; else the HTTP basic-auth user name; else None.
    """
    actor = _admin_config().actor
    if actor is not None:
        value = actor()
        return None if value is None else str(value)
    try:
        from flask_login import current_user
    except ImportError:
        current_user = None
    if current_user is not None and getattr(current_user, "is_authenticated", False):
        get_id = getattr(current_user, "get_id", None)
        if callable(get_id):
            return str(get_id())
    auth = request.authorization
    if auth is not None and auth.username:
        return str(auth.username)
    return None


# -- shared view plumbing -------------------------------------------------------------


class _GenevaView(BaseView):
    """Access, CSP header, templates and assets shared by the Geneva views."""

    def __init__(self, geneva: Any, **kwargs: Any) -> None:
        self.geneva = geneva
        self.overview_endpoint = "geneva"
        self.workflows_endpoint = "geneva_workflows"
        self.executions_endpoint = "geneva_step_executions"
        super().__init__(**kwargs)

    def create_blueprint(self, admin: Any) -> Blueprint:
        blueprint: Blueprint = super().create_blueprint(admin)
        # Our templates and static files ride on a nested blueprint so that a host
        # template folder still wins (Flask searches the app's folder first).
        assets = Blueprint(
            "assets",
            __name__,
            template_folder=str(asset_dir("templates")),
            static_folder=str(asset_dir("static")),
            static_url_path="/static",
        )
        blueprint.register_blueprint(assets, url_prefix="/_geneva")
        blueprint.after_request(_content_security_policy)
        return blueprint

    def is_accessible(self) -> bool:
        return has_access()

    def inaccessible_callback(self, name: Any, **kwargs: Any) -> Any:
        # Standalone page: nothing from the admin (menus, counts) may leak.
        return Response(render_template("geneva/admin/forbidden.html"), status=403)

    def render(self, template: str, **kwargs: Any) -> str:
        kwargs.setdefault("geneva_open_by_default", access_is_open_by_default())
        kwargs.setdefault("geneva_can_act", can_act())
        kwargs.setdefault("geneva_css_url", self.asset_url("geneva/geneva.css"))
        kwargs.setdefault("overview_endpoint", self.overview_endpoint)
        kwargs.setdefault("workflows_endpoint", self.workflows_endpoint)
        kwargs.setdefault("executions_endpoint", self.executions_endpoint)
        kwargs.setdefault("fmt_time", format_time)
        return str(super().render(template, **kwargs))

    def asset_url(self, filename: str) -> str:
        """URL of a file under ``static/`` (e.g. ``geneva/geneva.css``)."""
        return url_for(f"{self.endpoint}.assets.static", filename=filename)

    @property
    def session(self) -> Any:
        return self.geneva.session

    def _parse_key(self, raw: str | None) -> Any:
        """Parse an id from the URL/query string; None if it is not a valid key."""
        return parse_key(raw, self.geneva.key_type)

    def _columns(self) -> Any:
        return store.optional_columns(self.session)


def _content_security_policy(response: Response) -> Response:
    # R-ADM-06: no inline scripts; a host that sets its own policy keeps it.
    response.headers.setdefault("Content-Security-Policy", _CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


# -- overview (R-ADM-10) --------------------------------------------------------------


class OverviewView(_GenevaView):
    """Class-by-state counts, paused ratios, stuck/overdue counts, latest failures."""

    @expose("/")
    def index(self) -> str:
        session = self.session
        workflow_cls = self.geneva.Workflow
        execution_cls = self.geneva.StepExecution
        config = current_state().config
        rows = session.execute(
            sa.select(workflow_cls.type, workflow_cls.state, sa.func.count())
            .group_by(workflow_cls.type, workflow_cls.state)
            .order_by(workflow_cls.type)
        ).all()
        states = [state.value for state in WorkflowState]
        counts: dict[str, dict[str, int]] = {}
        for type_name, state, count in rows:
            counts.setdefault(str(type_name), {})[str(state)] = int(count)
        classes = []
        for type_name, by_state in counts.items():
            total = sum(by_state.values())
            ratio = by_state.get("paused", 0) / total if total else 0.0
            classes.append(
                {
                    "type": type_name,
                    "known": type_name in self.geneva.workflow_classes,
                    "counts": by_state,
                    "total": total,
                    "paused_ratio": ratio,
                    "warn": ratio > config.admin.paused_ratio_warn,
                }
            )
        now = clock.now()
        # The list filters of the links use the same criteria (R-ADM-10, R-HK-20).
        stuck = session.scalar(
            sa.select(sa.func.count())
            .select_from(execution_cls)
            .where(*executions.flag_criteria("stuck", execution_cls, config, now))
        )
        overdue = session.scalar(
            sa.select(sa.func.count())
            .select_from(execution_cls)
            .where(
                *executions.flag_criteria("stuck_scheduled", execution_cls, config, now)
            )
        )
        failed_count = executions.capped_count(
            session,
            sa.select(execution_cls.id).where(execution_cls.state == "failed"),
            executions.FAILED_COUNT_CAP,
        )
        failures = session.execute(
            sa.select(execution_cls, workflow_cls.type)
            .join(workflow_cls, workflow_cls.id == execution_cls.workflow_id)
            .where(execution_cls.state == "failed")
            # finished_at equals failed_at on a failed row (R-SE-02) and is
            # indexed: the newest failures are read off the index's end instead
            # of sorting every failed row (R-ADM-30).
            .where(execution_cls.finished_at.is_not(None))
            .options(*store.undefer_options(session, None, execution_cls))
            .order_by(execution_cls.finished_at.desc(), execution_cls.id.desc())
            .limit(20)
        ).all()
        return self.render(
            "geneva/admin/overview.html",
            states=states,
            classes=classes,
            stuck_count=int(stuck or 0),
            overdue_count=int(overdue or 0),
            failed_count=failed_count,
            failed_count_cap=executions.FAILED_COUNT_CAP,
            failures=[
                {
                    "execution": execution,
                    "type": type_name,
                    "error_class": _error_class(execution, self._columns()),
                    "first_line": (execution.error_message or "").split("\n", 1)[0],
                }
                for execution, type_name in failures
            ],
        )


def _error_class(execution: Any, columns: Any) -> str:
    if columns.error_class_name and execution.error_class_name:
        return str(execution.error_class_name)
    meta = _metadata(execution, columns)[0]
    return str(presenters.recorded_exception(meta).get("class") or "")


def _metadata(row: Any, has_column: Any) -> tuple[dict[str, Any], str | None]:
    """Return ``(metadata dict, problem marker or None)`` of a row (R-ADM-31)."""
    present = has_column if isinstance(has_column, bool) else True
    if not isinstance(has_column, bool):
        present = bool(
            has_column.step_execution_metadata
            if hasattr(row, "step_name")
            else has_column.workflow_metadata
        )
    if not present:
        return {}, None
    value = row.meta
    if value is None:
        return {}, None
    if isinstance(value, InvalidJSON):
        return {}, "unparsable metadata"
    if not isinstance(value, dict):
        return {}, f"metadata is not an object ({type(value).__name__})"
    return value, None


# -- workflows (R-ADM-11, R-ADM-12, R-ADM-20..24) -----------------------------------

_ACTIONS = {
    "pause": "Pause",
    "resume": "Resume",
    "resume_rewind": "Resume from the beginning",
    "cancel": "Cancel",
    "skip": "Skip current step",
    "recover": "Recover running step",
}
_DESTRUCTIVE = ("cancel", "skip", "resume_rewind", "recover")
_ALLOWED_FROM = {
    "pause": ("ready", "performing"),
    "resume": ("paused",),
    "resume_rewind": ("paused",),
    "cancel": ("ready", "paused", "performing"),
    "skip": ("ready", "paused"),
    # Any state: enabled only while an execution is in progress (R-HK-28).
    "recover": ("ready", "performing", "paused", "finished", "canceled"),
}


@dataclasses.dataclass
class _Button:
    action: str
    label: str
    enabled: bool
    reason: str
    destructive: bool
    #: Said beside an enabled button (e.g. Pause on a performing workflow).
    note: str = ""


class WorkflowsView(_GenevaView):
    """The workflows list, a workflow's detail page and its buttons."""

    # -- helpers ----------------------------------------------------------------------

    def _load(self, workflow_id: Any) -> Any:
        session = self.session
        workflow_cls = self.geneva.Workflow
        return session.scalars(
            sa.select(workflow_cls)
            .where(workflow_cls.id == workflow_id)
            .options(*store.undefer_options(session, workflow_cls, None))
            # Show the stored truth even if this session saw the row earlier.
            .execution_options(populate_existing=True)
        ).one_or_none()

    # -- list -------------------------------------------------------------------------

    def _filters(self, args: Any) -> filters.WorkflowFilters:
        """Validate the list filters of a query string or bulk form (R-ADM-11)."""
        columns = self._columns()
        return filters.parse_workflow_filters(
            args,
            workflow_cls=self.geneva.Workflow,
            execution_cls=self.geneva.StepExecution,
            parse_key=self._parse_key,
            has_error_class_column=columns.error_class_name,
            now=clock.now(),
        )

    @expose("/")
    def index(self) -> str:
        args = request.args
        session = self.session
        workflow_cls = self.geneva.Workflow
        columns = self._columns()
        matching = self._filters(args)
        query = sa.select(workflow_cls).where(*matching.conditions)
        # Newest first by default: the id for sequential keys, else created_at.
        default_sort = "created_at" if self.geneva.key_type == "uuid" else "id"
        notes = list(matching.notes)
        sort = _choice(args, "sort", _SORTS, default_sort, notes)
        direction = _choice(args, "dir", ("asc", "desc"), "desc", notes)
        column = getattr(workflow_cls, sort)
        order = column.asc() if direction == "asc" else column.desc()
        tie = workflow_cls.id.asc() if direction == "asc" else workflow_cls.id.desc()
        ordering = (order,) if sort == "id" else (order, tie)
        page_number = _page_number(args, notes)
        # One row more than a page tells whether a next page exists: no COUNT(*).
        rows = list(
            session.scalars(
                query.order_by(*ordering)
                .limit(PAGE_SIZE + 1)
                .offset((page_number - 1) * PAGE_SIZE)
            )
        )
        has_next = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        _note_past_the_end(page_number, bool(rows), notes)
        # One query for the page's latest errors, one capped count (R-ADM-30).
        errors = filters.latest_error_classes(
            session,
            self.geneva.StepExecution,
            [row.id for row in rows],
            has_error_class_column=columns.error_class_name,
            has_metadata_column=columns.step_execution_metadata,
        )
        hero_urls = filters.hero_admin_urls(rows)
        count, more = filters.capped_count(session, workflow_cls, matching)
        return self.render(
            "geneva/admin/workflows.html",
            workflows=[self._summary(row, errors, hero_urls) for row in rows],
            filters=matching.params,
            filtered=matching.is_active,
            notes=notes,
            caveats=matching.caveats,
            # The all-matching form would drop the ignored values (R-ADM-23).
            filters_ignored=bool(matching.notes),
            match_count=count,
            match_label=filters.format_count(count, more),
            sort=sort,
            direction=direction,
            page=page_number,
            has_next=has_next,
            states=[state.value for state in WorkflowState],
            known_types=sorted(self.geneva.workflow_classes),
            bulk_actions=_BULK_ACTIONS,
            action_form=csrf.action_form(),
        )

    def _summary(
        self, workflow: Any, errors: dict[Any, str], hero_urls: dict[Any, str]
    ) -> dict[str, Any]:
        return {
            "id": workflow.id,
            "type": workflow.type,
            "known": workflow.type in self.geneva.workflow_classes,
            "hero": _hero_reference(workflow),
            "hero_url": hero_urls.get((workflow.hero_type, str(workflow.hero_id))),
            "state": workflow.state,
            "step": workflow.current_step_name or workflow.next_step_name or "",
            "created_at": workflow.created_at,
            "transitioned_at": workflow.transitioned_at,
            "error_class": errors.get(workflow.id),
        }

    # -- detail -----------------------------------------------------------------------

    @expose("/<workflow_id>")
    def detail(self, workflow_id: str) -> Any:
        key = self._parse_key(workflow_id)
        workflow = self._load(key) if key is not None else None
        if workflow is None:
            abort(404)
        return self._render_detail(workflow)

    def _render_detail(self, workflow: Any) -> str:
        session = self.session
        columns = self._columns()
        execution_cls = self.geneva.StepExecution
        executions = list(
            session.scalars(
                sa.select(execution_cls)
                .where(execution_cls.workflow_id == workflow.id)
                .options(*store.undefer_options(session, None, execution_cls))
                .order_by(execution_cls.created_at.desc(), execution_cls.id.desc())
                .limit(MAX_TIMELINE_ROWS + 1)
                .execution_options(populate_existing=True)
            )
        )
        truncated = len(executions) > MAX_TIMELINE_ROWS
        executions = list(reversed(executions[:MAX_TIMELINE_ROWS]))
        known = workflow.type in self.geneva.workflow_classes
        steps = type(workflow).step_collection() if known else None
        timeline = [self._execution_row(e, steps, columns) for e in executions]
        meta, meta_problem = _metadata(workflow, columns)
        actions = meta.get("operator_actions")
        operator_actions = (
            [a for a in actions if isinstance(a, dict)]
            if isinstance(actions, list)
            else []
        )
        return self.render(
            "geneva/admin/workflow_detail.html",
            workflow=workflow,
            known=known,
            hero=_hero_reference(workflow),
            hero_label=self._hero_label(workflow),
            job_options=_job_options(workflow, meta),
            plan=self._plan(workflow, steps, executions),
            timeline=timeline,
            truncated=truncated,
            chains=_chains(timeline),
            chart=timeline_chart.layout(
                executions,
                error_classes={row["id"]: row["error_class"] for row in timeline},
            ),
            operator_actions=list(reversed(operator_actions)),
            metadata_problem=meta_problem,
            buttons=self._buttons(workflow, steps, executions, columns),
            action_form=csrf.action_form(),
        )

    def _hero_label(self, workflow: Any) -> tuple[str, str]:
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
        self, execution: Any, steps: Any, columns: Any
    ) -> dict[str, Any]:
        meta, problem = _metadata(execution, columns)
        decision = meta.get("policy_decision")
        cursor = None
        if columns.resumable and execution.cursor is not None:
            cursor = executions.cursor_display(execution.cursor)
            if cursor["problem"]:
                problem = problem or "unparsable cursor"
        end = execution.finished_at or execution.completed_at or execution.failed_at
        interrupt = meta.get("interrupt")
        return {
            "execution": execution,
            "id": execution.id,
            # A reattempted execution keeps its error in metadata only (R-SE-21).
            "error_message": executions.recorded_error_message(execution, meta),
            "step_defined": steps is not None and execution.step_name in steps,
            "overdue": execution.is_overdue,
            "duration": presenters.format_duration(execution.started_at, end),
            "error_class": _error_class(execution, columns),
            "backtrace": executions.recorded_backtrace(execution, meta),
            "policy_sentence": presenters.describe_policy_decision(decision)
            if decision is not None
            else "",
            "flow_control": meta.get("flow_control"),
            "interrupt": interrupt if isinstance(interrupt, dict) else None,
            "precondition": meta.get("precondition"),
            "cursor": cursor["text"] if cursor else None,
            "cursor_preview": cursor["preview"] if cursor else None,
            "cursor_truncated": cursor["truncated"] if cursor else False,
            "continues_from_id": execution.continues_from_id
            if columns.resumable
            else None,
            "metadata_problem": problem,
        }

    def _plan(
        self, workflow: Any, steps: Any, executions: list[Any]
    ) -> list[dict[str, Any]]:
        latest: dict[str, Any] = {}
        for execution in executions:
            latest[execution.step_name] = execution
        reference = workflow.current_step_name or workflow.next_step_name
        plan: list[dict[str, Any]] = []
        markers = {"completed": "done", "skipped": "skipped", "failed": "failed"}
        for definition in steps or ():
            execution = latest.get(definition.name)
            if definition.name == reference and workflow.state not in (
                "finished",
                "canceled",
            ):
                marker = "current"
            elif execution is not None:
                marker = markers.get(execution.state, execution.state)
            else:
                marker = "upcoming"
            plan.append(
                {
                    "name": definition.name,
                    "wait": definition.wait,
                    "condition": definition.skip_condition_description() or "",
                    "policy": _policy_summary(workflow, definition),
                    "resumable": definition.is_resumable,
                    "marker": marker,
                }
            )
        defined = {entry["name"] for entry in plan}
        for name in latest:
            if name not in defined:
                plan.append(
                    {
                        "name": name,
                        "wait": None,
                        "condition": "",
                        "policy": "",
                        "resumable": False,
                        "marker": "no longer defined",
                    }
                )
        return plan

    def _buttons(
        self, workflow: Any, steps: Any, executions: list[Any], columns: Any
    ) -> list[_Button]:
        acting = can_act()
        buttons = []
        for action, label in _ACTIONS.items():
            allowed = workflow.state in _ALLOWED_FROM[action]
            reason = "" if allowed else f"not possible: workflow is {workflow.state}"
            if allowed and action == "resume_rewind":
                allowed, reason = _rewind_possible(workflow, steps, executions, columns)
            if allowed and not acting:
                allowed = False
                reason = "read-only: GENEVA_ADMIN_CAN_ACT does not allow you to act"
            buttons.append(
                _Button(action, label, allowed, reason, action in _DESTRUCTIVE)
            )
        running = running_step.in_progress_execution(
            self.session, self.geneva.StepExecution, workflow.id
        )
        running_step.annotate_buttons(buttons, workflow, running)
        return buttons

    # -- actions (R-ADM-05, R-ADM-20..24) ----------------------------------------------

    @expose("/<workflow_id>/action", methods=("POST",))
    def action(self, workflow_id: str) -> Any:
        form, action = _validated_action_form(_ACTIONS, what="action")
        key = self._parse_key(workflow_id)
        workflow = self._load(key) if key is not None else None
        if workflow is None:
            abort(404)
        label = _ACTIONS[action]
        step = (form.step.data or "").strip() or None
        if action in _DESTRUCTIVE and form.confirm.data != "yes":
            return self.render(
                "geneva/admin/confirm.html",
                workflow=workflow,
                action=action,
                label=label,
                step=step or "",
                action_form=csrf.action_form(),
                recovery=running_step.recovery_facts(
                    self.session, self.geneva.StepExecution, workflow
                )
                if action == "recover"
                else None,
            )
        self.session.commit()  # end the reading transaction before locking
        try:
            _act(
                workflow,
                action,
                expected_step=step,
                execution_id=(form.execution.data or "").strip() or None,
                force=form.force.data == "yes",
            )
        except (GenevaError, ValueError) as error:
            # ValueError: a tampered or stale form value (an execution id that is
            # no id), refused like a lost race rather than answered with a 500.
            self.session.rollback()
            flash(f"Workflow {workflow_id}: {label} refused: {error}", "error")
        else:
            state = self._load(key).state
            flash(
                f"Workflow {workflow_id}: {label} done; state is now {state}",
                "success",
            )
        return redirect(
            url_for(f"{self.endpoint}.detail", workflow_id=workflow_id), code=303
        )

    @expose("/bulk", methods=("GET",))
    def bulk_get(self) -> Any:
        """Answer a GET of the bulk URL with 405 and ``Allow: POST`` (R-ADM-05).

        Without this rule the GET would fall through to ``/<workflow_id>`` and get
        a misleading 404 for a workflow called "bulk".
        """
        abort(405, valid_methods=["POST"])

    @expose("/bulk", methods=("POST",))
    def bulk(self) -> Any:
        """Pause, resume or cancel the checked rows or all matching (R-ADM-23).

        ``scope=all`` acts on every workflow matching the filter fields of the form
        (the list's filters, re-validated here); otherwise on the checked ``ids``.
        Each workflow is its own transaction.
        """
        form, action = _validated_action_form(_BULK_ACTIONS, what="bulk action")
        if request.form.get("scope") == "all":
            return self._bulk_all(action, confirmed=form.confirm.data == "yes")
        keys = []
        for raw in request.form.getlist("ids")[:MAX_BULK_IDS]:
            key = self._parse_key(raw)
            if key is not None and key not in keys:
                keys.append(key)
        label = _BULK_ACTIONS[action]
        if not keys:
            flash(f"{label}: no workflows were checked", "error")
            return redirect(url_for(f"{self.endpoint}.index"), code=303)
        if action == "cancel" and form.confirm.data != "yes":
            return self.render(
                "geneva/admin/bulk_confirm.html",
                action=action,
                label=label,
                ids=keys,
                action_form=csrf.action_form(),
            )
        self.session.commit()  # end the reading transaction before locking
        done = 0
        refused: list[tuple[Any, str]] = []
        for key in keys:
            reason = self._act_on(key, action)
            if reason is None:
                done += 1
            else:
                refused.append((key, reason))
        return self.render(
            "geneva/admin/bulk_result.html",
            label=label,
            done_count=done,
            refused=refused,
            refused_count=len(refused),
            filters={},
        )

    def _bulk_all(self, action: str, *, confirmed: bool) -> Any:
        """Confirm, then act on every workflow matching the form's filters (R-ADM-23).

        The filters are validated by the same code as the list. When any value was
        ignored, neither the confirmation nor the confirmed POST acts: the page
        shows the notes and says that nothing was changed (acting would reach
        more workflows than the operator's filter asked for). The matching ids are
        read in keyset batches of ``GENEVA_HOUSEKEEPING_BATCH_SIZE``; the reading
        transaction ends before each batch is acted on.
        """
        label = _BULK_ACTIONS[action]
        matching = self._filters(request.form)
        workflow_cls = self.geneva.Workflow
        config = current_state().config
        if matching.notes:
            return self.render(
                "geneva/admin/bulk_all_confirm.html",
                action=action,
                label=label,
                refused=True,
                filters=matching.params,
                notes=matching.notes,
            )
        if not confirmed:
            count, more = filters.capped_count(self.session, workflow_cls, matching)
            return self.render(
                "geneva/admin/bulk_all_confirm.html",
                action=action,
                label=label,
                match_count=count,
                match_label=filters.format_count(count, more),
                capped=more,
                cap=filters.COUNT_CAP,
                batch_size=config.housekeeping_batch_size,
                filters=matching.params,
                filtered=matching.is_active,
                descriptions=matching.descriptions,
                refused=False,
                caveats=matching.caveats,
                action_form=csrf.action_form(),
            )
        done = 0
        refused: list[tuple[Any, str]] = []
        refused_count = 0
        batches = filters.matching_id_batches(
            self.session,
            workflow_cls,
            matching,
            batch_size=config.housekeeping_batch_size,
            created_until=clock.now(),
        )
        for keys in batches:
            self.session.commit()  # end the reading transaction before locking
            for key in keys:
                reason = self._act_on(key, action)
                if reason is None:
                    done += 1
                    continue
                refused_count += 1
                if len(refused) < MAX_LISTED_REFUSALS:
                    refused.append((key, reason))
        self.session.commit()
        return self.render(
            "geneva/admin/bulk_result.html",
            label=f"{label} all matching",
            done_count=done,
            refused=refused,
            refused_count=refused_count,
            filters=matching.params,
        )

    def _act_on(self, key: Any, action: str) -> str | None:
        """Act on one workflow in its own transaction; the refusal reason or None."""
        workflow = self._load(key)
        if workflow is None:
            self.session.rollback()
            return f"workflow {key} no longer exists"
        try:
            _act(workflow, action)  # commits its own transaction
        except GenevaError as error:
            self.session.rollback()
            return str(error)
        return None


_BULK_ACTIONS = {"pause": "Pause", "resume": "Resume", "cancel": "Cancel"}
#: Most workflows one bulk request acts on (the checked rows of one page).
MAX_BULK_IDS = 500
#: Refusals listed on a bulk result page; the rest are only counted.
MAX_LISTED_REFUSALS = 1000


def _validated_action_form(allowed: Mapping[str, str], *, what: str) -> tuple[Any, str]:
    """The POSTed action form, checked before any change (R-ADM-03, R-ADM-05).

    Returns:
        ``(form, action)``.

    Raises:
        werkzeug.exceptions.HTTPException: 400 for a missing or invalid CSRF token
            or an action outside ``allowed`` (named with ``what``); 403 when
            ``GENEVA_ADMIN_CAN_ACT`` refuses.
    """
    form = csrf.submitted_action_form()
    if form is None:
        abort(400, description="missing or invalid CSRF token")
    action = form.action.data
    if action not in allowed:
        abort(400, description=f"unknown {what} {action!r}")
    if not can_act():
        abort(403, description="GENEVA_ADMIN_CAN_ACT does not allow you to act")
    return form, str(action)


def _act(
    workflow: Any,
    action: str,
    *,
    expected_step: str | None = None,
    execution_id: str | None = None,
    force: bool = False,
) -> None:
    """Call the workflow's own flow-control method for ``action`` (R-ADM-21).

    ``expected_step`` (the step the operator saw) guards Skip: it is refused when
    the current step changed since the page was rendered. ``execution_id`` does
    the same for Recover, and ``force`` is its "within the grace" confirmation
    (R-HK-28).
    """
    actor = current_actor()
    if action == "recover":
        workflow.recover(execution_id, force=force, actor=actor, via="admin")
        return
    if action == "pause":
        workflow.pause(actor=actor, via="admin")
    elif action == "resume":
        workflow.resume(actor=actor, via="admin")
    elif action == "resume_rewind":
        workflow.resume(rewind=True, actor=actor, via="admin")
    elif action == "cancel":
        workflow.cancel(actor=actor, via="admin")
    else:
        workflow.skip(actor=actor, via="admin", expected_step=expected_step)


class StepExecutionsView(_GenevaView):
    """The step executions list (R-ADM-13) and an execution's detail page (R-ADM-14)."""

    @expose("/")
    def index(self) -> str:
        session = self.session
        columns = self._columns()
        execution_cls = self.geneva.StepExecution
        workflow_cls = self.geneva.Workflow
        config = current_state().config
        query = sa.select(execution_cls, workflow_cls.type).join(
            workflow_cls, workflow_cls.id == execution_cls.workflow_id
        )
        query, filters, notes = executions.filter_executions(
            query,
            request.args,
            execution_cls=execution_cls,
            workflow_cls=workflow_cls,
            columns=columns,
            config=config,
            now=clock.now(),
        )
        page_number = _page_number(request.args, notes)
        # One row more than a page tells whether a next page exists: no COUNT(*).
        rows = session.execute(
            query.options(*store.undefer_options(session, None, execution_cls))
            .order_by(execution_cls.id.desc())
            .limit(PAGE_SIZE + 1)
            .offset((page_number - 1) * PAGE_SIZE)
        ).all()
        has_next = len(rows) > PAGE_SIZE
        _note_past_the_end(page_number, bool(rows), notes)
        return self.render(
            "geneva/admin/step_executions.html",
            executions=[
                {
                    "execution": execution,
                    "type": type_name,
                    "error_class": _error_class(execution, columns),
                    "overdue": execution.is_overdue,
                }
                for execution, type_name in rows[:PAGE_SIZE]
            ],
            filters=filters,
            notes=notes,
            page=page_number,
            has_next=has_next,
            states=[state.value for state in StepExecutionState],
            known_types=sorted(self.geneva.workflow_classes),
            flags=executions.LIST_FLAGS,
        )

    @expose("/<execution_id>")
    def detail(self, execution_id: str) -> str:
        """All stored columns of one execution and its neighbours (R-ADM-14)."""
        key = self._parse_key(execution_id)
        if key is None:
            abort(404)
        session = self.session
        execution = executions.load_execution(session, self.geneva.StepExecution, key)
        if execution is None:
            abort(404)
        columns = self._columns()
        meta, problem = _metadata(execution, columns)
        return self.render(
            "geneva/admin/step_execution_detail.html",
            **executions.execution_detail(
                session,
                self.geneva,
                execution,
                meta=meta,
                metadata_problem=problem,
                error_class=_error_class(execution, columns),
                config=current_state().config,
                now=clock.now(),
            ),
            action_form=csrf.action_form(),  # Recover on an in-progress one (R-HK-28)
        )


def _choice(
    args: Any, name: str, allowed: tuple[str, ...], default: str, notes: list[str]
) -> str:
    """The value of a list's ``sort`` or ``dir`` parameter, or ``default``.

    An empty value means the default; any other value not in ``allowed`` is
    ignored with a note naming it and the allowed ones (R-ADM-11, R-ADM-31).
    """
    raw = args.get(name, "")
    value = raw.strip() if isinstance(raw, str) else ""
    if not value:
        return default
    if value not in allowed:
        choices = f"{', '.join(allowed[:-1])} or {allowed[-1]}"
        notes.append(f"ignored {name} {_quoted(value)}: use {choices}")
        return default
    return value


def _page_number(args: Any, notes: list[str]) -> int:
    """The list page asked for: 1 unless ``page`` is a whole number up to MAX_PAGE.

    Anything else (0, a negative or non-ASCII number, text, a number past
    :data:`MAX_PAGE`) shows page 1 with a note naming the value (R-ADM-31).
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
        f"ignored page {_quoted(value)}: use a whole number from 1 to {MAX_PAGE}"
    )
    return 1


def _note_past_the_end(page_number: int, has_rows: bool, notes: list[str]) -> None:
    """Say so when a page after the first has no rows: the list ends before it."""
    if page_number > 1 and not has_rows:
        notes.append(f"page {page_number} is past the end of the list: it has no rows")


def _quoted(value: str) -> str:
    """``repr`` of a query-string value for a note, cut after 40 characters."""
    return f"{value[:40]!r}…" if len(value) > 40 else repr(value)


def _rewind_possible(
    workflow: Any, steps: Any, executions: list[Any], columns: Any
) -> tuple[bool, str]:
    if not columns.resumable:
        return False, "the database has no cursor column"
    name = workflow.next_step_name or workflow.current_step_name
    definition = steps.named(name) if steps is not None and name else None
    if definition is None or not definition.is_resumable:
        return False, "the next step is not resumable"
    for execution in reversed(executions):
        if execution.step_name == name:
            if execution.cursor in (None, "", [], {}):
                return False, "the resumable step has no stored cursor"
            return True, ""
    return False, "the resumable step has no stored cursor"


def _policy_summary(workflow: Any, definition: Any) -> str:
    """The step plan's policy column (R-ADM-12): the step's own policy, else the
    class-level ones that apply to it (R-POL-40), else the default (pause)."""
    if definition.exception_policy is not None:
        return repr(definition.exception_policy)
    definitions = getattr(type(workflow), "__geneva_definitions__", None)
    class_policies = getattr(definitions, "exception_policies", ())
    if class_policies:
        listed = "; ".join(repr(policy) for policy in class_policies)
        return f"class-level: {listed}"
    return "default: pause"


def _hero_reference(workflow: Any) -> str:
    if workflow.hero_type is None and workflow.hero_id is None:
        return ""
    return format_hero(workflow.hero_type, workflow.hero_id)


def _job_options(workflow: Any, meta: dict[str, Any]) -> str:
    options = meta.get("step_job_options")
    return presenters.pretty_json(options) if options else ""


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


def format_time(value: datetime | None) -> str:
    """ISO-like UTC timestamp for tables, or ``""``."""
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else ""
