"""Auto-refresh of the admin pages in Chromium (issue 21; R-ADM-49).

A row is changed in the database behind the open page; the page shows the change
without a reload (a marker set on ``window`` survives), with its filters, its URL
and its scroll position kept. Paused (remembered across pages) or while the
operator has checked a row, nothing changes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.admin.conftest import ADMIN_CONFIG
from tests.admin.support import detail_url
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow

pytestmark = pytest.mark.browser

#: Set before the change; a full reload would drop it.
MARK = "() => { window.genevaNoReload = 1; }"
NOT_RELOADED = "() => window.genevaNoReload === 1"


@pytest.fixture
def app_config() -> dict[str, Any]:
    """The standalone admin refreshing every second."""
    return {**ADMIN_CONFIG, "GENEVA_ADMIN_REFRESH_SECONDS": 1}


def _state_of(page: Any, workflow_id: Any) -> str:
    return page.inner_text(f'tr[data-workflow-id="{workflow_id}"] td:nth-child(5)')


def test_the_filtered_list_shows_a_changed_row_without_a_reload(live_url, page):
    """A workflow paused in the database reads "paused" in the open, filtered, scrolled list within seconds; URL, filter and scroll stay (R-ADM-49)."""
    ids = [ready_workflow().id for _ in range(40)]
    db.session.remove()
    page.set_viewport_size({"width": 1280, "height": 600})
    url = f"{live_url}/geneva/workflows/?type=AdminTwoStep&sort=id&dir=asc"
    page.goto(url)
    assert page.locator("[data-geneva-refresh-toggle]").inner_text() == (
        "Auto-refresh on"
    )
    target = ids[30]
    assert "ready" in _state_of(page, target)
    page.evaluate(MARK)
    page.evaluate("() => window.scrollTo(0, 400)")
    update_workflow(target, state="paused")

    page.wait_for_function(
        '(id) => document.querySelector(`tr[data-workflow-id="${id}"]`)'
        ".innerText.includes('paused')",
        arg=str(target),
        timeout=10_000,
    )
    assert page.evaluate(NOT_RELOADED)
    assert page.url == url
    assert page.locator('.geneva-filters select[name="type"]').input_value() == (
        "AdminTwoStep"
    )
    assert page.evaluate("() => window.scrollY") == 400
    assert page.geneva_dialogs == []


def test_the_overview_and_the_workflow_page_refresh(live_url, page):
    """The overview's counts and the workflow page's state follow the database (R-ADM-49)."""
    workflow_id = ready_workflow().id
    db.session.remove()
    page.goto(f"{live_url}/geneva/")
    page.evaluate(MARK)
    update_workflow(workflow_id, state="paused")
    page.wait_for_function(
        "() => document.querySelector('.geneva-overview tbody').innerText"
        ".includes('100.0 %')",
        timeout=10_000,
    )
    assert page.evaluate(NOT_RELOADED)

    page.goto(f"{live_url}{detail_url(workflow_id)}")
    page.evaluate(MARK)
    update_workflow(workflow_id, state="canceled")
    page.wait_for_function(
        "() => document.querySelector('#geneva-live').innerText.includes('canceled')",
        timeout=10_000,
    )
    assert page.evaluate(NOT_RELOADED)


def test_paused_or_busy_pages_do_not_refresh(live_url, page):
    """Paused from the toolbar (remembered on the next page) or with a row checked, the list keeps what it shows (R-ADM-49)."""
    first, second = ready_workflow().id, ready_workflow().id
    db.session.remove()
    page.goto(f"{live_url}/geneva/workflows/")
    page.click("[data-geneva-refresh-toggle]")
    assert page.inner_text("[data-geneva-refresh-toggle]") == "Auto-refresh paused"
    update_workflow(first, state="paused")
    page.wait_for_timeout(2500)
    assert "ready" in _state_of(page, first)

    page.goto(f"{live_url}/geneva/step-executions/")
    assert page.inner_text("[data-geneva-refresh-toggle]") == "Auto-refresh paused"
    page.goto(f"{live_url}/geneva/workflows/")
    page.click("[data-geneva-refresh-toggle]")  # resume
    assert page.inner_text("[data-geneva-refresh-toggle]") == "Auto-refresh on"
    page.check(f'input[name="ids"][value="{second}"]')
    update_workflow(second, state="paused")
    page.wait_for_timeout(2500)
    assert "ready" in _state_of(page, second)
    page.uncheck(f'input[name="ids"][value="{second}"]')
    page.wait_for_function(
        '(id) => document.querySelector(`tr[data-workflow-id="${id}"]`)'
        ".innerText.includes('paused')",
        arg=str(second),
        timeout=10_000,
    )


def test_pages_without_live_content_show_no_toggle(live_url, page):
    """An error page has no live content: no auto-refresh toggle (R-ADM-49)."""
    page.goto(f"{live_url}/geneva/workflows/")
    assert page.locator("#geneva-live").get_attribute("data-geneva-refresh") == "1"
    page.goto(f"{live_url}/geneva/nothing-here")
    assert page.locator("[data-geneva-refresh-toggle]").is_hidden()


def test_the_filtered_executions_list_shows_a_changed_row_without_a_reload(
    live_url, page
):
    """An execution that fails in the database reads "failed" in the open,
    filtered executions list, with its error, without a reload; the filter stays
    (R-ADM-49, R-ADM-44)."""
    workflow_id = ready_workflow().id
    execution_id = execution_rows(workflow_id)[0]["id"]
    db.session.remove()
    url = f"{live_url}/geneva/step-executions/?type=AdminTwoStep"
    page.goto(url)
    row = f'tr[data-execution-id="{execution_id}"]'
    assert "scheduled" in page.inner_text(row)
    page.evaluate(MARK)
    update_execution(
        execution_id,
        state="failed",
        outcome="failed",
        error_class_name="builtins.TimeoutError",
        error_message="the gateway did not answer",
    )
    page.wait_for_function(
        "(selector) => document.querySelector(selector).innerText"
        ".includes('the gateway did not answer')",
        arg=row,
        timeout=10_000,
    )
    assert "failed" in page.inner_text(f"{row} td:nth-child(5)")
    assert page.evaluate(NOT_RELOADED)
    assert page.url == url
    assert page.locator('.geneva-filters select[name="type"]').input_value() == (
        "AdminTwoStep"
    )
