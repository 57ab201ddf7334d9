"""Starting a workflow and roles in Chromium (issue 39; R-ADM-200..204, R-ADM-210..214).

The role comes from an ``X-Role`` header the browser context sends
(``GENEVA_ADMIN_CURRENT_ROLE`` reads it), so one server serves a viewer and an
operator in turn.
"""

from __future__ import annotations

import logging
import re

import pytest
from flask import request

from flask_geneva.admin.audit import AUDIT_LOGGER
from tests.admin.support import new_user
from tests.admin.support import paused_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser


@pytest.fixture
def app_config():
    """The standalone admin with roles read from the X-Role header (R-ADM-210)."""
    from tests.admin.conftest import ADMIN_CONFIG

    return {
        **ADMIN_CONFIG,
        "GENEVA_ADMIN_CURRENT_ROLE": lambda: request.headers.get("X-Role"),
        "GENEVA_ADMIN_ACTOR": lambda: request.headers.get("X-Role"),
    }


def test_an_operator_starts_a_workflow_found_by_its_label(live_url, page, monkeypatch):
    """From the list's "Start a workflow…": pick the class, search the hero by the
    start of its email, use it, give a priority, start; the workflow's page says
    so and the list shows it (R-ADM-200..203)."""
    monkeypatch.setattr(User, "__geneva_hero_label__", "email", raising=False)
    hero_id = new_user("zoe@example.com").id
    new_user("zack@example.com")
    db.session.remove()
    page.set_extra_http_headers({"X-Role": "operator"})
    page.goto(f"{live_url}/geneva/workflows/")
    page.click(".geneva-start-link")
    page.select_option("#geneva-start-type", "AdminTwoStep")
    page.select_option("#geneva-start-hero-type", "User")
    page.fill("#geneva-start-q", "zo")
    page.click('button[data-geneva-action="find_hero"]')
    assert page.locator(".geneva-start-matches tr[data-hero-id]").count() == 1
    page.click(f'tr[data-hero-id="{hero_id}"] a')
    assert page.inner_text(".geneva-start-hero").startswith(f"Hero: User#{hero_id}")
    page.fill("#geneva-start-priority", "5")
    page.click('button[data-geneva-submit="start"]')
    page.wait_for_selector("text=Started AdminTwoStep workflow")
    workflow_id = re.search(r"/workflows/(\d+)$", page.url).group(1)
    row = workflow_row(int(workflow_id))
    assert row["metadata"]["operator_actions"][0]["actor"] == "operator"
    page.goto(f"{live_url}/geneva/workflows/?hero_type=User&hero_id={hero_id}")
    listed = page.locator("tr[data-workflow-id]")
    assert [listed.nth(i).get_attribute("data-workflow-id") for i in range(1)] == [
        workflow_id
    ]
    assert listed.count() == 1


def test_a_viewer_has_no_buttons_and_a_forged_post_is_refused(live_url, page, caplog):
    """The viewer's workflow page has no button; the same viewer's POST with a valid
    CSRF token is a 403 page in the admin layout, audited, and changes nothing; the
    operator's page has the buttons and Resume works (R-ADM-213, R-ADM-214)."""
    workflow_id = paused_workflow().id
    db.session.remove()
    detail = f"{live_url}/geneva/workflows/{workflow_id}"
    page.set_extra_http_headers({"X-Role": "viewer"})
    page.goto(f"{live_url}/geneva/workflows/")
    token = page.get_attribute('input[name="csrf_token"]', "value")
    assert page.locator("[data-geneva-bulk], .geneva-start-link").count() == 0
    page.goto(detail)
    assert page.locator("[data-geneva-action]").count() == 0
    assert page.locator("form[method=post]").count() == 0
    with caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        forged = page.request.post(
            f"{detail}/action",
            form={"csrf_token": token, "action": "resume"},
            headers={"X-Role": "viewer"},
        )
    assert forged.status == 403
    assert "your role &#39;viewer&#39; does not allow &#39;resume&#39;" in forged.text()
    assert "geneva-error-page" in forged.text()
    [record] = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    assert (record.geneva_actor, record.geneva_action) == ("viewer", "resume")
    assert workflow_row(workflow_id)["state"] == "paused"

    page.set_extra_http_headers({"X-Role": "operator"})
    page.goto(detail)
    assert page.locator('[data-geneva-action="recover"]').count() == 0
    page.click('button[data-geneva-action="resume"]')
    page.wait_for_selector(f"text=Workflow {workflow_id}: Resume done")
    assert workflow_row(workflow_id)["state"] == "ready"
