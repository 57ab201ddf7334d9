"""The admin's buttons in a real browser, with and without the host's Flask-WTF ``CSRFProtect`` (R-ADM-05).

Each test runs on the plain admin app and on one protected by ``CSRFProtect(app)``,
whose check rejects, before any view runs, a POST without a Flask-WTF token. The
browser posts exactly what the page renders.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask_wtf.csrf import CSRFProtect

from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser


@pytest.fixture(params=["without_csrf_protect", "with_csrf_protect"])
def app(app: Any, request: pytest.FixtureRequest) -> Any:
    """The admin app, once as it is and once behind Flask-WTF's ``CSRFProtect``."""
    if request.param == "with_csrf_protect":
        CSRFProtect(app)
    return app


def _committed_ids(*workflows: Any) -> list[Any]:
    """The workflows' ids, with the test session's transaction closed (SQLite lock)."""
    ids = [workflow.id for workflow in workflows]
    db.session.remove()
    return ids


def test_resume_button_acts_in_the_browser(live_url, page):
    """Pressing Resume on a paused workflow shows and stores ready under either protection (R-ADM-05, R-ADM-21)."""
    (workflow_id,) = _committed_ids(paused_workflow())
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="resume"]')
    page.wait_for_selector(".geneva-state:text-is('ready')")
    assert "state is now ready" in page.inner_text("body")
    assert workflow_row(workflow_id)["state"] == "ready"


def test_cancel_and_its_confirmation_act_in_the_browser(live_url, page):
    """Cancel, then the confirmation page's button, cancels under either protection (R-ADM-05, R-ADM-22)."""
    (workflow_id,) = _committed_ids(ready_workflow())
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click('button[data-geneva-action="cancel"]')
    page.wait_for_selector('button[data-geneva-confirm="cancel"]')
    assert workflow_row(workflow_id)["state"] == "ready"
    page.click('button[data-geneva-confirm="cancel"]')
    page.wait_for_selector(".geneva-state:text-is('canceled')")
    assert workflow_row(workflow_id)["state"] == "canceled"


def test_bulk_resume_of_checked_rows_acts_in_the_browser(live_url, page):
    """Checking two paused rows and pressing "Resume checked" resumes both under either protection (R-ADM-05, R-ADM-23)."""
    ids = _committed_ids(paused_workflow(), paused_workflow())
    page.goto(f"{live_url}/geneva/workflows/")
    for workflow_id in ids:
        page.check(f'input[name="ids"][value="{workflow_id}"]')
    page.click('button[data-geneva-bulk="resume"]')
    page.wait_for_selector(".geneva-bulk-summary")
    assert "Resume: 2 succeeded, 0 refused" in page.inner_text(".geneva-bulk-summary")
    assert [workflow_row(i)["state"] for i in ids] == ["ready", "ready"]


def test_bulk_cancel_of_checked_rows_and_its_confirmation_act_in_the_browser(
    live_url, page
):
    """ "Cancel checked", then the bulk confirmation page's button, cancels both under either protection (R-ADM-05, R-ADM-22, R-ADM-23)."""
    ids = _committed_ids(ready_workflow(), ready_workflow())
    page.goto(f"{live_url}/geneva/workflows/")
    for workflow_id in ids:
        page.check(f'input[name="ids"][value="{workflow_id}"]')
    page.click('button[data-geneva-bulk="cancel"]')
    page.click('button[data-geneva-confirm="bulk-cancel"]')
    page.wait_for_selector(".geneva-bulk-summary")
    assert "Cancel: 2 succeeded, 0 refused" in page.inner_text(".geneva-bulk-summary")
    assert [workflow_row(i)["state"] for i in ids] == ["canceled", "canceled"]


def test_resume_all_matching_and_its_confirmation_act_in_the_browser(live_url, page):
    """Filter to paused, "Resume all matching", confirm: every paused workflow is ready under either protection (R-ADM-05, R-ADM-11, R-ADM-23)."""
    ids = _committed_ids(paused_workflow(), paused_workflow(), paused_workflow())
    page.goto(f"{live_url}/geneva/workflows/?state=paused")
    page.click('button[data-geneva-bulk-all="resume"]')
    page.click('button[data-geneva-confirm="bulk-all-resume"]')
    page.wait_for_selector(".geneva-bulk-summary")
    assert (
        page.inner_text(".geneva-bulk-summary")
        == "Resume all matching: 3 succeeded, 0 refused"
    )
    assert [workflow_row(i)["state"] for i in ids] == ["ready"] * 3
