"""The workflow page's buttons while a step is in progress (R-EXT-26, R-ADM-20/21/23)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from flask_geneva.core import clock
from flask_geneva.testing import run_iterations
from tests.admin.conftest import csrf_token
from tests.admin.conftest import post_action
from tests.admin.conftest import post_bulk
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.admin.test_buttons import press
from tests.admin.workflows import AdminResumable
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

LIST = "/geneva/workflows/"
BULK = "/geneva/workflows/bulk"


def running_workflow(*, paused=False, started_minutes_ago=5):
    """A ready AdminTwoStep whose first execution is in_progress (maybe paused)."""
    workflow = ready_workflow()
    started_at = clock.now() - timedelta(minutes=started_minutes_ago)
    execution_id = make_in_progress(workflow, started_at)
    if paused:
        workflow.pause()
    return workflow, execution_id


def _disabled_reason(text, action):
    match = re.search(rf'disabled title="([^"]*)" data-geneva-action="{action}"', text)
    return match.group(1) if match else None


def test_pause_on_a_performing_workflow_says_the_step_finishes_first(client):
    """The Pause button of a performing workflow says the running step will finish
    first (R-EXT-02, R-EXE-42).
    """
    workflow, _ = running_workflow()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert 'data-geneva-note="pause"' in text
    assert "the running step will finish first" in text


def test_skip_and_rewind_are_disabled_with_the_reason_while_a_step_runs(client):
    """On a workflow paused during its step, Skip and Resume from the beginning are
    disabled naming the running execution; Resume says it lets the step finish
    (R-EXT-26, R-ADM-20).
    """
    workflow = AdminResumable.create(hero=new_user("walker@example.com"))
    run_iterations(workflow, 2)  # the successor keeps a cursor: rewind would apply
    execution_id = make_in_progress(workflow, clock.now() - timedelta(minutes=5))
    workflow.pause()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    expected = (
        f"not possible while step execution {execution_id} (step &#39;walk&#39;) "
        "is in progress"
    )
    assert expected in (_disabled_reason(text, "skip") or "")
    assert expected in (_disabled_reason(text, "resume_rewind") or "")
    assert 'data-geneva-note="resume"' in text


def test_confirmed_skip_of_a_running_step_shows_the_refusal_not_a_500(client):
    """A Skip posted from a stale page while the step runs is refused with the
    InvalidStateError message and changes nothing (R-EXT-26, R-ADM-21).
    """
    workflow, execution_id = running_workflow(paused=True)
    before = execution_rows(workflow.id)
    page = press(client, workflow.id, "skip", confirm=True, step="first")
    assert page.status_code == 200
    assert (
        f"Skip current step refused: Cannot skip workflow {workflow.id}: step "
        f"execution {execution_id}"
    ) in page.get_data(as_text=True)
    assert execution_rows(workflow.id) == before
    assert workflow_row(workflow.id)["state"] == "paused"


def test_resume_button_withdraws_the_pause_of_a_running_step(client):
    """Resume on a workflow paused during its step makes it performing again and
    creates no execution (R-EXT-26, R-ADM-21).
    """
    workflow, _ = running_workflow(paused=True)
    page = press(client, workflow.id, "resume")
    assert page.status_code == 200
    assert "Resume done; state is now performing" in page.get_data(as_text=True)
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]


def test_bulk_resume_with_a_running_step_never_fails_the_page(client):
    """Bulk Resume of checked rows including a workflow paused during its step gives
    the result page: that one is performing again, a ready one is listed as refused
    (R-EXT-26, R-ADM-23).
    """
    running, _ = running_workflow(paused=True)
    paused = paused_workflow()
    ready = ready_workflow()
    page = post_bulk(client, "resume", [running.id, paused.id, ready.id])
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "Resume: 2 succeeded, 1 refused" in text
    assert "Cannot resume a ready workflow" in text
    assert [workflow_row(w.id)["state"] for w in (running, paused, ready)] == [
        "performing",
        "ready",
        "ready",
    ]


# -- Recover (R-HK-28, R-ADM-22, R-ADM-24) ----------------------------------------------


def test_recover_is_disabled_without_a_running_step(client):
    """Recover is offered only while an execution is in progress (R-HK-28, R-ADM-20)."""
    workflow = ready_workflow()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert _disabled_reason(text, "recover") == "no step execution is in progress"


def test_recover_asks_for_confirmation_with_the_execution_and_its_age(client):
    """Recover first shows a confirmation naming the execution, its age and what
    recovery does; nothing changes yet (R-HK-28, R-ADM-22).
    """
    workflow, execution_id = running_workflow(started_minutes_ago=5)
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert 'data-geneva-note="recover"' in text
    page = press(client, workflow.id, "recover")
    text = page.get_data(as_text=True)
    assert 'data-geneva-confirm="recover"' in text
    assert f"Step execution {execution_id} (step first) has been in progress" in text
    assert f'name="execution" value="{execution_id}"' in text
    assert "data-geneva-force" not in text  # older than the grace
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]


def test_confirmed_recover_reschedules_the_step_and_records_the_operator(client):
    """The confirmed Recover ends the execution completed/recovered, schedules the
    step again and logs the action via "admin" (R-HK-28, R-ADM-24).
    """
    workflow, execution_id = running_workflow(started_minutes_ago=5)
    page = post_action(
        client,
        workflow.id,
        "recover",
        confirm="yes",
        execution=str(execution_id),
        follow_redirects=True,
    )
    assert page.status_code == 200
    assert "Recover running step done; state is now ready" in page.get_data(
        as_text=True
    )
    assert [(r["state"], r["outcome"]) for r in execution_rows(workflow.id)] == [
        ("completed", "recovered"),
        ("scheduled", None),
    ]
    [record] = workflow_row(workflow.id)["metadata"]["operator_actions"]
    assert (record["action"], record["via"], record["execution_id"]) == (
        "recover",
        "admin",
        execution_id,
    )


def test_recover_within_the_grace_needs_the_force_box(client):
    """Within GENEVA_RECOVER_GRACE the confirmation offers the force box; without it
    the refusal is flashed, with it the execution is recovered (R-HK-28, R-ADM-21).
    """
    workflow, execution_id = running_workflow(started_minutes_ago=0)
    confirm = press(client, workflow.id, "recover").get_data(as_text=True)
    assert "data-geneva-force" in confirm
    token = csrf_token(client, detail_url(workflow.id))
    data = {
        "csrf_token": token,
        "action": "recover",
        "confirm": "yes",
        "execution": str(execution_id),
    }
    url = f"/geneva/workflows/{workflow.id}/action"
    refused = client.post(url, data=data, follow_redirects=True)
    assert refused.status_code == 200
    assert "less than GENEVA_RECOVER_GRACE" in refused.get_data(as_text=True)
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]
    forced = client.post(url, data={**data, "force": "yes"}, follow_redirects=True)
    assert "Recover running step done" in forced.get_data(as_text=True)
    assert execution_rows(workflow.id)[0]["outcome"] == "recovered"


def test_execution_page_of_an_in_progress_execution_offers_recover(client):
    """The page of an in-progress execution has a Recover button leading to the
    workflow's Recover confirmation; other executions have none (R-HK-28, R-ADM-14).
    """
    workflow, execution_id = running_workflow()
    text = client.get(f"/geneva/step-executions/{execution_id}").get_data(as_text=True)
    assert 'data-geneva-action="recover"' in text
    token = csrf_token(client, f"/geneva/step-executions/{execution_id}")
    page = client.post(
        f"/geneva/workflows/{workflow.id}/action",
        data={"csrf_token": token, "action": "recover"},
    )
    assert 'data-geneva-confirm="recover"' in page.get_data(as_text=True)
    done = ready_workflow()
    other = client.get(f"/geneva/step-executions/{done.current_execution.id}")
    assert 'data-geneva-action="recover"' not in other.get_data(as_text=True)


@pytest.mark.parametrize("posted", ["abc", "-1", "1.5", "\x00"])
def test_recover_with_a_posted_execution_that_is_no_id_is_refused(client, posted):
    """A tampered execution field gets a refusal naming the value, never a 500,
    and the running execution is left alone (R-HK-28, R-ADM-24).
    """
    workflow, _execution_id = running_workflow(started_minutes_ago=5)
    page = post_action(
        client,
        workflow.id,
        "recover",
        confirm="yes",
        execution=posted,
        follow_redirects=True,
    )
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "Recover running step refused: execution_id must be an integer" in text
    assert "\x00" not in text
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]
