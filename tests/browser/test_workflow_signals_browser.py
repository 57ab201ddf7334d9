"""Workflow signals in Chromium: deliver through the form, see the step wake (issue 18).

R-WSIG-66 (the parked step's line), R-WSIG-67 (the panel), R-WSIG-68 (the form),
R-WSIG-69 (the list), R-ADM-06 (escaping), R-ADM-42 (no sideways scrolling).
"""

from __future__ import annotations

import pytest

from tests.admin.support import new_user
from tests.admin.workflows import AdminSignalWait
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser

OVERFLOW = "() => [document.documentElement.scrollWidth, window.innerWidth]"
SCRIPT = "<script>alert('signal')</script>"


def test_delivering_a_signal_through_the_form_wakes_the_parked_step(
    live_url, page_without_csp, geneva_jobs
):
    """Open "Deliver signal…", type the name and a JSON payload holding <script>,
    submit: the flash says the parked execution was woken, the waiting line is
    gone, the signal is claimed; once the step ran, the panel shows it consumed
    with links to the execution; nothing stored runs as script (R-WSIG-66..68,
    R-ADM-06)."""
    page = page_without_csp  # no dialog must fire even without the CSP
    workflow = AdminSignalWait.create(hero=new_user("browser@example.com"))
    geneva_jobs.drain()
    workflow_id = workflow.id
    parked = execution_rows(workflow_id)[-1]
    assert parked["state"] == "waiting"
    db.session.remove()  # close the test session's transaction (SQLite write lock)

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    waiting = page.inner_text(".geneva-waiting")
    assert "Step ship is waiting for payment_confirmed since" in waiting
    assert "since just now" in waiting
    assert (
        "times out in 2 d" in waiting
    )  # 2 d less a moment, to the nearest day (R-ADM-40)
    assert not page.is_visible(".geneva-signal-form")
    page.click('summary[data-geneva-action="deliver_signal"]')
    page.fill('.geneva-signal-form input[name="name"]', "payment_confirmed")
    page.fill(
        '.geneva-signal-form textarea[name="payload"]',
        '{"amount": 100, "note": "' + SCRIPT.replace("'", "\\u0027") + '"}',
    )
    page.fill('.geneva-signal-form input[name="idempotency_key"]', "pay-1")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "deliver_signal_form.png"))
    page.click('button[data-geneva-submit="deliver_signal"]')
    page.wait_for_selector(f"text=Workflow {workflow_id}: payment_confirmed: signal")
    flash = page.inner_text("body")
    assert f"woke execution {parked['id']}" in flash
    assert page.locator(".geneva-waiting").count() == 0
    assert "claimed" in page.inner_text(".geneva-signals")
    assert execution_rows(workflow_id)[-1]["state"] == "scheduled"

    geneva_jobs.drain()  # the woken step runs with the signal
    db.session.remove()
    assert workflow_row(workflow_id)["state"] == "finished"
    page.reload()
    panel = page.inner_text(".geneva-signals")
    assert "consumed" in panel
    assert "pay-1" in panel
    assert SCRIPT in panel  # shown as text, not run
    assert f"consumed by execution {parked['id']}" in panel
    page.click(f'.geneva-consumed-by a:has-text("execution {parked["id"]}")')
    page.wait_for_url(f"**/step-executions/{parked['id']}")
    assert page.geneva_dialogs == []
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.screenshot(path=str(ARTIFACTS / "workflow_signals.png"), full_page=True)


def test_the_signals_list_and_panel_never_scroll_sideways(live_url, page, geneva_jobs):
    """A long payload and key fit the phone and desktop widths on the signals
    list and the workflow page (R-ADM-42, R-WSIG-67, R-WSIG-69)."""
    workflow = AdminSignalWait.create(hero=new_user("wide@example.com"))
    workflow.signal(
        "other",
        {"blob": "z" * 4000},
        idempotency_key="k" * 200,
        warn_unawaited=False,
    )
    workflow_id = workflow.id
    db.session.remove()
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for url in ("/geneva/signals/", f"/geneva/workflows/{workflow_id}"):
            page.goto(f"{live_url}{url}")
            scroll, inner = page.evaluate(OVERFLOW)
            assert scroll <= inner, (url, width, scroll, inner)
    page.goto(f"{live_url}/geneva/signals/?state=pending")
    assert page.locator("tr[data-signal-id]").count() == 1
    page.click("details.geneva-payload summary")
    assert "z" * 4000 in page.inner_text("details.geneva-payload .geneva-payload-full")
