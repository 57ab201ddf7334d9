"""The workflows list's filter and "all N matching" bulk action in a real browser (R-ADM-11, R-ADM-23)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admin.conftest import ADMIN_CONFIG
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.workflow.support import workflow_row

pytestmark = pytest.mark.browser

PAUSED = 55  # more than one list page (PAGE_SIZE = 50)


@pytest.fixture
def app_config() -> dict[str, Any]:
    """The standalone admin; batches smaller than the matching workflows."""
    return {**ADMIN_CONFIG, "GENEVA_HOUSEKEEPING_BATCH_SIZE": 20}


def test_resume_all_paused_from_the_filtered_list(live_url, page):
    """Filter to paused (two pages), press "Resume all N matching", confirm: every one is ready in the DB, no other changed (R-ADM-11, R-ADM-23)."""
    paused_ids = [paused_workflow().id for _ in range(PAUSED)]
    ready_ids = [ready_workflow().id for _ in range(3)]
    db.session.remove()  # close the test's transaction (SQLite write lock)

    page.goto(f"{live_url}/geneva/workflows/")
    page.select_option('.geneva-filters select[name="state"]', "paused")
    page.click('.geneva-filters button[type="submit"]')
    page.wait_for_selector(f".geneva-match-count:has-text('{PAUSED} workflows match.')")
    assert page.locator("tr[data-workflow-id]").count() == 50
    assert page.locator(".geneva-pager a:has-text('next')").count() == 1

    page.click('button[data-geneva-bulk-all="resume"]')
    page.wait_for_selector('button[data-geneva-confirm="bulk-all-resume"]')
    assert (
        page.inner_text("h2") == f"Resume all {PAUSED} workflows matching the filter?"
    )
    assert "state = paused" in page.inner_text(".geneva-filter-summary")
    assert {workflow_row(i)["state"] for i in paused_ids} == {"paused"}

    page.click('button[data-geneva-confirm="bulk-all-resume"]')
    page.wait_for_selector(".geneva-bulk-summary")
    assert (
        page.inner_text(".geneva-bulk-summary")
        == f"Resume all matching: {PAUSED} succeeded, 0 refused"
    )
    assert {workflow_row(i)["state"] for i in paused_ids} == {"ready"}
    assert {workflow_row(i)["state"] for i in ready_ids} == {"ready"}
    last_action = workflow_row(paused_ids[0])["metadata"]["operator_actions"][-1]
    assert (last_action["action"], last_action["via"]) == ("resume", "admin")
    assert page.geneva_dialogs == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "bulk_all_result.png"), full_page=True)
