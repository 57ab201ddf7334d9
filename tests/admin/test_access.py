"""Mounting and access control of the admin (R-ADM-01..04, R-ADM-06)."""

from __future__ import annotations

import re

import pytest
from flask import request
from flask_admin import Admin
from jinja2 import StrictUndefined

from flask_geneva import GenevaConfigurationError
from flask_geneva.admin import register_admin
from tests.admin.conftest import csrf_token
from tests.admin.support import action_url
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps import basic
from tests.apps.basic import geneva
from tests.conftest import make_app
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


def allow_operators() -> bool:
    """Access hook used by import path: only requests with the operator header."""
    return request.headers.get("X-Operator") == "yes"


def geneva_urls(app, workflow_id):
    """Every non-static URL of the Geneva admin, with existing workflow/execution ids."""
    execution_id = execution_rows(workflow_id)[0]["id"]
    urls = []
    for rule in app.url_map.iter_rules():
        if not rule.endpoint.startswith("geneva") or rule.endpoint.endswith(".static"):
            continue
        url = rule.rule.replace("<workflow_id>", str(workflow_id))
        url = url.replace("<execution_id>", str(execution_id))
        url = url.replace("<type_name>", "AdminFailing")
        assert "<" not in url, f"a URL parameter the test does not fill: {url}"
        urls.append((url, "POST" if "POST" in rule.methods else "GET"))
    return urls


def test_geneva_urls_answer_403_naming_the_setting_without_access_hook(app):
    """Outside debug/testing without GENEVA_ADMIN_ACCESS every Geneva URL is 403 and names the setting (R-ADM-02)."""
    workflow = failed_workflow()
    app.testing = False
    client = app.test_client()
    urls = geneva_urls(app, workflow.id)
    assert len(urls) >= 4
    for url, method in urls:
        response = client.open(url, method=method, data={"action": "cancel"})
        assert response.status_code == 403, url
        body = response.get_data(as_text=True)
        assert "GENEVA_ADMIN_ACCESS" in body
        assert "AdminFailing" not in body
        assert "boom" not in body
    assert workflow_row(workflow.id)["state"] == "paused"


def test_access_hook_is_evaluated_per_request_and_accepts_an_import_path(app):
    """GENEVA_ADMIN_ACCESS as an import path grants access per request (R-ADM-02)."""
    workflow = ready_workflow()
    app.testing = False
    app.config["GENEVA_ADMIN_ACCESS"] = "tests.admin.test_access:allow_operators"
    geneva.reload_settings(app)
    client = app.test_client()
    assert client.get(detail_url(workflow.id)).status_code == 403
    page = client.get(detail_url(workflow.id), headers={"X-Operator": "yes"})
    assert page.status_code == 200
    assert "geneva-open-banner" not in page.get_data(as_text=True)


def test_testing_mode_without_access_hook_shows_a_warning_banner(client):
    """In testing mode with no access hook the pages open with a visible warning (R-ADM-02)."""
    for url in ("/geneva/", "/geneva/workflows/"):
        page = client.get(url)
        assert page.status_code == 200
        assert "GENEVA_ADMIN_ACCESS is not set" in page.get_data(as_text=True)


def test_read_only_operator_sees_disabled_buttons_and_cannot_act(app, client):
    """With GENEVA_ADMIN_CAN_ACT false the buttons are disabled with the reason and a POST is refused (R-ADM-03)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    geneva.reload_settings(app)
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert re.search(
        r'disabled title="read-only: GENEVA_ADMIN_CAN_ACT[^"]*" data-geneva-action="resume"',
        page,
    )
    response = client.post(
        action_url(workflow.id), data={"csrf_token": token, "action": "resume"}
    )
    assert response.status_code == 403
    assert workflow_row(workflow.id)["state"] == "paused"


def test_actor_comes_from_the_actor_setting(app, client):
    """GENEVA_ADMIN_ACTOR names the operator recorded with the action (R-ADM-04, R-PDR-05)."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "alice"
    geneva.reload_settings(app)
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    client.post(action_url(workflow.id), data={"csrf_token": token, "action": "resume"})
    entry = workflow_row(workflow.id)["metadata"]["operator_actions"][-1]
    assert entry["actor"] == "alice"
    assert entry["via"] == "admin"
    assert entry["action"] == "resume"


