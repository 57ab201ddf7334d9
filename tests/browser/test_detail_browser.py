"""The workflow and execution detail pages in a real browser (R-ADM-12, R-ADM-14, R-ADM-06).

Every workflow here is run through the engine; the pages are served by a real
server thread and read in headless Chromium.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flask_geneva import resumable_step
from flask_geneva.testing import perform_next_step
from tests.admin.support import new_user
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.browser.conftest import ARTIFACTS
from tests.workflow.support import execution_rows

pytestmark = pytest.mark.browser


class BrowserPager(geneva.Workflow):
    """Pages up to id 30, ten ids per execution; the cursor is ``{"after": last id}``.

    Run one interruptible execution at a time, ``page_through`` becomes a chain of
    four: three ``continued`` executions storing ``{"after": 10}``, ``20`` and
    ``30``, then one that finds nothing left and keeps ``{"after": 30}``.
    """

    @resumable_step(max_iterations=1)
    def page_through(self, it):
        after = it.cursor["after"] if it.cursor else 0
        if after < 30:
            it.set({"after": after + 10})  # the first checkpoint interrupts


def _pager_chain() -> tuple[Any, list[Any]]:
    """A finished BrowserPager; ``(workflow id, its four execution ids, oldest first)``."""
    workflow = BrowserPager.create(hero=new_user("pager@example.com"))
    workflow_id = workflow.id
    for _ in range(4):
        perform_next_step(workflow)
    db.session.remove()  # close the test session's transaction (SQLite write lock)
    rows = execution_rows(workflow_id)
    assert [(row["outcome"], row["cursor"]) for row in rows] == [
        ("continued", {"after": 10}),
        ("continued", {"after": 20}),
        ("continued", {"after": 30}),
        ("success", {"after": 30}),
    ]
    assert [row["continues_from_id"] for row in rows[1:]] == [
        row["id"] for row in rows[:-1]
    ]
    return workflow_id, [row["id"] for row in rows]


def _cursor_text(after: int) -> str:
    """The cursor ``{"after": after}`` as the pages print it (pretty JSON)."""
    return json.dumps({"after": after}, indent=2)


def test_resumable_chain_shows_each_execution_with_its_own_cursor(live_url, page):
    """The chain section lists every execution of the chain, each with its own cursor and the execution it continues (R-ADM-12)."""
    workflow_id, ids = _pager_chain()

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    items = page.locator("ol.geneva-chain > li")
    assert items.count() == 4
    for index, after in enumerate([10, 20, 30, 30]):
        item = items.nth(index)
        assert item.get_attribute("data-execution-id") == str(ids[index])
        assert item.locator("pre.geneva-cursor").inner_text() == _cursor_text(after)
        text = item.inner_text()
        assert text.startswith(f"execution {ids[index]} ")
        if index:
            assert f"continues {ids[index - 1]}" in text
        else:
            assert "continues" not in text
        if index < 3:
            assert "interrupted: max_iterations, 1 iterations" in text
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "workflow_detail_chain.png"), full_page=True)
    assert page.geneva_dialogs == []


def test_continues_from_links_walk_the_chain_both_ways(live_url, page):
    """From the workflow page, the "continues from" links lead back to the chain's first execution and the "continued by" links forward to its last, each page showing its own cursor (R-ADM-12, R-ADM-14)."""
    workflow_id, ids = _pager_chain()
    cursors = dict(zip(ids, [10, 20, 30, 30], strict=True))

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    page.click(f'.geneva-timeline tr[data-execution-id="{ids[-1]}"] td a')
    page.wait_for_url(f"**/geneva/step-executions/{ids[-1]}")
    for newer, older in zip(ids[:0:-1], ids[-2::-1], strict=True):
        assert f"Step execution #{newer}:" in page.inner_text("h2")
        assert page.inner_text("pre.geneva-cursor") == _cursor_text(cursors[newer])
        page.click(".geneva-predecessor a")
        page.wait_for_url(f"**/geneva/step-executions/{older}")
    assert page.inner_text(".geneva-predecessor") == "none"
    assert page.inner_text("pre.geneva-cursor") == _cursor_text(10)

    for newer in ids[1:]:
        page.click(".geneva-successors a")
        page.wait_for_url(f"**/geneva/step-executions/{newer}")
        assert f"Step execution #{newer}:" in page.inner_text("h2")
        assert page.inner_text("pre.geneva-cursor") == _cursor_text(cursors[newer])
    assert page.inner_text(".geneva-successors") == "none"

    page.click(".geneva-workflow-link a")
    page.wait_for_url(f"**/geneva/workflows/{workflow_id}")
    assert page.locator("ol.geneva-chain > li").count() == 4
    assert page.geneva_dialogs == []
