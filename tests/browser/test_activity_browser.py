"""Outcomes over time, the class page and the oldest overdue execution in Chromium (issue 21; R-ADM-54..56)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import failed_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

pytestmark = pytest.mark.browser


def test_overview_chart_and_class_page(live_url, page):
    """The overview draws one chart per class with bars that have hover titles, names the oldest overdue execution, and links each class to its page of step durations (R-ADM-54..56)."""
    for _ in range(3):
        workflow = ready_workflow()
        perform_next_step(workflow)
        perform_next_step(workflow)
    failed_workflow()
    overdue = ready_workflow()
    overdue_execution = execution_rows(overdue.id)[0]["id"]
    update_execution(
        overdue_execution, scheduled_for=clock.now() - timedelta(minutes=20)
    )
    db.session.remove()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_url}/geneva/")
    charts = page.locator("svg.geneva-activity")
    assert charts.count() == 2
    done = page.locator(
        'svg[data-geneva-activity="AdminTwoStep"] rect.geneva-activity-done'
    )
    assert done.count() >= 1
    assert done.first.bounding_box()["height"] > 0
    title = page.locator('svg[data-geneva-activity="AdminTwoStep"] g title').last
    assert "6 completed, 0 failed" in title.text_content()
    failed = page.locator(
        'svg[data-geneva-activity="AdminFailing"] rect.geneva-activity-failed'
    )
    assert failed.count() == 1
    oldest = page.inner_text(".geneva-oldest-overdue")
    assert str(overdue_execution) in oldest
    assert "20 min ago" in oldest
    scroll, inner = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll <= inner
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-overview-activity.png"), full_page=True)

    page.click('.geneva-overview a:has-text("AdminTwoStep")')
    page.wait_for_selector(".geneva-durations")
    assert page.inner_text("h2") == "AdminTwoStep"
    steps = page.eval_on_selector_all(
        ".geneva-durations tbody tr", "rows => rows.map(r => r.dataset.genevaStep)"
    )
    assert steps == ["first", "second"]
    assert page.inner_text('tr[data-geneva-step="first"] td:nth-child(2)') == "3"
    page.screenshot(path=str(ARTIFACTS / "admin-class-page.png"), full_page=True)
    assert page.geneva_dialogs == []
