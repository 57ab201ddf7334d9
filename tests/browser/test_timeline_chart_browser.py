"""The detail page's SVG timeline chart in a real browser (R-ADM-12, R-ADM-06)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

pytestmark = pytest.mark.browser

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
#: Would open a dialog if the step name reached the SVG unescaped.
PAYLOAD = "<svg onload=alert(1)>"


def _two_steps_three_days_apart() -> object:
    """A finished AdminTwoStep whose 40 ms steps are stored 3 d 4 h apart; its id."""
    workflow = ready_workflow()
    perform_next_step(workflow)
    with clock.frozen(datetime.now(UTC) + timedelta(hours=2)):
        perform_next_step(workflow)
    workflow_id = workflow.id
    first, second = execution_rows(workflow_id)
    later = T0 + timedelta(days=3, hours=4, milliseconds=45)
    update_execution(
        first["id"],
        step_name=PAYLOAD,
        scheduled_for=T0,
        started_at=T0 + timedelta(milliseconds=5),
        finished_at=T0 + timedelta(milliseconds=45),
    )
    update_execution(
        second["id"],
        scheduled_for=later,
        started_at=later + timedelta(milliseconds=5),
        finished_at=later + timedelta(milliseconds=45),
    )
    db.session.remove()  # close the test session's transaction (SQLite write lock)
    return workflow_id


def test_timeline_chart_is_drawn_with_visible_bars(live_url, page):
    """The SVG chart has a non-zero box, each bar is visible, the idle gap is labelled and no script runs (R-ADM-12, R-ADM-06)."""
    workflow_id = _two_steps_three_days_apart()
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    chart = page.locator("svg.geneva-chart")
    box = chart.bounding_box()
    assert box is not None
    assert box["width"] > 200
    assert box["height"] > 40
    bars = chart.locator("g.bar rect.run")
    assert bars.count() == 2
    for index in range(2):
        bar = bars.nth(index).bounding_box()
        assert bar is not None
        assert bar["width"] > 50  # the 40 ms runs are not squeezed by the 3-day gap
        assert bar["height"] > 5
    gap_label = chart.locator(".gap text")
    assert gap_label.is_visible()
    assert gap_label.text_content() == "3 d 4 h idle"  # SVG nodes have no inner_text
    assert chart.locator(".lane-label").first.text_content() == PAYLOAD
    assert PAYLOAD in chart.locator("g.bar title").first.text_content()
    assert page.geneva_dialogs == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chart.screenshot(path=str(ARTIFACTS / "timeline_chart.png"))
