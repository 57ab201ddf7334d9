"""The CSRF token of the admin's buttons, whichever protection is active (R-ADM-05).

Two schemes exist and a page must carry the token the active one accepts:

* **Flask-WTF's** ``CSRFProtect``, when the host app installed it and
  ``WTF_CSRF_ENABLED`` is true: its ``before_request`` check rejects every POST
  whose ``WTF_CSRF_FIELD_NAME`` field is not a Flask-WTF token, before our view
  runs. The forms are then ``flask_wtf.FlaskForm`` forms, whose token is the one
  ``CSRFProtect`` checks, and which validate it again themselves.
* **Flask-Admin's** ``SecureForm`` otherwise (also when Flask-WTF is not
  installed): a session-bound token checked by the form's ``validate()``.

Flask-WTF stays optional: it is imported only when the app has it installed.
"""

from __future__ import annotations

import functools
from typing import Any

from flask import current_app
from flask import request
from flask import session as http_session
from flask_admin.form import SecureForm
from wtforms import Form
from wtforms import HiddenField

__all__ = ["action_form", "flask_wtf_protects", "submitted_action_form"]


class _ActionFields:
    """The fields of every button's form; the CSRF field comes from the base form."""

    action = HiddenField()
    confirm = HiddenField()
    #: The step the page showed as current: Skip acts only if it still is, so a
    #: second click (or a stale page) cannot skip the next step too (R-ADM-21).
    step = HiddenField()
    #: Recover: the in-progress execution the operator confirmed, and "yes" to
    #: recover it even within GENEVA_RECOVER_GRACE (R-HK-28).
    execution = HiddenField()
    force = HiddenField()


class _SecureActionForm(_ActionFields, SecureForm):
    """The button form with Flask-Admin's session-bound token."""


@functools.cache
def _flask_wtf_action_form() -> type[Form]:
    """The button form on ``flask_wtf.FlaskForm`` (imported only when needed)."""
    from flask_wtf import FlaskForm

    class FlaskWTFActionForm(_ActionFields, FlaskForm):
        """The button form with Flask-WTF's token, the one ``CSRFProtect`` checks."""

    return FlaskWTFActionForm


def flask_wtf_protects(app: Any | None = None) -> bool:
    """Whether Flask-WTF's ``CSRFProtect`` guards ``app``'s POSTs (R-ADM-05).

    Args:
        app: The Flask app; default the current app.

    Returns:
        True when ``CSRFProtect`` was initialised on the app (it registers itself
        as ``app.extensions["csrf"]``) and ``WTF_CSRF_ENABLED`` is not false.
    """
    app = app if app is not None else current_app
    protection = app.extensions.get("csrf")
    if protection is None:
        return False
    try:
        from flask_wtf.csrf import CSRFProtect
    except ImportError:
        return False
    return isinstance(protection, CSRFProtect) and bool(
        app.config.get("WTF_CSRF_ENABLED", True)
    )


def action_form(formdata: Any = None) -> Form:
    """A button form whose CSRF token the active protection accepts (R-ADM-05).

    Args:
        formdata: Submitted data to bind (``request.form``); None renders a blank
            form with a fresh token.

    Returns:
        A form with ``action``, ``confirm`` and ``step`` hidden fields and the
        CSRF field, named ``form.meta.csrf_field_name`` (``WTF_CSRF_FIELD_NAME``
        under ``CSRFProtect``, else ``csrf_token``).
    """
    if flask_wtf_protects():
        return _flask_wtf_action_form()(formdata=formdata)
    return _SecureActionForm(formdata)


def submitted_action_form() -> Form | None:
    """The POSTed button form if its CSRF token is valid, else None (R-ADM-05).

    A token is valid only for the session that loaded the page: Flask-Admin's
    scheme needs the secret it stored in the session and Flask-WTF's the signed
    token it stored there, so a forged or stale request without them fails.
    """
    form = action_form(request.form)
    if not flask_wtf_protects() and "csrf" not in http_session:
        return None
    return form if form.validate() else None
