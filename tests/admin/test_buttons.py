"""Flow-control buttons on the workflow detail page (R-ADM-20..22, R-ADM-24)."""

from __future__ import annotations

import re

import pytest

from tests.admin.conftest import csrf_token
from tests.admin.support import action_url
from tests.admin.support import detail_url
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.support.workflow import execution_rows
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


def press(client, workflow_id, action, *, confirm=False, token=None, step=None):
    """Press a button: POST with the page's CSRF token, follow the redirect."""
    token = token or csrf_token(client, detail_url(workflow_id))
    data = {"csrf_token": token, "action": action}
    if confirm:
        data["confirm"] = "yes"
    if step is not None:
        data["step"] = step
    return client.post(action_url(workflow_id), data=data, follow_redirects=True)


def test_resume_button_resumes_a_paused_workflow_and_flashes_the_new_state(client):
    """Resume calls workflow.resume: the row is ready and the flash names workflow, action and state (R-ADM-20, R-ADM-21)."""
    workflow = paused_workflow()
    page = press(client, workflow.id, "resume")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert f"Workflow {workflow.id}: Resume done; state is now ready" in text
    assert workflow_row(workflow.id)["state"] == "ready"


def test_pause_button_pauses_a_ready_workflow(client):
    """Pause from ready leaves the row paused (R-ADM-20, R-ADM-21)."""
    workflow = ready_workflow()
    page = press(client, workflow.id, "pause")
    assert "state is now paused" in page.get_data(as_text=True)
    assert workflow_row(workflow.id)["state"] == "paused"


def test_second_click_shows_the_invalid_state_message_not_a_500(client):
    """Pressing Resume twice gives the InvalidStateError message and changes nothing more (R-ADM-21)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    press(client, workflow.id, "resume", token=token)
    executions_after_first = len(execution_rows(workflow.id))
    second = press(client, workflow.id, "resume", token=token)
    assert second.status_code == 200
    assert "Cannot resume a ready workflow" in second.get_data(as_text=True)
    assert workflow_row(workflow.id)["state"] == "ready"
    assert len(execution_rows(workflow.id)) == executions_after_first


def test_concurrent_change_shows_the_refusal(client):
    """A workflow canceled by someone else meanwhile refuses Pause with the message (R-ADM-21)."""
    workflow = ready_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    update_workflow(workflow.id, state="canceled")
    page = press(client, workflow.id, "pause", token=token)
    assert page.status_code == 200
    assert "Cannot pause a canceled workflow" in page.get_data(as_text=True)
    assert workflow_row(workflow.id)["state"] == "canceled"


@pytest.mark.parametrize("action", ["cancel", "skip"])
def test_destructive_action_asks_for_confirmation_first(client, action):
    """Cancel and Skip answer with a confirmation form and change nothing until confirmed (R-ADM-22)."""
    workflow = paused_workflow()
    page = press(client, workflow.id, action)
    text = page.get_data(as_text=True)
    assert 'name="confirm" value="yes"' in text
    assert f'data-geneva-confirm="{action}"' in text
    assert workflow_row(workflow.id)["state"] == "paused"


def test_confirmed_cancel_cancels_and_records_the_action(client):
    """A confirmed Cancel cancels the workflow and logs it with via=admin (R-ADM-22, R-ADM-24)."""
    workflow = paused_workflow()
    page = press(client, workflow.id, "cancel", confirm=True)
    assert "state is now canceled" in page.get_data(as_text=True)
    row = workflow_row(workflow.id)
    assert row["state"] == "canceled"
    entry = row["metadata"]["operator_actions"][-1]
    assert (entry["action"], entry["via"], entry["from_state"], entry["to_state"]) == (
        "cancel",
        "admin",
        "paused",
        "canceled",
    )
    assert "<td>cancel</td><td>—</td><td>admin</td>" in page.get_data(as_text=True)


def test_confirmed_skip_moves_to_the_next_step(client):
    """A confirmed Skip on a paused workflow schedules the next step (R-ADM-20, R-ADM-22)."""
    workflow = paused_workflow()
    press(client, workflow.id, "skip", confirm=True)
    row = workflow_row(workflow.id)
    assert row["state"] == "ready"
    assert row["next_step_name"] == "second"


def test_skip_pressed_twice_skips_one_step_only(client):
    """The Skip form names the step shown; a second press is refused, not a second skip (R-ADM-21, R-EXT-04)."""
    workflow = paused_workflow()
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert '<input type="hidden" name="step" value="first">' in page
    confirm = press(client, workflow.id, "skip", step="first")
    assert '<input type="hidden" name="step" value="first">' in confirm.get_data(
        as_text=True
    )
    assert "The step to skip is first." in confirm.get_data(as_text=True)
    first = press(client, workflow.id, "skip", confirm=True, step="first")
    assert "state is now ready" in first.get_data(as_text=True)
    second = press(client, workflow.id, "skip", confirm=True, step="first")
    assert second.status_code == 200
    assert (
        "Skip current step refused: Cannot skip step &#39;first&#39;"
        in second.get_data(as_text=True)
    )
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"]) == ("ready", "second")


def test_buttons_not_allowed_in_the_state_are_disabled_with_the_reason(client):
    """A canceled workflow's buttons are all disabled and say why (R-ADM-20)."""
    workflow = ready_workflow()
    update_workflow(workflow.id, state="canceled")
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    for action in ("pause", "resume", "resume_rewind", "cancel", "skip"):
        assert re.search(
            rf'disabled title="not possible: workflow is canceled" data-geneva-action="{action}"',
            text,
        )


def test_resume_from_the_beginning_is_disabled_for_a_regular_step(client):
    """A paused workflow whose next step is not resumable cannot be rewound and says why (R-ADM-20)."""
    workflow = paused_workflow()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert re.search(
        r'title="the next step is not resumable" data-geneva-action="resume_rewind"',
        text,
    )
    assert 'value="resume">' in text


def test_unknown_action_is_400(client):
    """An action name outside the button set is refused with 400 (R-ADM-21)."""
    workflow = paused_workflow()
    token = csrf_token(client, detail_url(workflow.id))
    response = client.post(
        action_url(workflow.id), data={"csrf_token": token, "action": "delete"}
    )
    assert response.status_code == 400
    assert workflow_row(workflow.id)["state"] == "paused"
