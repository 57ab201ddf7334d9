"""Who may see the Geneva admin, who may do what, and who acted (R-ADM-02..04,
R-ADM-210..214).

Evaluated per request from the validated ``GENEVA_ADMIN_*`` settings; the views
and the action endpoints ask here, never read the settings themselves.

Two ways to decide:

* **one switch** (neither ``GENEVA_ADMIN_CURRENT_ROLE`` nor
  ``GENEVA_ADMIN_AUTHORIZE`` set): ``GENEVA_ADMIN_ACCESS`` decides viewing and
  ``GENEVA_ADMIN_CAN_ACT`` every action (R-ADM-02, R-ADM-03);
* **per action**: ``GENEVA_ADMIN_ACCESS`` (when set) still gates every request,
  then the user's role and the role map (:mod:`flask_geneva.admin.roles`), or
  the host's ``authorize(user, action, target)``, decides each action, viewing
  included (R-ADM-210, R-ADM-211).

:func:`permits` answers; :func:`require` refuses with a 403 and an audit record.
"""

from __future__ import annotations

from typing import Any
from typing import NoReturn

from flask import abort
from flask import current_app
from flask import request

from flask_geneva.admin.audit import audit_refusal
from flask_geneva.admin.roles import ACTION_TARGETS
from flask_geneva.admin.roles import ROLES
from flask_geneva.admin.roles import VIEW
from flask_geneva.admin.roles import role_allows
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.ext.app_state import current_state

__all__ = [
    "access_is_open_by_default",
    "can_act",
    "current_actor",
    "current_role",
    "current_user",
    "has_access",
    "per_action",
    "permits",
    "refusal_reason",
    "refuse",
    "require",
]

logger = module_logger(__name__)
_NO_ROLE = object()
_ROLE_KEY = "flask_geneva.admin.role"
#: Every action but viewing, for :func:`can_act` under roles.
_ACTING = tuple(action for action in ACTION_TARGETS if action != VIEW)


def _admin_config() -> Any:
    return current_state().config.admin


def per_action() -> bool:
    """Whether roles or ``GENEVA_ADMIN_AUTHORIZE`` decide each action (R-ADM-210)."""
    return bool(_admin_config().per_action)


def access_is_open_by_default() -> bool:
    """True when access is granted only because debug/testing is on (R-ADM-02)."""
    config = _admin_config()
    return (
        config.access is None
        and not config.per_action
        and bool(current_app.debug or current_app.testing)
    )


def _gate() -> bool:
    """``GENEVA_ADMIN_ACCESS`` for this request; unset: open in debug/testing,
    and open to the per-action decision when roles are configured."""
    config = _admin_config()
    if config.access is None:
        return config.per_action or bool(current_app.debug or current_app.testing)
    return bool(config.access())


def has_access() -> bool:
    """Whether this request may view the admin (R-ADM-02, R-ADM-210)."""
    return permits(VIEW)


def can_act() -> bool:
    """Evaluate ``GENEVA_ADMIN_CAN_ACT`` (default: access) per request (R-ADM-03).

    With roles (R-ADM-210), whether the user's role allows any action besides
    viewing; with ``GENEVA_ADMIN_AUTHORIZE``, always True when the user may view
    (each button then asks :func:`permits` for itself).
    """
    config = _admin_config()
    if config.per_action:
        if not _gate():
            return False
        if config.current_role is not None:
            role = current_role()
            return role is not None and any(
                role_allows(role, action) for action in _ACTING
            )
        return permits(VIEW)
    check = config.can_act
    if check is None:
        return has_access()
    return has_access() and bool(check())


def current_role() -> str | None:
    """The user's role from ``GENEVA_ADMIN_CURRENT_ROLE``, once per request.

    Returns:
        One of :data:`~flask_geneva.admin.roles.ROLES`, or None: no role, the
        setting unset, or a value that is no role (logged as a warning naming
        it and the roles; the user gets no role, R-ADM-212).
    """
    # Kept in the request's environ: an app context (``g``) may outlive a request.
    cached = request.environ.get(_ROLE_KEY, _NO_ROLE)
    if cached is not _NO_ROLE:
        return cached  # type: ignore[no-any-return]
    loader = _admin_config().current_role
    value = loader() if loader is not None else None
    role: str | None = None
    if value is not None and value not in ROLES:
        logger.warning(
            "GENEVA_ADMIN_CURRENT_ROLE returned %r, which is no role; the roles "
            "are %s. The user gets no role (403 on every admin page)",
            value,
            ", ".join(ROLES),
        )
    elif value is not None:
        role = str(value)
    request.environ[_ROLE_KEY] = role
    return role


