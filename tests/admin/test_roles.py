"""Roles and per-action authorization in the admin (R-ADM-210..214).

The role is read per request from the ``X-Role`` header here, so one client
acts as a viewer, an operator or an admin.
"""

from __future__ import annotations

import logging
import re

import pytest
from flask import request

from flask_geneva.admin.audit import AUDIT_LOGGER
from flask_geneva.admin.roles import ACTION_TARGETS
from flask_geneva.admin.roles import ROLE_ACTIONS
from flask_geneva.admin.roles import role_allows
from tests.admin.conftest import WORKFLOW_LIST
from tests.admin.conftest import csrf_token
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.admin.workflows import AdminFailing
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


def role_from_header() -> str | None:
    """GENEVA_ADMIN_CURRENT_ROLE of these tests: the X-Role header, or no role."""
    return request.headers.get("X-Role")


@pytest.fixture
def roles(app):
    """Roles decide (R-ADM-210); the actor is the role's name."""
    app.config["GENEVA_ADMIN_CURRENT_ROLE"] = role_from_header
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: (
        "user-" + str(request.headers.get("X-Role"))
    )
    geneva.reload_settings(app)


def _as(role):
    return {"X-Role": role} if role else {}


def _refusals(caplog):
    return [
        record
        for record in caplog.records
        if record.name == AUDIT_LOGGER and record.levelno == logging.WARNING
    ]


def admin_post_routes(app):
    """Every POST rule of the Geneva admin: (endpoint, URL template)."""
    return sorted(
        (rule.endpoint, rule.rule)
        for rule in app.url_map.iter_rules()
        if rule.endpoint.startswith("geneva") and "POST" in rule.methods
    )


def test_the_role_map_gives_each_role_its_actions():
    """A viewer only views; an operator also starts, steers and bulk-acts on checked
    rows; an admin also recovers, acts on all matching and on schedules; no role
    and an unknown role nothing; an unknown action is a bug (R-ADM-212)."""
    assert ROLE_ACTIONS["viewer"] == {"view"}
    assert {"start", "cancel", "deliver_signal", "bulk"} <= ROLE_ACTIONS["operator"]
    assert not {"recover", "bulk_all", "schedule_pause"} & ROLE_ACTIONS["operator"]
    assert ROLE_ACTIONS["admin"] == set(ACTION_TARGETS)
    assert not role_allows(None, "view")
    assert not role_allows("superuser", "view")
    with pytest.raises(ValueError, match="unknown admin action 'delete'"):
        role_allows("admin", "delete")


def test_every_post_route_refuses_a_viewer_with_403_and_an_audit_record(
    app, client, roles, caplog
):
    """Each POST endpoint of the admin, forged by a viewer with a valid CSRF token
    and a well-formed body, answers 403 in the admin layout, logs one refusal and
    changes nothing; a new endpoint without its check fails here (R-ADM-213, R-ADM-214)."""
    workflow = paused_workflow()
    client.environ_base["HTTP_X_ROLE"] = "viewer"  # every request of the test
    token = csrf_token(client, WORKFLOW_LIST)
    routes = admin_post_routes(app)
    assert {endpoint.rsplit(".", 1)[1] for endpoint, _ in routes} >= {
        "action",
        "bulk",
        "resume_at",
        "deliver_signal",
        "start",
    }
    data = {
        "csrf_token": token,
        "action": "resume",
        "ids": [str(workflow.id)],
        "schedule": "nightly",
        "step_name": "first",
        "name": "go",
        "type": "AdminTwoStep",
        "hero_type": "User",
        "hero_id": str(workflow.hero_id),
    }
    for endpoint, rule in routes:
        url = rule.replace("<workflow_id>", str(workflow.id))
        assert "<" not in url, f"a URL parameter the test does not fill: {rule}"
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
            response = client.post(url, data=data)
        assert response.status_code == 403, (endpoint, response.data[:300])
        page = response.get_data(as_text=True)
        assert "geneva-error-page" in page, endpoint
        assert "your role &#39;viewer&#39; does not allow" in page, endpoint
        [record] = _refusals(caplog)
        assert record.geneva_actor == "user-viewer"
        assert record.geneva_role == "viewer"
        assert record.geneva_outcome == "refused"
        assert record.geneva_path == url
    assert workflow_row(workflow.id)["state"] == "paused"
    assert len(execution_rows(workflow.id)) == 1
    assert geneva.Workflow.query.count() == 1