def test_actor_defaults_to_the_basic_auth_user_name(client):
    """Without GENEVA_ADMIN_ACTOR the HTTP basic-auth user name is recorded (R-ADM-04)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    client.post(
        action_url(workflow.id),
        data={"csrf_token": token, "action": "resume"},
        headers={"Authorization": "Basic b3BlcmF0b3I6c2VjcmV0"},  # operator:secret
    )
    entry = workflow_row(workflow.id)["metadata"]["operator_actions"][-1]
    assert entry["actor"] == "operator"


def test_pages_send_a_csp_without_inline_scripts(client):
    """Every page sends a Content-Security-Policy without unsafe-inline scripts and has no inline script (R-ADM-06)."""
    workflow = failed_workflow()
    pages = [url for url, method in geneva_urls(client.application, workflow.id)]
    pages = [
        url
        for url in pages
        if not url.endswith(("/action", "/resume-at", "/bulk", "/signal"))
    ]
    assert len(pages) >= 5
    for url in pages:
        response = client.get(url)
        policy = response.headers["Content-Security-Policy"]
        script_src = re.search(r"script-src ([^;]*)", policy).group(1)
        assert "unsafe-inline" not in script_src
        assert "'self'" in script_src
        for tag in re.findall(r"<script[^>]*>", response.get_data(as_text=True)):
            assert "src=" in tag


def test_register_admin_adds_views_to_a_host_admin_under_workflows(tmp_path):
    """register_admin attaches the views to the host's Admin in category Workflows (R-ADM-01)."""
    app = make_app(tmp_path, SECRET_KEY="host-admin-tests")  # noqa: S106 - test key
    app.jinja_env.undefined = StrictUndefined
    host_admin = Admin(app, name="Host")
    views = register_admin(host_admin, basic.geneva)
    assert [view.category for view in views] == ["Workflows"] * 6
    with app.app_context():
        workflow = ready_workflow()
        workflow_id = workflow.id
        basic.db.session.remove()
    client = app.test_client()
    try:
        page = client.get("/admin/geneva/")
        assert page.status_code == 200
        assert "Workflows" in page.get_data(as_text=True)
        detail = client.get(f"/admin/geneva/workflows/{workflow_id}")
        assert detail.status_code == 200
        assert "AdminTwoStep" in detail.get_data(as_text=True)
    finally:
        with app.app_context():
            basic.db.session.remove()
            for engine in basic.db.engines.values():
                engine.dispose()


def test_invalid_admin_settings_are_rejected_at_init_app(tmp_path):
    """Invalid GENEVA_ADMIN_* values raise GenevaConfigurationError naming the key (R-CFG-01, R-ADM-01)."""
    with pytest.raises(GenevaConfigurationError, match="GENEVA_ADMIN_URL"):
        make_app(tmp_path, GENEVA_ADMIN_URL="geneva")
    with pytest.raises(GenevaConfigurationError, match="GENEVA_ADMIN_ACCESS"):
        make_app(tmp_path, GENEVA_ADMIN_ACCESS=42)
    with pytest.raises(
        GenevaConfigurationError, match="GENEVA_ADMIN_PAUSED_RATIO_WARN"
    ):
        make_app(tmp_path, GENEVA_ADMIN_PAUSED_RATIO_WARN=2)


def test_refresh_seconds_must_be_a_whole_number_of_seconds(tmp_path):
    """GENEVA_ADMIN_REFRESH_SECONDS rejects negatives, fractions and booleans, naming the value (R-ADM-49)."""
    for wrong in (-1, 2.5, True, "10"):
        with pytest.raises(
            GenevaConfigurationError, match=r"GENEVA_ADMIN_REFRESH_SECONDS.*got"
        ):
            make_app(tmp_path, GENEVA_ADMIN_REFRESH_SECONDS=wrong)


def test_refresh_seconds_reach_the_live_pages(tmp_path):
    """The overview, the lists and the workflow page carry the interval; 0 turns it off (R-ADM-49)."""
    for seconds in (0, 7):
        folder = tmp_path / str(seconds)
        folder.mkdir()
        app = make_app(
            folder,
            GENEVA_ADMIN_ENABLED=True,
            GENEVA_ADMIN_REFRESH_SECONDS=seconds,
            SECRET_KEY="refresh-tests",  # noqa: S106 - test key
        )
        client = app.test_client()
        for url in ("/geneva/", "/geneva/workflows/", "/geneva/step-executions/"):
            page = client.get(url)
            assert f'data-geneva-refresh="{seconds}"'.encode() in page.data, url
