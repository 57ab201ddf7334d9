"""The running-step buttons in a real browser (R-EXT-26, R-HK-28, R-ADM-20..22)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.core import clock
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser


def _running(*, paused=False, started_minutes_ago=5):
    """A committed workflow whose execution is in_progress; the test session closed."""
    workflow = ready_workflow()
    started_at = clock.now() - timedelta(minutes=started_minutes_ago)
    execution_id = make_in_progress(workflow, started_at)
    if paused:
        workflow.pause()
    workflow_id = workflow.id
    db.session.remove()
    return workflow_id, execution_id


def test_paused_running_step_disables_skip_and_resume_lets_it_finish(live_url, page):
    """Skip is disabled naming the running execution, and Resume makes
    the workflow performing again (R-EXT-26, R-ADM-20, R-ADM-21).
    """
    workflow_id, execution_id = _running(paused=True)
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    skip = page.locator('button[data-geneva-action="skip"]')
    assert skip.is_disabled()
    assert f"step execution {execution_id}" in skip.get_attribute("title")
    assert "Resume lets it finish" in page.inner_text('[data-geneva-note="resume"]')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "running_step_buttons.png"))
    page.click('button[data-geneva-action="resume"]')
    page.wait_for_selector(".geneva-state:text-is('performing')")
    assert workflow_row(workflow_id)["state"] == "performing"
    assert [r["state"] for r in execution_rows(workflow_id)] == ["in_progress"]


def test_pause_of_a_performing_workflow_says_the_step_finishes_first(live_url, page):
    """The Pause button of a performing workflow says the running step will finish
    first; pressing it pauses (R-EXT-02, R-EXE-42).
    """
    workflow_id, _ = _running()
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    note = page.inner_text('[data-geneva-note="pause"]')
    assert "the running step will finish first" in note
    page.click('button[data-geneva-action="pause"]')
    page.wait_for_selector(".geneva-state:text-is('paused')")
    assert workflow_row(workflow_id)["state"] == "paused"


def test_recover_asks_for_confirmation_then_reschedules_the_step(live_url, page):
    """Recover shows the confirmation with the execution's age; confirming ends it
    completed/recovered and schedules the step again (R-HK-28, R-ADM-22).
    """
    workflow_id, execution_id = _running()
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="recover"]')
    page.wait_for_selector('button[data-geneva-confirm="recover"]')
    assert f"Step execution {execution_id}" in page.inner_text(".geneva-recovery")
    assert [r["state"] for r in execution_rows(workflow_id)] == ["in_progress"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "recover_confirm.png"), full_page=True)
    page.click('button[data-geneva-confirm="recover"]')
    page.wait_for_selector(".geneva-state:text-is('ready')")
    assert "Recover running step done" in page.inner_text("body")
    assert [(r["state"], r["outcome"]) for r in execution_rows(workflow_id)] == [
        ("completed", "recovered"),
        ("scheduled", None),
    ]


def test_recover_within_the_grace_needs_the_force_box(live_url, page):
    """Within GENEVA_RECOVER_GRACE the unticked confirmation is refused with the
    reason; ticking the force box recovers (R-HK-28, R-ADM-21).
    """
    workflow_id, _ = _running(started_minutes_ago=0)
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="recover"]')
    page.wait_for_selector('button[data-geneva-confirm="recover"]')
    page.click('button[data-geneva-confirm="recover"]')
    page.wait_for_selector("text=less than GENEVA_RECOVER_GRACE")
    assert [r["state"] for r in execution_rows(workflow_id)] == ["in_progress"]
    page.click('button[data-geneva-action="recover"]')
    page.check("input[data-geneva-force]")
    page.click('button[data-geneva-confirm="recover"]')
    page.wait_for_selector("text=Recover running step done")
    assert execution_rows(workflow_id)[0]["outcome"] == "recovered"
