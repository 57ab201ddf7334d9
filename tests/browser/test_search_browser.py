"""The one search box in Chromium: hero in any case, error text, gone classes (issue 21; R-ADM-50)."""

from __future__ import annotations

import pytest

from tests.admin.support import failed_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.workflow import update_workflow

pytestmark = pytest.mark.browser


def _rows(page) -> list[str]:
    return page.eval_on_selector_all(
        "tr[data-workflow-id]", "rows => rows.map(r => r.dataset.workflowId)"
    )


def test_one_box_finds_heroes_errors_and_ids(live_url, page):
    """Typing `user#<id>`, error text or an id in the search box and pressing Enter lists the right workflows; a retired class is offered in the class filter (R-ADM-50)."""
    ready = ready_workflow()
    ready_id, hero_id = str(ready.id), ready.hero_id
    failing_id = str(failed_workflow().id)
    retired_id = str(ready_workflow().id)
    update_workflow(int(retired_id), type="RetiredFlow")
    db.session.remove()
    page.goto(f"{live_url}/geneva/workflows/")
    search = page.locator('.geneva-filters input[name="q"]')
    search.fill(f"user#{hero_id}")
    search.press("Enter")
    page.wait_for_selector(".geneva-filter-line")
    assert _rows(page) == [ready_id]

    page.locator('.geneva-filters input[name="q"]').fill("ALERT('BOOM')")
    page.locator('.geneva-filters input[name="q"]').press("Enter")
    page.wait_for_selector(".geneva-filter-line:has-text('error message contains')")
    assert _rows(page) == [failing_id]

    page.locator('.geneva-filters input[name="q"]').fill(failing_id)
    page.locator('.geneva-filters input[name="q"]').press("Enter")
    page.wait_for_selector(".geneva-filter-line:has-text('workflow id or hero id')")
    assert failing_id in _rows(page)

    page.goto(f"{live_url}/geneva/workflows/")
    page.select_option('.geneva-filters select[name="type"]', "RetiredFlow")
    page.click('.geneva-filters button[type="submit"]')
    page.wait_for_selector(".geneva-filter-line:has-text('class = RetiredFlow')")
    assert _rows(page) == [retired_id]
    assert page.geneva_dialogs == []
