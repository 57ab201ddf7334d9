"""Bulk pause/resume/cancel of the checked rows (R-ADM-23, R-ADM-05)."""

from __future__ import annotations

from tests.admin.conftest import csrf_token
from tests.admin.conftest import post_bulk
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

LIST = "/geneva/workflows/"
BULK = "/geneva/workflows/bulk"


def test_bulk_resume_resumes_checked_rows_and_lists_refusals(client):
    """Bulk resume acts on each checked workflow and lists the refused one with its reason (R-ADM-23)."""
    first = paused_workflow()
    second = paused_workflow()
    ready = ready_workflow()
    page = post_bulk(client, "resume", [first.id, second.id, ready.id])
    text = page.get_data(as_text=True)
    assert "Resume: 2 succeeded, 1 refused" in text
    assert f'<tr data-workflow-id="{ready.id}">' in text
    assert "Cannot resume a ready workflow" in text
    assert [workflow_row(w.id)["state"] for w in (first, second, ready)] == [
        "ready"
    ] * 3


def test_bulk_cancel_asks_for_confirmation_with_the_count(client):
    """Bulk cancel first shows a confirmation naming N and changes nothing (R-ADM-23, R-ADM-22)."""
    workflows = [ready_workflow(), ready_workflow()]
    token = csrf_token(client, LIST)
    ids = [w.id for w in workflows]
    page = client.post(BULK, data={"csrf_token": token, "action": "cancel", "ids": ids})
    assert "Cancel 2 workflows?" in page.get_data(as_text=True)
    assert [workflow_row(i)["state"] for i in ids] == ["ready", "ready"]
    page = client.post(
        BULK,
        data={"csrf_token": token, "action": "cancel", "ids": ids, "confirm": "yes"},
    )
    assert "Cancel: 2 succeeded, 0 refused" in page.get_data(as_text=True)
    assert [workflow_row(i)["state"] for i in ids] == ["canceled", "canceled"]


def test_bulk_pause_is_one_transaction_per_workflow(client):
    """A refused workflow does not undo the others: each one is its own transaction (R-ADM-23)."""
    ok = ready_workflow()
    gone = ready_workflow()
    update_workflow(gone.id, state="finished")
    page = post_bulk(client, "pause", [gone.id, ok.id])
    assert "Pause: 1 succeeded, 1 refused" in page.get_data(as_text=True)
    assert workflow_row(ok.id)["state"] == "paused"
    assert workflow_row(gone.id)["state"] == "finished"


def test_bulk_without_csrf_token_is_400_and_changes_nothing(client):
    """A bulk POST without a valid token gets 400 and changes nothing (R-ADM-05)."""
    workflow = paused_workflow()
    client.get(LIST)
    response = client.post(BULK, data={"action": "resume", "ids": [workflow.id]})
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"


def test_bulk_cancel_of_one_workflow_says_workflow_not_workflows(client):
    """The confirmation of a bulk cancel of one checked row says "1 workflow" (R-ADM-23, R-ADM-22)."""
    workflow = ready_workflow()
    page = post_bulk(client, "cancel", [workflow.id])
    text = page.get_data(as_text=True)
    assert "<h2>Cancel 1 workflow?</h2>" in text
    assert f"<p>Workflow: {workflow.id}. This cannot be undone.</p>" in text
    assert ">Yes, cancel 1 workflow</button>" in text
    assert "1 workflows" not in text
    assert workflow_row(workflow.id)["state"] == "ready"
