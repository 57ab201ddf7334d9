"""The workflow page's "Resume at step…" form and its endpoint (R-EVO-06, R-ADM-05).

A paused workflow can be continued from a step the operator chooses: a WTForms
select of the class's defined steps, posted with the page's CSRF token to
``POST <workflows>/<id>/resume-at``. The endpoint checks the token and the
permission (``GENEVA_ADMIN_CAN_ACT``, R-ADM-03, or the role, R-ADM-213), then
calls ``workflow.resume_at(step, via="admin", actor=...)``, which records the
operator action (R-PDR-05). The admin writes nothing itself (R-ADM-21).
"""

from __future__ import annotations

import functools
from typing import Any

from flask import abort
from flask import flash
from flask import redirect
from flask import request
from flask import session as http_session
from flask import url_for
from flask_admin import expose
from flask_admin.form import SecureForm
from wtforms import Form
from wtforms import SelectField
from wtforms.validators import InputRequired

from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import require
from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.csrf import flask_wtf_protects
from flask_geneva.exceptions import GenevaError

__all__ = ["WorkflowResumeAt", "resume_at_form"]

_LABEL = "Resume at step…"


class _ResumeAtFields:
    """The select of the defined steps; the CSRF field comes from the base form."""

    step_name = SelectField("Step", choices=[], validators=[InputRequired()])


class _SecureResumeAtForm(_ResumeAtFields, SecureForm):
    """The form with Flask-Admin's session-bound token."""


@functools.cache
def _flask_wtf_form() -> type[Form]:
    """The form on ``flask_wtf.FlaskForm`` (imported only when needed)."""
    from flask_wtf import FlaskForm

    class FlaskWTFResumeAtForm(_ResumeAtFields, FlaskForm):
        """The form with Flask-WTF's token, the one ``CSRFProtect`` checks."""

    return FlaskWTFResumeAtForm


def resume_at_form(steps: Any, formdata: Any = None) -> Form:
    """The "Resume at step…" form for a class's step collection (R-EVO-06).

    Args:
        steps: The workflow class's :class:`~flask_geneva.dsl.ordering.StepCollection`.
        formdata: Submitted data to bind, or None for a blank form.

    Returns:
        A form whose ``step_name`` select offers the defined steps in execution
        order, with the CSRF token the active protection accepts (R-ADM-05).
    """
    if flask_wtf_protects():
        form = _flask_wtf_form()(formdata=formdata)
    else:
        form = _SecureResumeAtForm(formdata)
    form.step_name.choices = [(name, name) for name in steps.names]
    return form


class WorkflowResumeAt(WorkflowPages):
    """``POST <workflows>/<id>/resume-at``: resume a paused workflow at a step."""

    @expose("/<workflow_id>/resume-at", methods=("POST",))
    def resume_at(self, workflow_id: str) -> Any:
        """Validate the form, call ``workflow.resume_at``, flash and redirect.

        Answers 400 for a missing or invalid CSRF token or a step that is not
        one of the defined steps (the message lists them), 403 when
        ``GENEVA_ADMIN_CAN_ACT`` refuses, 404 for an unknown workflow or class.
        """
        key = self._parse_key(workflow_id)
        workflow = self._load(key) if key is not None else None
        if workflow is None or workflow.type not in self.geneva.workflow_classes:
            abort(404)
        steps = type(workflow).step_collection()
        form = resume_at_form(steps, request.form)
        token_stored = flask_wtf_protects() or "csrf" in http_session
        valid = form.validate()
        csrf_field = form.meta.csrf_field_name
        if not token_stored or csrf_field in form.errors:
            abort(400, description="missing or invalid CSRF token")
        if not valid:
            allowed = ", ".join(repr(name) for name in steps.names) or "(none)"
            abort(
                400,
                description=f"unknown step {form.step_name.data!r}; allowed steps: "
                f"{allowed}",
            )
        require("resume_at", workflow)  # R-ADM-03, R-ADM-213
        step_name = str(form.step_name.data)
        self.session.commit()  # end the reading transaction before locking
        try:
            workflow.resume_at(step_name, actor=current_actor(), via="admin")
        except (GenevaError, ValueError) as error:
            self.session.rollback()
            flash(f"Workflow {workflow_id}: {_LABEL} refused: {error}", "error")
        else:
            state = self._load(key).state
            flash(
                f"Workflow {workflow_id}: resumed at step {step_name}; state is now "
                f"{state}",
                "success",
            )
        return redirect(
            url_for(f"{self.endpoint}.detail", workflow_id=workflow_id), code=303
        )
