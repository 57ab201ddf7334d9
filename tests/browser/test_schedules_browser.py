"""The Schedules page in Chromium (issue 37, operators' part).

R-SCHED-37: Pause, then Resume, then Run now, each a click on the page's
button, a flash saying what happened and the row's state and buttons
following; R-SCHED-35: the three actions listed with via "admin"; R-ADM-41:
the zone switch rewrites the next fires' exact times to local time.
"""

from __future__ import annotations

import pytest

from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import schedule_row

pytestmark = pytest.mark.browser

ROW = 'tr[data-schedule="hourly-tick"]'


def test_pause_then_resume_then_run_now(live_url, page, declare, app):
    """Click Pause, Resume and Run now on one schedule's row: each flashes
    done, the state badge and the enabled buttons follow, Run now makes a
    run_now fire, and the operator actions list all three via admin."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "browser-operator"
    declare("hourly-tick", Tick, cron="0 * * * *", timezone="Europe/Berlin")
    db.session.remove()
    page.goto(f"{live_url}/geneva/schedules/")
    assert page.locator(f"{ROW} .geneva-schedule-next li").count() == 5
    assert page.locator(f'{ROW} button[data-geneva-action="resume"]').is_disabled()

    page.click(f'{ROW} button[data-geneva-action="pause"]')
    page.wait_for_selector("text=Schedule 'hourly-tick': Pause done")
    assert "paused" in page.inner_text(f"{ROW} .geneva-schedule-state")
    assert page.locator(f'{ROW} button[data-geneva-action="pause"]').is_disabled()
    assert schedule_row("hourly-tick")["paused"] is True

    page.click(f'{ROW} button[data-geneva-action="resume"]')
    page.wait_for_selector("text=Schedule 'hourly-tick': Resume done")
    assert "active" in page.inner_text(f"{ROW} .geneva-schedule-state")
    assert schedule_row("hourly-tick")["paused"] is False

    page.click(f'{ROW} button[data-geneva-action="run_now"]')
    page.wait_for_selector("text=Schedule 'hourly-tick': Run now done")
    assert [(f["kind"], f["state"]) for f in fires("hourly-tick")] == [
        ("run_now", "running")
    ]
    assert "run_now" in page.inner_text(f"{ROW} .geneva-schedule-fires")
    log = page.locator('.geneva-schedule-actions-log tr[data-schedule="hourly-tick"]')
    assert log.count() == 3
    assert [log.nth(i).get_attribute("data-action") for i in range(3)] == [
        "run_now",
        "resume",
        "pause",
    ]
    assert "browser-operator" in log.nth(0).inner_text()
    assert "admin" in log.nth(0).inner_text()

    first = page.locator(f"{ROW} .geneva-schedule-next time").first
    utc_text = first.inner_text()
    assert utc_text.endswith("UTC")
    page.click("[data-geneva-tz]")  # the operator's local time (R-ADM-41)
    assert first.inner_text() != utc_text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "schedules_page.png"), full_page=True)
    assert page.geneva_dialogs == []
