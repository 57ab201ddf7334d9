"""What every Geneva admin view shares: access, CSP header, templates, assets.

:class:`GenevaView` is the Flask-Admin ``BaseView`` of the overview and the
lists; :class:`WorkflowPages` adds what the workflow pages share (loading a
workflow, validating the list filters).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from typing import Literal

from flask import Blueprint
from flask import Response
from flask import render_template
from flask import request
from flask import url_for
from flask_admin import BaseView

from flask_geneva.admin.access import access_is_open_by_default
from flask_geneva.admin.access import can_act
from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import current_role
from flask_geneva.admin.access import has_access
from flask_geneva.admin.access import per_action
from flask_geneva.admin.access import permits
from flask_geneva.admin.access import refusal_reason
from flask_geneva.admin.audit import audit_refusal
from flask_geneva.admin.filters import WorkflowFilters
from flask_geneva.admin.filters import parse_workflow_filters
from flask_geneva.admin.presenters import format_time
from flask_geneva.admin.roles import VIEW
from flask_geneva.admin.time_display import parse_stored_time
from flask_geneva.admin.time_display import time_tag
from flask_geneva.core import clock
from flask_geneva.core.keys import parse_key
from flask_geneva.db import optional_columns as column_detection
from flask_geneva.db.queries import admin as admin_queries
from flask_geneva.ext.app_state import current_state

__all__ = [
    "GenevaView",
    "WorkflowPages",
    "asset_dir",
    "content_security_policy",
    "shows",
]

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
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


class GenevaView(BaseView):
    """Access, CSP header, templates and assets shared by the Geneva views.

    Args:
        geneva: The :class:`~flask_geneva.Geneva` extension whose rows are shown.
        **kwargs: ``flask_admin.BaseView`` arguments (name, endpoint, url, ...).
    """

    def __init__(self, geneva: Any, **kwargs: Any) -> None:
        self.geneva = geneva
        self.overview_endpoint = "geneva"
        self.workflows_endpoint = "geneva_workflows"
        self.executions_endpoint = "geneva_step_executions"
        self.signals_endpoint = "geneva_signals"
        self.limits_endpoint = "geneva_limits"
        self.schedules_endpoint = "geneva_schedules"
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
        blueprint.after_request(content_security_policy)
        return blueprint

    def is_accessible(self) -> bool:
        return has_access()

    def inaccessible_callback(self, name: Any, **kwargs: Any) -> Any:
        # Standalone page: nothing from the admin (menus, counts) may leak.
        reason = refusal_reason(VIEW)
        if request.method == "POST" or per_action():
            # R-ADM-214: every refused POST; under roles every refused page too.
            audit_refusal(
                VIEW, None, actor=current_actor(), role=current_role(), reason=reason
            )
        return Response(
            render_template(
                "geneva/admin/forbidden.html", reason=reason, roles=per_action()
            ),
            status=403,
        )

    def render(self, template: str, **kwargs: Any) -> str:
        kwargs.setdefault("geneva_open_by_default", access_is_open_by_default())
        kwargs.setdefault("geneva_can_act", can_act())
        # Buttons a user may not use are not shown under roles (R-ADM-213).
        kwargs.setdefault("geneva_shows", shows)
        roles = per_action()
        kwargs.setdefault("geneva_per_action", roles)
        kwargs.setdefault("geneva_role", current_role() if roles else None)
        kwargs.setdefault("geneva_css_url", self.asset_url("geneva/geneva.css"))
        kwargs.setdefault("overview_endpoint", self.overview_endpoint)
        kwargs.setdefault("workflows_endpoint", self.workflows_endpoint)
        kwargs.setdefault("executions_endpoint", self.executions_endpoint)
        kwargs.setdefault("signals_endpoint", self.signals_endpoint)
        kwargs.setdefault("limits_endpoint", self.limits_endpoint)
        kwargs.setdefault("schedules_endpoint", self.schedules_endpoint)
        kwargs.setdefault("fmt_time", format_time)
        now = clock.now()
        kwargs.setdefault("when", functools.partial(time_tag, now=now))
        kwargs.setdefault("stored_time", parse_stored_time)
        kwargs.setdefault("geneva_js_url", self.asset_url("geneva/geneva.js"))
        # Empty states name the classes an operator can start (R-ADM-53).
        kwargs.setdefault("defined_classes", sorted(self.geneva.workflow_classes))
        kwargs.setdefault("geneva_refresh_js_url", self.asset_url("geneva/refresh.js"))
        # Pages that wrap their content in #geneva-live refresh it (R-ADM-49).
        kwargs.setdefault(
            "geneva_refresh_seconds", current_state().config.admin.refresh_seconds
        )
        kwargs.setdefault("step_display", self.step_display)
        return str(super().render(template, **kwargs))

    def step_display(self, workflow_type: str | None, step_name: str | None) -> str:
        """How a stored step name reads: ``"new (was old)"`` when renamed (R-EVO-04).

        Args:
            workflow_type: The workflow row's ``type``; a type whose class is
                gone shows the stored name.
            step_name: The stored step name, or None (shown as ``""``).
        """
        if step_name is None:
            return ""
        workflow_cls = self.geneva.workflow_classes.get(workflow_type or "")
        if workflow_cls is None:
            return str(step_name)
        return str(workflow_cls.step_collection().display_name(step_name))

    def asset_url(self, filename: str) -> str:
        """URL of a file under ``static/`` (e.g. ``geneva/geneva.css``)."""
        return url_for(f"{self.endpoint}.assets.static", filename=filename)

    @property
    def session(self) -> Any:
        """The current session of the host's ``db.session``."""
        return self.geneva.session

    def _parse_key(self, raw: str | None) -> Any:
        """Parse an id from the URL/query string; None if it is not a valid key."""
        return parse_key(raw, self.geneva.key_type)

    def _columns(self) -> Any:
        return column_detection.optional_columns(self.session)


def shows(action: str, target: Any = None) -> bool:
    """Whether a page shows the control of ``action`` on ``target`` (R-ADM-213).

    Without roles every control is shown (disabled with the reason when
    ``GENEVA_ADMIN_CAN_ACT`` refuses, R-ADM-03); with them only the ones the
    user may use (:func:`~flask_geneva.admin.access.permits`).
    """
    return not per_action() or permits(action, target)


def content_security_policy(response: Response) -> Response:
    """Set the admin's CSP and nosniff headers unless the host set its own (R-ADM-06).

    No inline scripts: ``static/geneva/geneva.js`` comes from ``'self'``.
    """
    response.headers.setdefault("Content-Security-Policy", _CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


class WorkflowPages(GenevaView):
    """Base of the workflow pages' parts (list, detail, actions, bulk actions)."""

    def _load(self, workflow_id: Any) -> Any:
        """The workflow with this id as stored now, or None."""
        # Show the stored truth even if this session saw the row earlier.
        return admin_queries.load_workflow(
            self.session, self.geneva.Workflow, workflow_id
        )

    def _filters(self, args: Any) -> WorkflowFilters:
        """Validate the list filters of a query string or bulk form (R-ADM-11)."""
        columns = self._columns()
        return parse_workflow_filters(
            args,
            workflow_cls=self.geneva.Workflow,
            execution_cls=self.geneva.StepExecution,
            parse_key=self._parse_key,
            has_error_class_column=columns.error_class_name,
            now=clock.now(),
            has_child_workflows=columns.child_workflows,
        )
