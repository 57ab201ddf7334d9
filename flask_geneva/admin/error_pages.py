"""Error pages of the admin inside its own layout (R-ADM-47).

A 400, 403, 404 or 500 answered for a URL under the admin's prefix renders
``geneva/admin/error.html`` in the admin layout, with its navigation, the status,
what it means and what to do. Every other URL of the host app keeps whatever
error page it had: a handler the host registered before us is called for those,
else Flask's default page is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import make_response
from flask import request
from flask.sansio.app import App
from werkzeug.exceptions import HTTPException
from werkzeug.exceptions import InternalServerError

from flask_geneva.admin.base_view import content_security_policy
from flask_geneva.core.tagged_logging import module_logger

__all__ = ["ERROR_PAGES", "install_error_pages"]

logger = module_logger(__name__)

#: Status code -> (title, what it means and what to do) of the admin's error pages.
ERROR_PAGES: dict[int, tuple[str, str]] = {
    400: (
        "Bad request",
        "The request could not be used as sent, for example a form posted without "
        "its CSRF token or after the token expired. Go back, reload the page and "
        "try again.",
    ),
    403: (
        "Forbidden",
        "You may not do this here. GENEVA_ADMIN_ACCESS decides who may see the "
        "admin and GENEVA_ADMIN_CAN_ACT who may press its buttons; with roles, "
        "GENEVA_ADMIN_CURRENT_ROLE or GENEVA_ADMIN_AUTHORIZE decides each action. "
        "The refusal is recorded with your name.",
    ),
    404: (
        "Not found",
        "There is no page, workflow or step execution at this address. It may "
        "have been deleted, or the link is mistyped.",
    ),
    500: (
        "Server error",
        "Something went wrong on the server while answering this page; the error "
        "is in the application's log. Nothing was changed by this page itself.",
    ),
}


def _previous_handler(app: App, code: int) -> Callable[[Any], Any] | None:
    """The app-wide handler the host registered for ``code`` before us, if any."""
    handlers = app.error_handler_spec.get(None, {}).get(code, {})
    for handler in handlers.values():
        return handler
    return None


def install_error_pages(app: App, prefix: str, view: Any) -> None:
    """Answer 400/403/404/500 under ``prefix`` with the admin's error page (R-ADM-47).

    Args:
        app: The Flask app the admin is registered on.
        prefix: The admin's URL prefix, e.g. ``"/geneva"`` (no trailing slash).
        view: A Geneva admin view whose ``render`` draws the page in the layout.
    """
    base = prefix.rstrip("/")

    def under_admin() -> bool:
        path = request.path
        return path == base or path.startswith(base + "/")

    for code in ERROR_PAGES:
        previous = _previous_handler(app, code)

        def handle(
            error: HTTPException, code: int = code, previous: Any = previous
        ) -> Any:
            if not under_admin():
                return previous(error) if previous is not None else error
            return _render(view, error, code)

        app.register_error_handler(code, handle)


def _render(view: Any, error: HTTPException, code: int) -> Any:
    title, explanation = ERROR_PAGES[code]
    description = error.description if isinstance(error, HTTPException) else ""
    if description == type(error).description or isinstance(error, InternalServerError):
        # Werkzeug's generic text says less than ours; a 500's details stay in
        # the log, the page does not leak them.
        description = ""
    try:
        body = view.render(
            "geneva/admin/error.html",
            status=code,
            title=title,
            explanation=explanation,
            description=description or "",
        )
    except Exception:  # the layout itself failed: fall back to the plain page
        logger.exception("flask_geneva admin: the %s error page failed", code)
        return error
    response = make_response(body, code)
    return content_security_policy(response)