def test_a_viewer_sees_no_control_an_operator_sees_theirs(client, roles):
    """Under roles a control the user may not use is not shown: a viewer gets the
    pages without buttons, forms or the start link; an operator the buttons of
    the role map but not Recover or the all-matching bulk actions (R-ADM-213)."""
    paused = paused_workflow()
    for page_url in (detail_url(paused.id), WORKFLOW_LIST):
        page = client.get(page_url, headers=_as("viewer")).get_data(as_text=True)
        assert "data-geneva-action=" not in page, page_url
        assert "data-geneva-bulk" not in page
        assert "geneva-resume-at" not in page
        assert "geneva-signal-form" not in page
        assert "read-only" not in page
        assert "GENEVA_ADMIN_ACCESS is not set" not in page  # no banner (R-ADM-210)
        assert "role: viewer" in page

    page = client.get(detail_url(paused.id), headers=_as("operator")).get_data(
        as_text=True
    )
    shown = set(re.findall(r'data-geneva-action="(\w+)"', page))
    assert {"resume", "cancel", "skip", "resume_at", "deliver_signal"} <= shown
    assert "recover" not in shown
    listing = client.get(WORKFLOW_LIST, headers=_as("operator")).get_data(as_text=True)
    assert 'data-geneva-bulk="resume"' in listing
    assert "data-geneva-bulk-all" not in listing
    assert "geneva-start-link" in listing
    page = client.get(detail_url(paused.id), headers=_as("admin")).get_data(
        as_text=True
    )
    assert 'data-geneva-action="recover"' in page


def test_no_role_is_403_on_every_page_and_audited(client, roles, caplog):
    """A user without a role, or with a value that is no role, gets the standalone
    403 page on the admin, naming the missing role; each refusal is logged, and a
    value that is no role is a warning naming it (R-ADM-212, R-ADM-214)."""
    workflow = failed_workflow()
    with caplog.at_level(logging.WARNING):
        for headers in ({}, {"X-Role": "root"}):
            for url in ("/geneva/", WORKFLOW_LIST, detail_url(workflow.id)):
                response = client.get(url, headers=headers)
                assert response.status_code == 403
                body = response.get_data(as_text=True)
                assert "you have no admin role" in body
                assert "AdminFailing" not in body
    assert len(_refusals(caplog)) == 6
    assert any(
        "GENEVA_ADMIN_CURRENT_ROLE returned 'root', which is no role" in r.getMessage()
        for r in caplog.records
    )
    assert client.get("/geneva/", headers=_as("viewer")).status_code == 200


def test_access_setting_still_gates_every_request_under_roles(app, client, roles):
    """GENEVA_ADMIN_ACCESS, when set, is asked before the role (R-ADM-210)."""
    app.config["GENEVA_ADMIN_ACCESS"] = lambda: request.headers.get("X-VPN") == "1"
    geneva.reload_settings(app)
    assert client.get("/geneva/", headers=_as("admin")).status_code == 403
    ok = client.get("/geneva/", headers={"X-Role": "admin", "X-VPN": "1"})
    assert ok.status_code == 200


def test_authorize_callable_decides_each_workflow_of_a_bulk_action(app, client):
    """GENEVA_ADMIN_AUTHORIZE gets (user, action, target): the actor as user, the
    workflow as target of its buttons; a bulk cancel asks 'bulk' once, then each
    workflow: the refused one is listed with the reason and audited, the other
    canceled (R-ADM-211, R-ADM-213, R-ADM-214)."""
    calls = []

    def authorize(user, action, target):
        calls.append((user, action, target))
        return not (action == "cancel" and isinstance(target, AdminFailing))

    app.config["GENEVA_ADMIN_AUTHORIZE"] = authorize
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "carol"
    geneva.reload_settings(app)
    plain, failing = ready_workflow(), failed_workflow()
    page = client.get(detail_url(failing.id)).get_data(as_text=True)
    assert 'data-geneva-action="cancel"' not in page
    assert 'data-geneva-action="resume"' in page
    assert ("carol", "view", None) in calls
    assert any(
        a == "cancel" and getattr(t, "id", None) == failing.id for _, a, t in calls
    )

    token = csrf_token(client, WORKFLOW_LIST)
    calls.clear()
    result = client.post(
        "/geneva/workflows/bulk",
        data={
            "csrf_token": token,
            "action": "cancel",
            "confirm": "yes",
            "ids": [str(plain.id), str(failing.id)],
        },
    )
    assert result.status_code == 200
    text = result.get_data(as_text=True)
    assert (
        "not allowed: GENEVA_ADMIN_AUTHORIZE does not allow you &#39;cancel&#39;"
        in text
    )
    assert ("carol", "bulk", None) in calls
    assert workflow_row(plain.id)["state"] == "canceled"
    assert workflow_row(failing.id)["state"] == "paused"


def test_a_refused_post_is_audited_without_roles_too(app, client, caplog):
    """With GENEVA_ADMIN_CAN_ACT refusing (no roles), the 403 of a POST is audited
    naming the setting (R-ADM-03, R-ADM-214)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    geneva.reload_settings(app)
    with caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        response = client.post(
            f"/geneva/workflows/{workflow.id}/action",
            data={"csrf_token": token, "action": "resume"},
        )
    assert response.status_code == 403
    [record] = _refusals(caplog)
    assert record.geneva_action == "resume"
    assert record.geneva_target == f"workflow {workflow.id} (AdminTwoStep)"
    assert "GENEVA_ADMIN_CAN_ACT does not allow you to act" in record.getMessage()
