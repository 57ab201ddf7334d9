"""Who may see the Geneva admin, who may act, and who acted (R-ADM-02..04).

Evaluated per request from the validated ``GENEVA_ADMIN_*`` settings; the views
and the action endpoints ask here, never read the settings themselves.
"""

from __future__ import annotations

from typing import Any

from flask import current_app
from flask import request

from flask_geneva.ext.app_state import current_state

__all__ = ["access_is_open_by_default", "can_act", "current_actor", "has_access"]


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
