"""The admin's 400/403/404/500 pages inside its layout, only under its URL (R-ADM-47)."""

from __future__ import annotations

import re
from typing import Any

from flask import Flask
from flask_admin import Admin
from jinja2 import StrictUndefined

from flask_geneva.admin import register_admin
from tests.admin.conftest import csrf_token
from tests.admin.support import action_url
from tests.admin.support import detail_url
from tests.admin.support import ready_workflow
from tests.apps import basic
from tests.conftest import make_app

NAV = (
    '<a class="btn btn-sm btn-primary" href="/geneva/">Overview</a>',
    'href="/geneva/workflows/">Workflows</a>',
    'href="/geneva/step-executions/">Step executions</a>',
)


def _styled(response: Any, status: int, title: str) -> str:
    """Assert an admin error page: status, layout, navigation, CSP; return its text."""
    text = response.get_data(as_text=True)
    assert response.status_code == status
    assert f'data-geneva-status="{status}"' in text
    assert f'<span class="geneva-error-code">{status}</span> {title}</h2>' in text
    assert 'class="navbar-brand"' in text  # the admin layout's navigation bar
    for link in NAV:
        assert link in text
    assert "default-src 'self'" in response.headers["Content-Security-Policy"]
    return text


def test_unknown_url_and_unknown_workflow_are_styled_404s(client):
    """A URL under the admin that does not exist, and a workflow id that does not, answer the admin's 404 page with navigation (R-ADM-47)."""
    _styled(client.get("/geneva/no-such-page"), 404, "Not found")
    text = _styled(client.get(detail_url(987654)), 404, "Not found")
    assert "There is no page, workflow or step execution at this address" in text
    _styled(client.get("/geneva/step-executions/not-an-id"), 404, "Not found")


def test_a_post_without_csrf_token_is_a_styled_400_naming_the_reason(client):
    """A button POST without its CSRF token answers the admin's 400 page, saying why (R-ADM-47, R-ADM-05)."""
    workflow = ready_workflow()
    response = client.post(action_url(workflow.id), data={"action": "pause"})
    text = _styled(response, 400, "Bad request")
    assert "Details: missing or invalid CSRF token" in text


def test_acting_without_permission_is_a_styled_403(app, client):
    """A POST refused by GENEVA_ADMIN_CAN_ACT answers the admin's 403 page (R-ADM-47, R-ADM-03)."""
    workflow = ready_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    response = client.post(
        action_url(workflow.id), data={"action": "pause", "csrf_token": token}
    )
    text = _styled(response, 403, "Forbidden")
    assert "GENEVA_ADMIN_CAN_ACT does not allow you to act" in text


def test_a_server_error_under_the_admin_is_a_styled_500_without_details(app):
    """An exception under the admin's URL answers the admin's 500 page, which does not show the error (R-ADM-47)."""
    app.config["PROPAGATE_EXCEPTIONS"] = False

    def explode() -> str:
        raise RuntimeError("secret connection string")

    app.add_url_rule("/geneva/explode", "explode", explode)
    response = app.test_client().get("/geneva/explode")
    text = _styled(response, 500, "Server error")
    assert "secret connection string" not in text


def test_the_host_apps_other_error_pages_are_unchanged(app):
    """A 404 or 500 outside the admin's URL keeps Flask's page (R-ADM-47)."""
    app.config["PROPAGATE_EXCEPTIONS"] = False

    def explode() -> str:
        raise RuntimeError("host failure")

    app.add_url_rule("/shop/explode", "shop_explode", explode)
    client = app.test_client()
    for url, status in (
        ("/shop/nothing", 404),
        ("/shop/explode", 500),
        ("/genevax", 404),
    ):
        response = client.get(url)
        assert response.status_code == status
        text = response.get_data(as_text=True)
        assert "geneva-error-page" not in text
        assert "Content-Security-Policy" not in response.headers


def test_a_host_handler_keeps_answering_outside_the_admin(tmp_path):
    """A host admin's own 404 handler, registered before the Geneva views, still answers its pages; the Geneva URLs get the admin's page (R-ADM-47, R-ADM-01)."""
    app: Flask = make_app(tmp_path, SECRET_KEY="host-error-tests")  # noqa: S106
    app.jinja_env.undefined = StrictUndefined
    app.register_error_handler(404, lambda error: ("host's own 404", 404))
    host_admin = Admin(app, name="Host")
    register_admin(host_admin, basic.geneva)
    client = app.test_client()
    try:
        for url in ("/nothing", "/admin/nothing"):
            response = client.get(url)
            assert (response.status_code, response.get_data(as_text=True)) == (
                404,
                "host's own 404",
            )
        response = client.get("/admin/geneva/workflows/987654")
        text = response.get_data(as_text=True)
        assert response.status_code == 404
        assert re.search(r'<span class="geneva-error-code">404</span> Not found', text)
        assert 'href="/admin/geneva/">Overview</a>' in text
    finally:
        with app.app_context():
            basic.db.session.remove()
            for engine in basic.db.engines.values():
                engine.dispose()
