"""Every change is a POST with a valid CSRF token (R-ADM-05)."""

from __future__ import annotations

from tests.admin.conftest import csrf_token
from tests.admin.support import action_url
from tests.admin.support import detail_url
from tests.admin.support import paused_workflow
from tests.support.workflow import workflow_row


def test_post_without_csrf_token_is_400_and_changes_nothing(client):
    """A button POST without a token gets 400 and the workflow stays paused (R-ADM-05)."""
    workflow = paused_workflow()
    client.get(detail_url(workflow.id))  # a session exists, only the token is missing
    response = client.post(action_url(workflow.id), data={"action": "resume"})
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


def test_post_without_any_session_is_400_and_changes_nothing(client):
    """A forged POST from a client that never loaded a page gets 400 (R-ADM-05)."""
    workflow = paused_workflow()
    response = client.post(
        action_url(workflow.id), data={"action": "resume", "csrf_token": "1##abc"}
    )
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


def test_post_with_wrong_csrf_token_is_400_and_changes_nothing(client):
    """A button POST with a tampered token gets 400 and changes nothing (R-ADM-05)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    expires, _, digest = token.partition("##")
    forged = f"{expires}##{'0' * len(digest)}"
    response = client.post(
        action_url(workflow.id), data={"action": "resume", "csrf_token": forged}
    )
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


def test_get_on_the_action_url_changes_nothing(client):
    """GET on an action URL is refused (405) and never changes state (R-ADM-05)."""
    workflow = paused_workflow()
    response = client.get(action_url(workflow.id) + "?action=resume&confirm=yes")
    assert response.status_code == 405
    assert workflow_row(workflow.id)["state"] == "paused"


def test_post_with_valid_token_changes_state(client):
    """The same POST with the page's token acts, so the 400s above are the token's doing (R-ADM-05)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    response = client.post(
        action_url(workflow.id), data={"action": "resume", "csrf_token": token}
    )
    assert response.status_code == 303
    assert workflow_row(workflow.id)["state"] == "ready"
