"""The example's demo login: fixed users with admin roles (DEMO ONLY).

Three users share one password, ``$EXAMPLE_ADMIN_PASSWORD`` (the demo makes one up
and prints it): ``viewer`` sees every page and has no button, ``operator`` starts
and steers workflows, ``admin`` may also recover a running step, act on every
matching workflow and run schedules (flask_geneva's role map, R-ADM-212). The
login is a session cookie signed with ``SECRET_KEY``.

This is a demonstration, not an authentication system: a real app takes its
users and roles from its own login (Flask-Login, an SSO proxy, ...) and points
``GENEVA_ADMIN_CURRENT_ROLE`` and ``GENEVA_ADMIN_ACTOR`` at them.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from flask import Blueprint
from flask import Response
from flask import redirect
from flask import render_template_string
from flask import request
from flask import session
from flask import url_for

__all__ = ["DEMO_USERS", "current_role", "current_user_name", "login_blueprint"]

#: The demo users and their admin roles (R-ADM-212).
DEMO_USERS = {"viewer": "viewer", "operator": "operator", "admin": "admin"}
_SESSION_KEY = "example_user"

login_blueprint = Blueprint("example_login", __name__)

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Log in - flask_geneva example</title></head>
<body>
<h1>flask_geneva example: log in to the admin</h1>
<p>Demo users (one password, printed by <code>python -m example_app demo</code>):
<code>viewer</code> (reads only), <code>operator</code> (starts and steers workflows),
<code>admin</code> (also recovers steps, acts on all matching, runs schedules).</p>
{% if error %}<p role="alert"><strong>{{ error }}</strong></p>{% endif %}
<form method="post">
  <input type="hidden" name="next" value="{{ next }}">
  <label>User <select name="user">{% for name in users %}<option{% if name == user %} selected{% endif %}>{{ name }}</option>{% endfor %}</select></label>
  <label>Password <input type="password" name="password" autocomplete="current-password"></label>
  <button type="submit">Log in</button>
</form>
</body></html>
"""


def current_user_name() -> str | None:
    """``GENEVA_ADMIN_ACTOR`` of the example: the logged-in demo user, or None."""
    name = session.get(_SESSION_KEY)
    return name if name in DEMO_USERS else None


def current_role() -> str | None:
    """``GENEVA_ADMIN_CURRENT_ROLE`` of the example: the demo user's role, or None."""
    name = current_user_name()
    return DEMO_USERS[name] if name is not None else None


def password_ok(given: str) -> bool:
    """Whether ``given`` is ``$EXAMPLE_ADMIN_PASSWORD`` (unset: no login at all)."""
    expected = os.environ.get("EXAMPLE_ADMIN_PASSWORD", "")
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def _safe_next(target: str) -> str:
    # Only a path of this site: never an open redirect to another host.
    if target.startswith("/") and not target.startswith("//"):
        return target
    return "/geneva/"


@login_blueprint.route("/login", methods=("GET", "POST"))
def login() -> Any:
    """The login form; a right password logs the chosen demo user in."""
    next_url = _safe_next(request.values.get("next", "/geneva/"))
    user = request.form.get("user", "operator")
    if request.method == "POST":
        if user in DEMO_USERS and password_ok(request.form.get("password", "")):
            session.clear()
            session[_SESSION_KEY] = user
            return redirect(next_url, code=303)
        page = render_template_string(
            _PAGE,
            error="Wrong user or password.",
            users=DEMO_USERS,
            user=user,
            next=next_url,
        )
        return Response(page, status=401)
    return render_template_string(
        _PAGE, error="", users=DEMO_USERS, user=user, next=next_url
    )


@login_blueprint.route("/logout")
def logout() -> Any:
    """Forget the demo user."""
    session.pop(_SESSION_KEY, None)
    return redirect(url_for("example_login.login"), code=303)


def ask_for_login() -> Response | None:
    """``before_request``: send an admin request without a demo user to the login."""
    if request.path.startswith("/geneva") and current_user_name() is None:
        return redirect(url_for("example_login.login", next=request.full_path))
    return None
