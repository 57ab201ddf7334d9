"""The admin in a real browser: buttons, confirmation, escaping (R-ADM-05, R-ADM-06, R-ADM-20..22)."""

from __future__ import annotations

import pytest

from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser


def _committed_id(workflow) -> object:
    """The workflow id, with the test session's transaction closed (SQLite write lock)."""
    workflow_id = workflow.id
    db.session.remove()
    return workflow_id


def test_resume_button_in_the_browser_makes_the_workflow_ready(live_url, page):
    """Opening a paused workflow and pressing Resume shows ready and stores ready (R-ADM-20, R-ADM-21)."""
    workflow_id = _committed_id(paused_workflow())
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    assert page.inner_text(".geneva-state") == "paused"
    page.click('button[data-geneva-action="resume"]')
    page.wait_for_selector(".geneva-state:text-is('ready')")
    assert "state is now ready" in page.inner_text("body")
    assert workflow_row(workflow_id)["state"] == "ready"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "workflow_detail.png"), full_page=True)


def test_pause_button_in_the_browser_pauses_a_ready_workflow(live_url, page):
    """Pressing Pause on a ready workflow shows and stores paused (R-ADM-20, R-ADM-21)."""
    workflow_id = _committed_id(ready_workflow())
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="pause"]')
    page.wait_for_selector(".geneva-state:text-is('paused')")
    assert workflow_row(workflow_id)["state"] == "paused"


def test_cancel_asks_for_confirmation_in_the_browser(live_url, page):
    """Cancel shows a confirmation step without JavaScript; only the confirmation cancels (R-ADM-22)."""
    workflow_id = _committed_id(ready_workflow())
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="cancel"]')
    page.wait_for_selector('button[data-geneva-confirm="cancel"]')
    assert workflow_row(workflow_id)["state"] == "ready"
    page.click('button[data-geneva-confirm="cancel"]')
    page.wait_for_selector(".geneva-state:text-is('canceled')")
    assert workflow_row(workflow_id)["state"] == "canceled"


def test_script_in_an_error_message_does_not_run(live_url, page_without_csp):
    """A <script> error message renders as text and no dialog fires, even with the CSP ignored; the policy sentence and backtrace show (R-ADM-06, R-ADM-12)."""
    page = page_without_csp
    workflow_id = _committed_id(failed_workflow())
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    assert "<script>alert('boom')</script>" in page.inner_text(".geneva-error")
    assert "pause — default policy" in page.inner_text(".geneva-policy")
    assert not page.is_visible(".geneva-backtrace pre")
    page.click(".geneva-backtrace summary")
    assert page.is_visible(".geneva-backtrace pre")
    assert page.geneva_dialogs == []
