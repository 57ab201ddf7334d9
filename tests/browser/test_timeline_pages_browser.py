"""The workflow page's paged execution timeline in Chromium (R-ADM-57, R-ADM-42)."""

from __future__ import annotations

import pytest

from tests.admin.support import ready_workflow
from tests.admin.support import store_executions
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

pytestmark = pytest.mark.browser

#: Measured in the page: does it scroll sideways?
OVERFLOW = "() => [document.documentElement.scrollWidth, window.innerWidth]"
LONG_ERROR = "card declined by the acquiring bank: " + "insufficient_funds " * 12


def test_the_paged_timeline_fits_1280_px_and_its_links_page_through(live_url, page):
    """At 1280x800 a 250-execution workflow's page (long errors included) does not scroll sideways on any timeline page, its chart is drawn, and the older/newer links page through (R-ADM-57, R-ADM-42)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 250)
    for execution_id in every[-3:-1] + every[5:7]:
        row = next(
            r for r in execution_rows(workflow_id) if str(r["id"]) == execution_id
        )
        update_execution(
            row["id"],
            state="failed",
            outcome=None,
            completed_at=None,
            failed_at=row["finished_at"],
            error_class_name="example_app.payments.CardDeclined",
            error_message=LONG_ERROR,
            error_backtrace="Traceback (most recent call last):\n" + "  x" * 300,
        )
    db.session.remove()  # close the test session's transaction (SQLite write lock)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shown = []
    for number in (1, 2, 3):
        assert page.locator(".geneva-timeline-range").count() == 1
        rows = page.locator(".geneva-timeline tbody tr")
        shown.append(
            [
                rows.nth(i).get_attribute("data-execution-id")
                for i in range(rows.count())
            ]
        )
        chart = page.locator("svg.geneva-chart")
        box = chart.bounding_box()
        assert box is not None
        assert box["width"] > 200
        assert box["height"] > 40
        assert page.locator("svg.geneva-chart g.bar").count() == len(shown[-1])
        scroll_width, inner_width = page.evaluate(OVERFLOW)
        assert scroll_width <= inner_width, (number, scroll_width)
        page.screenshot(
            path=str(ARTIFACTS / f"workflow-timeline-page-{number}-1280x800.png"),
            full_page=True,
        )
        if number < 3:
            page.click(".geneva-pager-bottom a.geneva-older")
            page.wait_for_url(f"**/geneva/workflows/{workflow_id}?page={number + 1}*")
    assert page.locator("a.geneva-older").count() == 0
    assert [i for ids in reversed(shown) for i in ids] == every
    page.click(".geneva-pager-top a.geneva-newer")
    page.wait_for_url(f"**/geneva/workflows/{workflow_id}?page=2*")
    assert (
        page.locator(".geneva-timeline tbody tr").first.get_attribute(
            "data-execution-id"
        )
        == shown[1][0]
    )
    assert page.geneva_dialogs == []