def current_user() -> Any:
    """The ``user`` passed to ``GENEVA_ADMIN_AUTHORIZE`` (R-ADM-211).

    Flask-Login's ``current_user`` when Flask-Login is installed and a user is
    logged in; else the actor's name (:func:`current_actor`: the
    ``GENEVA_ADMIN_ACTOR`` result, else the HTTP basic-auth user name), or None.
    """
    user = _flask_login_user()
    return user if user is not None else current_actor()


def permits(action: str, target: Any = None) -> bool:
    """Whether this request may do ``action`` on ``target`` (R-ADM-210..212).

    Args:
        action: An admin action (:data:`~flask_geneva.admin.roles.ACTION_TARGETS`).
        target: What it is about: a workflow, a workflow class, a schedule's
            name, or None (see ``ACTION_TARGETS``).

    Returns:
        Without roles: ``GENEVA_ADMIN_ACCESS`` for viewing, ``GENEVA_ADMIN_CAN_ACT``
        (default: access) for everything else. With them: the access gate, then
        the role map or ``GENEVA_ADMIN_AUTHORIZE(user, action, target)``.
    """
    config = _admin_config()
    if not config.per_action:
        if action == VIEW:
            return _gate()
        return can_act()
    if not _gate():
        return False
    if config.current_role is not None:
        return role_allows(current_role(), action)
    role_allows(None, action)  # an unknown action name is a bug: raise
    return bool(config.authorize(current_user(), action, target))


def refusal_reason(action: str) -> str:
    """What the 403 page and the audit record say a refusal of ``action`` was."""
    config = _admin_config()
    if not config.per_action:
        if action == VIEW:
            return "GENEVA_ADMIN_ACCESS does not allow you to see the admin"
        return "GENEVA_ADMIN_CAN_ACT does not allow you to act"
    if config.access is not None and not _gate():
        return "GENEVA_ADMIN_ACCESS does not allow you to see the admin"
    if config.current_role is not None:
        role = current_role()
        if role is None:
            return "you have no admin role (GENEVA_ADMIN_CURRENT_ROLE)"
        return f"your role {role!r} does not allow {action!r}"
    return f"GENEVA_ADMIN_AUTHORIZE does not allow you {action!r}"


def require(action: str, target: Any = None) -> None:
    """Refuse the request unless :func:`permits` allows ``action`` (R-ADM-213).

    A refusal is recorded (:func:`~flask_geneva.admin.audit.audit_refusal`,
    R-ADM-214) and answered with 403, which the admin's error page shows in
    its layout with the reason (R-ADM-47). Call it before any change.

    Raises:
        werkzeug.exceptions.Forbidden: Not allowed.
    """
    if not permits(action, target):
        refuse(action, target)


def refuse(action: str, target: Any = None) -> NoReturn:
    """Record the refusal of ``action`` and answer 403 with the reason (R-ADM-214).

    For a request refused without asking :func:`permits` about one target
    (the start page when no class may be started).

    Raises:
        werkzeug.exceptions.Forbidden: Always.
    """
    reason = refusal_reason(action)
    audit_refusal(
        action,
        target,
        actor=current_actor(),
        role=current_role() if _admin_config().current_role is not None else None,
        reason=reason,
    )
    abort(403, description=reason)


def current_actor() -> str | None:
    """The operator recorded with an action (R-ADM-04).

    ``GENEVA_ADMIN_ACTOR()`` when set; else the Flask-Login user id when a user is
    logged in; else the HTTP basic-auth user name; else None.
    """
    actor = _admin_config().actor
    if actor is not None:
        value = actor()
        return None if value is None else str(value)
    user = _flask_login_user()
    if user is not None:
        get_id = getattr(user, "get_id", None)
        if callable(get_id):
            return str(get_id())
    auth = request.authorization
    if auth is not None and auth.username:
        return str(auth.username)
    return None


def _flask_login_user() -> Any:
    """Flask-Login's logged-in ``current_user``, or None (not installed, anonymous)."""
    try:
        from flask_login import current_user as login_user
    except ImportError:
        return None
    if getattr(login_user, "is_authenticated", False):
        return login_user
    return None
