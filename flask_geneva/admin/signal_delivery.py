"""The workflow page's "Deliver signal…" form and its endpoint (R-WSIG-68).

An operator can deliver a workflow signal by hand (an approval nobody sent, a
webhook that got lost): name, payload as JSON text and an optional idempotency
key, posted with the page's CSRF token to ``POST <workflows>/<id>/signal``. The
endpoint checks the token (R-ADM-05) and the permission (``GENEVA_ADMIN_CAN_ACT``,
R-ADM-03, or the role, R-ADM-213),
then calls ``workflow.signal()`` (R-WSIG-20): the admin runs no SQL of its own,
and the delivery behaves exactly as the application's or the CLI's
(R-WSIG-60). Every refusal — JSON that does not parse, a payload over
``GENEVA_MAX_SIGNAL_PAYLOAD_SIZE``, a full buffer, a finished or canceled
workflow (also one that ended after the page was rendered), the
``add_workflow_signals`` unit missing — is a flash message; nothing is stored.

A signal is not an operator action (R-WSIG-62): the workflow's metadata is not
written. The delivery is audited on the ``flask_geneva.admin`` logger instead,
with the actor (R-ADM-04) and ``via="admin"`` (R-WSIG-68).
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
from wtforms import StringField
from wtforms import TextAreaField

from flask_geneva.admin.access import current_actor
from flask_geneva.admin.access import require
from flask_geneva.admin.audit import AUDIT_LOGGER
from flask_geneva.admin.base_view import WorkflowPages
from flask_geneva.admin.csrf import flask_wtf_protects
from flask_geneva.core.cursors import parse_json_text
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.exceptions import GenevaError

__all__ = ["AUDIT_LOGGER", "WorkflowSignalDelivery", "delivery_outcome", "signal_form"]

_LABEL = "Deliver signal"
_audit = module_logger(AUDIT_LOGGER)


class _SignalFields:
    """The form's fields; the CSRF field comes from the base form."""

    name = StringField("Name")
    payload = TextAreaField("Payload (JSON)")
    idempotency_key = StringField("Idempotency key")


class _SecureSignalForm(_SignalFields, SecureForm):
    """The form with Flask-Admin's session-bound token."""


@functools.cache
def _flask_wtf_form() -> type[Form]:
    """The form on ``flask_wtf.FlaskForm`` (imported only when needed)."""
    from flask_wtf import FlaskForm

    class FlaskWTFSignalForm(_SignalFields, FlaskForm):
        """The form with Flask-WTF's token, the one ``CSRFProtect`` checks."""

    return FlaskWTFSignalForm


def signal_form(formdata: Any = None) -> Form:
    """The "Deliver signal…" form with the token the active protection accepts.

    Args:
        formdata: Submitted data to bind, or None for a blank form.

    Returns:
        A form with ``name``, ``payload`` and ``idempotency_key`` text fields and
        the CSRF field named ``form.meta.csrf_field_name`` (R-ADM-05).
    """
    if flask_wtf_protects():
        return _flask_wtf_form()(formdata=formdata)
    return _SecureSignalForm(formdata)


def delivery_outcome(delivery: Any, idempotency_key: str | None) -> str:
    """What a delivery did, in the CLI's words (R-WSIG-60, R-WSIG-68).

    Returns:
        ``"signal N stored, pending"``, ``"signal N stored, woke execution M"``
        or ``"duplicate of signal N (idempotency key 'K'), nothing changed"``.
    """
    signal = delivery.signal
    if delivery.duplicate:
        return (
            f"duplicate of signal {signal.id} (idempotency key "
            f"{idempotency_key!r}), nothing changed"
        )
    if delivery.woken:
        woken = ", ".join(str(execution_id) for execution_id in delivery.woken)
        return f"signal {signal.id} stored, woke execution {woken}"
    return f"signal {signal.id} stored, pending"


def _payload(raw: str) -> Any:
    """The payload text as JSON; empty means no payload.

    Raises:
        ValueError: The text is not JSON (or nests too deeply to parse); the
            message says where and gives an example.
    """
    if not raw.strip():
        return None
    try:
        return parse_json_text(raw)
    except ValueError as error:  # never a 500
        raise ValueError(
            f"the payload is not valid JSON ({error}); give a JSON document, e.g. "
            '{"amount": 100}, or leave it empty for no payload'
        ) from None


class WorkflowSignalDelivery(WorkflowPages):
    """``POST <workflows>/<id>/signal``: deliver a workflow signal (R-WSIG-68)."""

    @expose("/<workflow_id>/signal", methods=("POST",))
    def deliver_signal(self, workflow_id: str) -> Any:
        """Validate the form, call ``workflow.signal()``, flash and redirect.

        A stored signal no step of the class waits for adds a warning flash
        naming what the steps wait for (R-WSIG-73).

        Answers 400 for a missing or invalid CSRF token, 403 when
        ``GENEVA_ADMIN_CAN_ACT`` refuses and 404 for an unknown workflow; every
        other refusal is a flash message on the workflow page.
        """
        key = self._parse_key(workflow_id)
        workflow = self._load(key) if key is not None else None
        if workflow is None:
            abort(404)
        form = signal_form(request.form)
        token_stored = flask_wtf_protects() or "csrf" in http_session
        form.validate()
        if not token_stored or form.meta.csrf_field_name in form.errors:
            abort(400, description="missing or invalid CSRF token")
        require("deliver_signal", workflow)  # R-ADM-03, R-ADM-213
        name = (form.name.data or "").strip()
        idempotency_key = (form.idempotency_key.data or "").strip() or None
        target = redirect(
            url_for(f"{self.endpoint}.detail", workflow_id=workflow_id), code=303
        )
        self.session.commit()  # end the reading transaction before locking
        try:
            if not name:
                raise ValueError("give the signal's name (e.g. payment_confirmed)")
            payload = _payload(form.payload.data or "")
            delivery = workflow.signal(
                name, payload, idempotency_key=idempotency_key, warn_unawaited=False
            )
        except (GenevaError, ValueError) as error:
            self.session.rollback()
            flash(f"Workflow {workflow_id}: {_LABEL} refused: {error}", "error")
            return target
        outcome = delivery_outcome(delivery, idempotency_key)
        actor = current_actor()
        _audit.info(
            "workflow %s: signal %r delivered via admin by %s: %s",
            workflow_id,
            name,
            actor or "(unknown actor)",
            outcome,
            extra={
                "geneva_workflow_id": str(workflow_id),
                "geneva_signal_id": str(delivery.signal.id),
                "geneva_signal_name": name,
                "geneva_actor": actor,
                "geneva_via": "admin",
                "geneva_duplicate": delivery.duplicate,
            },
        )
        flash(f"Workflow {workflow_id}: {name}: {outcome}", "success")
        if delivery.unawaited is not None:  # a misspelt name (R-WSIG-73)
            flash(
                f"Workflow {workflow_id}: {name}: {delivery.unawaited} (the signal "
                "is stored)",
                "warning",
            )
        return target
