"""The executions list's keyset pager in Chromium (R-ADM-150)."""

from __future__ import annotations

import pytest

from tests.admin.support import ready_workflow
from tests.admin.support import store_executions
from tests.apps.basic import db

pytestmark = pytest.mark.browser


def _rows(page) -> list[str]:
    return page.eval_on_selector_all(
        "tr[data-execution-id]", "rows => rows.map(r => r.dataset.executionId)"
    )


def test_next_on_the_executions_list_shows_the_following_rows(live_url, page):
    """Clicking "next" on the executions list shows the 50 rows after the
    first page's last one (a key in the URL, no offset), "previous" shows the
    first page again (R-ADM-150)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 120)  # with the scheduled one: 121
    newest_first = sorted(every, key=int, reverse=True)
    db.session.remove()  # close the test session's transaction (SQLite write lock)
    page.goto(f"{live_url}/geneva/step-executions/")
    first = _rows(page)
    assert first == newest_first[:50]
    assert page.locator(".geneva-pager span").inner_text() == "page 1"

    page.click('.geneva-pager a[rel="next"]')
    page.wait_for_url(f"**/geneva/step-executions/?after={first[-1]}&page=2")
    assert _rows(page) == newest_first[50:100]
    assert page.locator(".geneva-pager span").inner_text() == "page 2"

    page.click('.geneva-pager a[rel="next"]')
    page.wait_for_url("**page=3")
    assert _rows(page) == newest_first[100:]
    assert page.locator('.geneva-pager a[rel="next"]').count() == 0

    page.click('.geneva-pager a[rel="prev"]')
    page.wait_for_url(f"**before={newest_first[100]}&page=2")
    assert _rows(page) == newest_first[50:100]
    page.click('.geneva-pager a[rel="prev"]')
    page.wait_for_url("**/geneva/step-executions/")
    assert _rows(page) == newest_first[:50]
    assert page.geneva_dialogs == []
