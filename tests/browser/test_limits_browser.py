"""The Limits page in Chromium (issue 35, operators' part).

R-LIM-45 (filter to busy keys, follow a key to its queue and on to the waiting
execution), R-LIM-42 (the execution page's sentence), R-ADM-06 (a stored key
never runs as script), R-ADM-42 (no sideways scrolling).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.core import clock
from tests.admin.support import new_user
from tests.admin.test_limits_page import AdminPartnerSync
from tests.apps.basic import db
from tests.support.limit_rows import park
from tests.support.limit_rows import set_key

pytestmark = pytest.mark.browser

OVERFLOW = "() => [document.documentElement.scrollWidth, window.innerWidth]"
SCRIPT = "<script>alert('limit')</script>"


def test_filter_busy_keys_and_follow_a_key_to_its_waiter(
    live_url, page_without_csp, geneva_jobs
):
    """Tick "busy only", submit, open acme's queue, then its waiting execution,
    whose page says what it waits for; a key holding <script> stays text."""
    page = page_without_csp  # no dialog must fire even without the CSP
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    workflow = AdminPartnerSync.create(hero=new_user("browser@example.com"))
    execution_id = workflow.current_execution.id
    db.session.commit()
    set_key("admin-partner-api", "acme", running=2, waiting=1)
    set_key("admin-partner-api", "idle-tenant")
    set_key("admin-partner-api", SCRIPT, running=1)
    park(
        workflow.id,
        execution_id,
        "admin-partner-api",
        "acme",
        since=clock.now() - timedelta(minutes=3),
    )
    db.session.remove()  # close the test session's transaction (SQLite write lock)

    page.goto(f"{live_url}/geneva/limits/")
    assert page.is_visible('tr[data-key="idle-tenant"]')
    page.check('input[name="busy"]')
    page.click("form.geneva-filters button[type=submit]")
    page.wait_for_url("**busy=1**")
    assert not page.is_visible('tr[data-key="idle-tenant"]')
    assert SCRIPT in page.inner_text(".geneva-limits")
    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        scroll, inner = page.evaluate(OVERFLOW)
        assert scroll <= inner, (width, scroll, inner)
    page.click('tr[data-key="acme"] .geneva-limit-key a')
    page.wait_for_selector(".geneva-limit-waiters")
    assert "2 of 2 running" in page.inner_text(".geneva-limit-counts")
    page.click(f'tr[data-execution-id="{execution_id}"] td a')
    page.wait_for_selector(".geneva-limit-wait")
    sentence = " ".join(page.inner_text(".geneva-limit-wait").split())
    assert "Waiting for an admin-partner-api slot (key acme, 2 of 2 running" in sentence
    assert "position 1) since 3 min" in sentence
