"""Starting a workflow in Chromium, beyond the happy path of
``test_roles_browser.py`` (issue 39; R-ADM-200, R-ADM-202, R-ADM-204).

An operator (the ``X-Role`` header of ``test_roles_browser``'s ``app_config``)
finds the class list without the classes marked ``admin_startable = False``,
starts a workflow at a later time, and sees each refusal ``create()`` makes
said on the form, word for word, with nothing written.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from flask_geneva.core import clock
from flask_geneva.exceptions import DuplicateWorkflowError
from flask_geneva.exceptions import StepConfigurationError
from tests.admin.support import new_user
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.browser.test_roles_browser import app_config  # noqa: F401 - the fixture
from tests.support.workflow import execution_rows

pytestmark = pytest.mark.browser

#: Beyond R-JOB-05's 32-bit range (2**31 - 1).
TOO_HIGH = 2**31


def _workflow_count() -> int:
    count = db.session.query(geneva.Workflow).count()
    db.session.remove()  # on SQLite a read holds the lock the server needs
    return count


def _open_start(page, live_url, hero_id) -> None:
    """Go to the start page from the list, choose AdminTwoStep and the User hero
    by its id (Find hero)."""
    page.goto(f"{live_url}/geneva/workflows/")
    page.click(".geneva-start-link")
    page.select_option("#geneva-start-type", "AdminTwoStep")
    page.select_option("#geneva-start-hero-type", "User")
    page.fill("#geneva-start-hero-id", str(hero_id))
    page.click('button[data-geneva-action="find_hero"]')
    page.wait_for_selector('button[data-geneva-submit="start"]')


def test_a_class_not_admin_startable_is_not_offered(live_url, page):
    """The class select offers AdminTwoStep but not AdminInternal
    (``admin_startable = False``); a POST forged with the page's CSRF token
    naming AdminInternal is a 400 naming the startable classes, and nothing
    is written (R-ADM-200)."""
    page.set_extra_http_headers({"X-Role": "operator"})
    page.goto(f"{live_url}/geneva/workflows/start")
    offered = page.locator("#geneva-start-type option").evaluate_all(
        "options => options.map(o => o.value)"
    )
    assert "AdminTwoStep" in offered
    assert "AdminSignalWait" in offered
    assert "AdminInternal" not in offered
    page.select_option("#geneva-start-type", "Tick")  # needs no hero: form shown
    page.click('button[data-geneva-action="find_hero"]')
    token = page.get_attribute(
        'form.geneva-start-form input[name="csrf_token"]', "value"
    )
    forged = page.request.post(
        f"{live_url}/geneva/workflows/start",
        form={"csrf_token": token, "type": "AdminInternal"},
        headers={"X-Role": "operator"},
    )
    assert forged.status == 400
    assert "class &#39;AdminInternal&#39; cannot be started here" in forged.text()
    assert "geneva-error-page" in forged.text()
    assert _workflow_count() == 0


def _bottom(page, selector: str) -> float:
    box = page.locator(selector).bounding_box()
    return box["y"] + box["height"]


def test_a_start_time_delays_the_first_step(live_url, page):
    """A start time typed in the datetime field (UTC) is the first step's
    scheduled_for, and the flash says it; the Find hero and Start buttons sit
    on the line of their fields (R-ADM-202, R-ADM-204)."""
    hero_id = new_user("later@example.com").id
    db.session.remove()
    at = (clock.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    page.set_extra_http_headers({"X-Role": "operator"})
    page.set_viewport_size({"width": 1280, "height": 800})
    _open_start(page, live_url, hero_id)
    for button, field in (
        ('button[data-geneva-action="find_hero"]', "#geneva-start-hero-id"),
        ('button[data-geneva-submit="start"]', "#geneva-start-priority"),
    ):
        assert abs(_bottom(page, button) - _bottom(page, field)) <= 2, button
    page.fill("#geneva-start-at", f"{at:%Y-%m-%dT%H:%M}")
    page.click('button[data-geneva-submit="start"]')
    page.wait_for_selector("text=Started AdminTwoStep workflow")
    flashed = page.inner_text(".alert-success")
    assert f"first step at {at:%Y-%m-%d %H:%M} UTC; state is ready" in flashed
    workflow_id = int(re.search(r"/workflows/(\d+)$", page.url).group(1))
    [first] = execution_rows(workflow_id)
    db.session.remove()
    assert first["step_name"] == "first"
    scheduled = first["scheduled_for"].replace(tzinfo=None)
    assert scheduled == at.replace(tzinfo=None)


def test_refusals_read_as_create_says_them_and_write_nothing(live_url, page):
    """A hero with an ongoing AdminTwoStep, a priority beyond 32 bits and a
    start time in the past are each refused on the form as "Not started:"
    with the message create() raises (or the form's own), the typed values
    kept, status 200 and no workflow written (R-ADM-204, R-UNQ-02, R-JOB-05)."""
    hero = new_user("busy@example.com")
    ongoing = AdminTwoStep.create(hero=hero)
    with pytest.raises(DuplicateWorkflowError) as duplicate:
        AdminTwoStep.create(hero=hero)
    other = new_user("free@example.com")
    with pytest.raises(StepConfigurationError) as out_of_range:
        AdminTwoStep.create(hero=other, priority=TOO_HIGH)
    hero_id, other_id, ongoing_id = hero.id, other.id, ongoing.id
    db.session.rollback()
    db.session.remove()
    before = _workflow_count()
    page.set_extra_http_headers({"X-Role": "operator"})

    _open_start(page, live_url, hero_id)
    page.fill("#geneva-start-priority", "3")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click('button[data-geneva-submit="start"]')
    assert answer.value.status == 200
    said = page.inner_text(".geneva-start-error")
    assert said == f"Not started: {duplicate.value}"
    assert f"(workflow {ongoing_id})" in said  # names the ongoing workflow
    assert page.input_value("#geneva-start-priority") == "3"

    _open_start(page, live_url, other_id)
    page.fill("#geneva-start-priority", str(TOO_HIGH))
    page.click('button[data-geneva-submit="start"]')
    page.wait_for_selector(".geneva-start-error")
    assert page.inner_text(".geneva-start-error") == (
        f"Not started: {out_of_range.value}"
    )
    assert page.input_value("#geneva-start-priority") == str(TOO_HIGH)

    _open_start(page, live_url, other_id)
    past = clock.now() - timedelta(hours=1)
    page.fill("#geneva-start-at", f"{past:%Y-%m-%dT%H:%M}")
    page.click('button[data-geneva-submit="start"]')
    page.wait_for_selector(".geneva-start-error")
    refused = page.inner_text(".geneva-start-error")
    assert refused.startswith("Not started: start time ")
    assert refused.endswith("is not in the future; leave it empty to start now")
    assert page.input_value("#geneva-start-at").startswith(f"{past:%Y-%m-%dT%H:%M}")
    assert _workflow_count() == before
    assert page.geneva_dialogs == []
