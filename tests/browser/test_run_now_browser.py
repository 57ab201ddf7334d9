"""Run now and the bulk result in Chromium (issue 21; R-ADM-51, R-ADM-52)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.core import clock
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

pytestmark = pytest.mark.browser


def _waiting() -> str:
    workflow_id = ready_workflow().id
    update_execution(
        execution_rows(workflow_id)[0]["id"],
        scheduled_for=clock.now() + timedelta(hours=2),
    )
    return str(workflow_id)


def test_run_now_button_runs_the_waiting_step_now(live_url, page):
    """Press "Run now" on a waiting workflow: the flash says done, the step is due now; then the button is disabled with its reason (R-ADM-51)."""
    workflow_id = _waiting()
    db.session.remove()
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="run_now"]')
    page.wait_for_selector(f"text=Workflow {workflow_id}: Run now done")
    rows = execution_rows(int(workflow_id))
    assert [row["state"] for row in rows] == ["canceled", "scheduled"]
    assert rows[1]["scheduled_for"] <= clock.now()
    button = page.locator('button[data-geneva-action="run_now"]')
    assert button.is_disabled()
    assert "the step is not waiting" in page.inner_text(".geneva-reasons, body")
    assert page.geneva_dialogs == []


def test_bulk_run_now_lists_changed_and_refused(live_url, page):
    """Check a waiting and a due workflow, press "Run now checked": the result lists one changed and one refused with why; a paused filter offers no Run now (R-ADM-52)."""
    waiting = _waiting()
    due = str(ready_workflow().id)
    paused_workflow()
    db.session.remove()
    page.goto(f"{live_url}/geneva/workflows/?state=ready")
    assert page.locator('[data-geneva-bulk-all="resume"]').count() == 0
    page.check(f'input[name="ids"][value="{waiting}"]')
    page.check(f'input[name="ids"][value="{due}"]')
    page.click('button[data-geneva-bulk="run_now"]')
    page.wait_for_selector(".geneva-bulk-summary")
    assert page.inner_text(".geneva-bulk-summary") == "Run now: 1 succeeded, 1 refused"
    assert page.inner_text(".geneva-bulk-changed") == waiting
    refusal = page.inner_text(f'.geneva-bulk-refusals tr[data-workflow-id="{due}"]')
    assert "its step is not waiting" in refusal
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "bulk_run_now_result.png"), full_page=True)
    page.goto(f"{live_url}/geneva/workflows/?state=paused")
    assert page.locator('[data-geneva-bulk-all="run_now"]').count() == 0
    assert page.locator('[data-geneva-bulk-all="resume"]').count() == 1
