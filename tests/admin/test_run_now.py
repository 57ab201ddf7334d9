"""Run now: a waiting step runs now instead of later, audited (issue 21; R-ADM-51)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.core import clock
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import InvalidStateError
from tests.admin.conftest import csrf_token
from tests.admin.conftest import post_action
from tests.admin.support import action_url
from tests.admin.support import detail_url
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row


def _waiting_workflow():
    """A ready workflow whose scheduled execution is due in an hour."""
    workflow = ready_workflow()
    execution = execution_rows(workflow.id)[0]
    update_execution(execution["id"], scheduled_for=clock.now() + timedelta(hours=1))
    return workflow


def test_run_now_reschedules_the_waiting_step_to_now_and_records_it(app):
    """run_now cancels the waiting execution and schedules the same step due now; the action run_now is recorded (R-ADM-51, R-PDR-05)."""
    workflow = _waiting_workflow()
    before = clock.now()
    new = workflow.run_now(actor="ops@example.com")
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "canceled"),
        ("first", "scheduled"),
    ]
    assert rows[1]["id"] == new.id
    assert rows[1]["scheduled_for"] <= clock.now()
    assert rows[1]["scheduled_for"] >= before - timedelta(seconds=1)
    row = workflow_row(workflow.id)
    assert row["state"] == "ready"
    action = row["metadata"]["operator_actions"][-1]
    assert (action["action"], action["actor"], action["via"]) == (
        "run_now",
        "ops@example.com",
        "api",
    )
    assert action["execution_id"] == new.id
    assert transitions.OPERATOR_RUN_NOW in transitions.TABLE


def test_run_now_refuses_when_nothing_waits(app):
    """A step already due, a paused workflow: InvalidStateError saying why, nothing changes (R-ADM-51)."""
    due = ready_workflow()
    with pytest.raises(InvalidStateError, match="its step is not waiting"):
        due.run_now()
    assert [r["state"] for r in execution_rows(due.id)] == ["scheduled"]
    paused = paused_workflow()
    with pytest.raises(InvalidStateError, match=r"paused workflow now \(resume it"):
        paused.run_now()
    with pytest.raises(ValueError, match="via"):
        _waiting_workflow().run_now(via="web")


def _press(client, workflow_id, action="run_now"):
    return post_action(client, workflow_id, action, follow_redirects=True)


def test_run_now_button_on_the_workflow_page(client):
    """The workflow page's "Run now" posts with CSRF, runs the step now, flashes; without a waiting step it is disabled with its reason (R-ADM-51)."""
    workflow = _waiting_workflow()
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert 'data-geneva-action="run_now"' in page
    text = _press(client, workflow.id).get_data(as_text=True)
    assert f"Workflow {workflow.id}: Run now done; state is now ready" in text
    assert [r["state"] for r in execution_rows(workflow.id)] == [
        "canceled",
        "scheduled",
    ]
    # Now the step is due: the button is disabled, a POST is refused clearly.
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert "the step is not waiting" in page
    text = _press(client, workflow.id).get_data(as_text=True)
    assert "Run now refused: Cannot run workflow" in text
    assert len(execution_rows(workflow.id)) == 2


def test_run_now_without_csrf_is_refused(client):
    """A POST without the CSRF token changes nothing (R-ADM-05, R-ADM-51)."""
    workflow = _waiting_workflow()
    response = client.post(action_url(workflow.id), data={"action": "run_now"})
    assert response.status_code == 400
    assert [r["state"] for r in execution_rows(workflow.id)] == ["scheduled"]


LIST = "/geneva/workflows/"


def test_bulk_result_lists_changed_and_refused_with_reasons(client):
    """Bulk "Run now" on checked rows: the result page lists the changed workflows and the refused ones with the reason (R-ADM-51, R-ADM-52)."""
    waiting = _waiting_workflow()
    due = ready_workflow()
    token = csrf_token(client, LIST)
    page = client.post(
        f"{LIST}bulk",
        data={"csrf_token": token, "action": "run_now", "ids": [waiting.id, due.id]},
    ).get_data(as_text=True)
    assert "Run now: 1 succeeded, 1 refused" in page
    changed = page[page.index("geneva-bulk-changed") :]
    assert f'data-workflow-id="{waiting.id}"' in changed.split("</p>")[0]
    refusals = page[page.index("geneva-bulk-refusals") :]
    assert f'<tr data-workflow-id="{due.id}">' in refusals
    assert "its step is not waiting" in refusals


def _bulk_buttons(client, **params) -> tuple[list[str], list[str]]:
    page = client.get(LIST, query_string=params).get_data(as_text=True)
    import re

    return (
        re.findall(r'data-geneva-bulk-all="([a-z_]+)"', page),
        re.findall(r'data-geneva-bulk="([a-z_]+)"', page),
    )


def test_bulk_buttons_only_for_actions_that_apply_and_rows_that_match(client):
    """A state filter shows only the bulk actions that apply from that state; no rows, no buttons (R-ADM-52)."""
    ready_workflow()
    paused_workflow()
    assert _bulk_buttons(client) == (
        ["pause", "resume", "cancel", "run_now"],
        ["pause", "resume", "cancel", "run_now"],
    )
    assert _bulk_buttons(client, state="ready") == (
        ["pause", "cancel", "run_now"],
        ["pause", "cancel", "run_now"],
    )
    assert _bulk_buttons(client, state="paused") == (
        ["resume", "cancel"],
        ["resume", "cancel"],
    )
    page = client.get(LIST, query_string={"state": "finished"}).get_data(as_text=True)
    assert "data-geneva-bulk" not in page
    assert _bulk_buttons(client, type="NoSuchClass") == ([], [])


def test_run_now_from_the_admin_is_audited_with_the_operator(app, client):
    """The button and the bulk action each record `run_now` with via="admin", the
    operator and the new execution, as every other admin action (R-ADM-51,
    R-ADM-24, R-PDR-05)."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "ops@example.com"
    geneva.reload_settings(app)
    single, bulk = _waiting_workflow(), _waiting_workflow()
    _press(client, single.id)
    token = csrf_token(client, LIST)
    client.post(
        f"{LIST}bulk",
        data={"csrf_token": token, "action": "run_now", "ids": [bulk.id]},
    )
    for workflow in (single, bulk):
        action = workflow_row(workflow.id)["metadata"]["operator_actions"][-1]
        assert (action["action"], action["actor"], action["via"]) == (
            "run_now",
            "ops@example.com",
            "admin",
        )
        assert action["execution_id"] == execution_rows(workflow.id)[-1]["id"]
