"""The workflows list's filter and "all N matching" bulk action in a real browser (R-ADM-11, R-ADM-23)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.admin.conftest import ADMIN_CONFIG
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import workflow_row

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


def test_all_matching_is_not_offered_while_a_filter_value_is_ignored(live_url, page):
    """An ignored filter value (hero id "abc") hides the all-matching buttons (R-ADM-23)."""
    paused_workflow()
    db.session.remove()

    page.goto(f"{live_url}/geneva/workflows/?state=paused&hero_id=abc")
    page.wait_for_selector(".geneva-note")
    assert "ignored hero_id filter 'abc'" in page.inner_text(".geneva-note")
    assert page.locator(".geneva-bulk-all-off").count() == 1
    assert page.locator("button[data-geneva-bulk-all]").count() == 0


def test_a_tampered_all_matching_form_changes_nothing(live_url, page):
    """A form whose filter value no longer validates gets the refusal page; no row changes (R-ADM-23)."""
    paused_ids = [paused_workflow().id for _ in range(3)]
    db.session.remove()

    page.goto(f"{live_url}/geneva/workflows/?state=paused")
    page.wait_for_selector('button[data-geneva-bulk-all="resume"]')
    # As a stale or edited page would send it: a state the list does not know.
    page.evaluate(
        """() => {
            const form = document.querySelector("form.geneva-bulk-all");
            form.querySelector('input[name="state"]').value = "sleeping";
        }"""
    )
    page.click('button[data-geneva-bulk-all="resume"]')
    page.wait_for_selector(".geneva-bulk-all-refused")
    assert page.inner_text("h2") == "Resume all matching: nothing was changed"
    assert "ignored state filter 'sleeping'" in page.inner_text(".geneva-note")
    assert page.locator("button[data-geneva-confirm]").count() == 0
    assert {workflow_row(i)["state"] for i in paused_ids} == {"paused"}
    assert page.geneva_dialogs == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "bulk_all_refused.png"), full_page=True)
