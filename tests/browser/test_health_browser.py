"""The overview's health panel in Chromium: last runs and the "dispatcher has not
run" warning (issue 21, issue 17; R-HK-42, R-HK-43)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.browser


def test_overview_shows_last_runs_and_the_dispatcher_warning(live_url, page):
    """The health table shows when each job last ran and how it ended; a
    dispatcher silent for more than two intervals is a visible warning above
    everything else, and the page does not overflow at 1280 px (R-HK-42/43)."""
    geneva.dispatch_due()
    run_housekeeping()
    table = db.metadata.tables["geneva_drive_maintenance_runs"]
    db.session.remove()
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.name == "dispatcher")
            .values(started_at=clock.now() - timedelta(minutes=7))
        )
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_url}/geneva/")
    warning = page.locator(".geneva-health-warning")
    assert warning.count() == 1
    assert warning.is_visible()
    assert "The dispatcher has not run for 7 min" in warning.inner_text()
    dispatcher = page.locator('.geneva-health tr[data-job="dispatcher"]')
    assert "7 min ago" in dispatcher.inner_text()
    housekeeping = page.locator('.geneva-health tr[data-job="housekeeping"]')
    assert "succeeded" in housekeeping.inner_text()
    assert "30 min" in housekeeping.inner_text()
    # The warning sits above the first table, where an operator looks first.
    warning_top = warning.bounding_box()["y"]
    first_table = page.locator("table.geneva-overview").bounding_box()["y"]
    assert warning_top < first_table
    scroll, inner = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert scroll <= inner
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-overview-health.png"), full_page=True)
