"""The buttons work with and without the host's Flask-WTF ``CSRFProtect`` (R-ADM-05).

Each test runs twice: on the plain app (the admin's own Flask-Admin ``SecureForm``
token) and on an app protected by ``CSRFProtect(app)``, whose ``before_request``
check rejects every POST that does not carry a Flask-WTF token.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask_wtf.csrf import CSRFProtect

from tests.admin.conftest import ADMIN_CONFIG
from tests.admin.conftest import csrf_token
from tests.admin.conftest import post_bulk
from tests.admin.support import action_url
from tests.admin.support import detail_url
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.support.workflow import workflow_row

LIST = "/geneva/workflows/"
BULK = "/geneva/workflows/bulk"


@pytest.fixture(params=["without_csrf_protect", "with_csrf_protect"])
def app(app: Any, request: pytest.FixtureRequest) -> Any:
    """The admin app, once as it is and once behind Flask-WTF's ``CSRFProtect``."""
    if request.param == "with_csrf_protect":
        CSRFProtect(app)
    return app


def _tampered(token: str) -> str:
    """``token`` with its first character changed: same shape, wrong signature.

    Not the last character: a base64 signature's last character carries padding
    bits, so changing it can leave the decoded signature valid (a flaky test).
    """
    return ("A" if token[0] != "A" else "B") + token[1:]


def csrf_token_of(page: bytes) -> str:
    """The CSRF token of the first form in an already fetched page."""
    match = re.search(rb'name="csrf_token" type="hidden" value="([^"]+)"', page)
    assert match is not None, "no CSRF token on the page"
    return match.group(1).decode()


def test_button_post_with_the_page_token_acts(client):
    """Resume posted with the detail page's token resumes the workflow (R-ADM-05, R-ADM-21)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    response = client.post(
        action_url(workflow.id), data={"action": "resume", "csrf_token": token}
    )
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    assert workflow_row(workflow.id)["state"] == "ready"


def test_confirmed_cancel_with_the_confirmation_page_token_acts(client):
    """Cancel, then the confirmation form's own token, cancels the workflow (R-ADM-05, R-ADM-22)."""
    workflow = ready_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    page = client.post(
        action_url(workflow.id), data={"action": "cancel", "csrf_token": token}
    )
    assert page.status_code == 200, page.get_data(as_text=True)[:500]
    assert workflow_row(workflow.id)["state"] == "ready"
    confirm_token = csrf_token_of(page.data)
    response = client.post(
        action_url(workflow.id),
        data={"action": "cancel", "confirm": "yes", "csrf_token": confirm_token},
    )
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_bulk_post_with_the_list_page_token_acts(client):
    """Bulk resume posted with the list page's token resumes the checked rows (R-ADM-05, R-ADM-23)."""
    workflows = [paused_workflow(), paused_workflow()]
    page = post_bulk(client, "resume", [w.id for w in workflows])
    assert page.status_code == 200, page.get_data(as_text=True)[:500]
    assert "Resume: 2 succeeded, 0 refused" in page.get_data(as_text=True)
    assert [workflow_row(w.id)["state"] for w in workflows] == ["ready", "ready"]


def test_button_post_without_token_is_400_and_changes_nothing(client):
    """A button POST without a token gets 400 under either protection (R-ADM-05)."""
    workflow = paused_workflow()
    client.get(detail_url(workflow.id))
    response = client.post(action_url(workflow.id), data={"action": "resume"})
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


def test_button_post_with_tampered_token_is_400_and_changes_nothing(client):
    """A button POST with a token whose signature was altered gets 400 (R-ADM-05)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    response = client.post(
        action_url(workflow.id),
        data={"action": "resume", "csrf_token": _tampered(token)},
    )
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


def test_bulk_post_with_tampered_token_is_400_and_changes_nothing(client):
    """A bulk POST with an altered token gets 400 and nothing is resumed (R-ADM-05)."""
    workflow = paused_workflow()
    token = csrf_token(client, LIST)
    response = client.post(
        BULK,
        data={"csrf_token": _tampered(token), "action": "resume", "ids": [workflow.id]},
    )
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


@pytest.mark.parametrize(
    "app_config", [{**ADMIN_CONFIG, "WTF_CSRF_ENABLED": False}], ids=["wtf_disabled"]
)
def test_admin_keeps_its_own_token_when_flask_wtf_csrf_is_disabled(client):
    """WTF_CSRF_ENABLED=False switches Flask-WTF off, not the admin's check: no token 400, page token 303 (R-ADM-05)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    response = client.post(action_url(workflow.id), data={"action": "resume"})
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"
    response = client.post(
        action_url(workflow.id), data={"action": "resume", "csrf_token": token}
    )
    assert response.status_code == 303
    assert workflow_row(workflow.id)["state"] == "ready"


@pytest.mark.parametrize(
    "app_config",
    [{**ADMIN_CONFIG, "WTF_CSRF_FIELD_NAME": "host_csrf"}],
    ids=["custom_field_name"],
)
def test_button_form_uses_the_hosts_csrf_field_name(client, app):
    """Under CSRFProtect the token field is named WTF_CSRF_FIELD_NAME, and posting it acts (R-ADM-05)."""
    workflow = paused_workflow()
    page = client.get(detail_url(workflow.id))
    match = re.search(
        rb'name="(csrf_token|host_csrf)" type="hidden" value="([^"]+)"', page.data
    )
    assert match is not None, "no CSRF token on the page"
    name, token = match.group(1).decode(), match.group(2).decode()
    assert name == ("host_csrf" if "csrf" in app.extensions else "csrf_token")
    response = client.post(
        action_url(workflow.id), data={"action": "resume", name: token}
    )
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    assert workflow_row(workflow.id)["state"] == "ready"


def test_resume_at_form_works_with_either_token_scheme_and_refuses_a_tampered_one(
    client,
):
    """The "Resume at step…" form carries the token the active scheme accepts; a
    tampered one is refused and nothing changes (R-ADM-05, R-EVO-06).
    """
    workflow = paused_workflow()
    url = f"/geneva/workflows/{workflow.id}/resume-at"
    page = client.get(detail_url(workflow.id)).data
    form = page[page.index(b"resume-at") :]
    token = csrf_token_of(form)
    refused = client.post(
        url, data={"step_name": "second", "csrf_token": _tampered(token)}
    )
    assert refused.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"
    response = client.post(url, data={"step_name": "second", "csrf_token": token})
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"]) == ("ready", "second")


def test_deliver_signal_form_works_with_either_token_scheme_and_refuses_a_tampered_one(
    client,
):
    """The "Deliver signal…" form carries the token the active scheme accepts; a
    tampered one is 400 and stores nothing (R-ADM-05, R-WSIG-68).
    """
    workflow = ready_workflow()
    url = f"/geneva/workflows/{workflow.id}/signal"
    page = client.get(detail_url(workflow.id)).data
    form = page[page.index(b"geneva-signal-form") :]
    token = csrf_token_of(form)
    refused = client.post(url, data={"name": "go", "csrf_token": _tampered(token)})
    assert refused.status_code == 400
    unchanged = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert "No signals delivered to this workflow." in unchanged
    response = client.post(url, data={"name": "go", "csrf_token": token})
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert "go: signal " in page
    assert "stored, pending" in page
