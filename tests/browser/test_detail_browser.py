"""The workflow and execution detail pages in a real browser (R-ADM-12, R-ADM-14, R-ADM-06).

Every workflow here is run through the engine; the pages are served by a real
server thread and read in headless Chromium.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flask_geneva import on_exception
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.testing import perform_next_step
from tests.admin.support import new_user
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.browser.conftest import ARTIFACTS
from tests.support.workflow import execution_rows

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


class BrowserTimeout(Exception):
    """Raised by :class:`BrowserFlaky`; the class policy matches it."""


class BrowserFlaky(geneva.Workflow):
    """A step that always times out: reattempted twice 30 s apart, then paused."""

    exception_policies = [
        on_exception(BrowserTimeout, action="reattempt", wait=30, max_reattempts=2)
    ]

    @step
    def call_partner_api(self):
        raise BrowserTimeout("the partner API timed out after 10 s")


SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
IMG = "<img src=x onerror=alert(2)>"
ESCAPED_IMG = "&lt;img src=x onerror=alert(2)&gt;"
#: Each stored value carries both payloads.
HOSTILE_EMAIL = f"{SCRIPT}{IMG}@example.com"
HOSTILE_CURSOR = {"after": SCRIPT, "next": IMG}
HOSTILE_MESSAGE = f"row {SCRIPT} rejected: {IMG}"


class BrowserHostile(geneva.Workflow):
    """Stores hostile text in its cursor, then fails with a hostile message."""

    @resumable_step
    def ingest(self, it):
        it.set(HOSTILE_CURSOR)
        raise RuntimeError(HOSTILE_MESSAGE)


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
    """The chain section lists every execution of the chain, each with its own labelled cursor and the execution it continues (R-ADM-12, R-ADM-126)."""
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
            # Labelled values: why it stopped, then its cursor (R-ADM-126).
            assert "interrupted: max_iterations after 1 iteration\ncursor: " in text
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


def test_chain_entries_link_the_execution_they_continue(live_url, page):
    """Each chain entry after the first links the execution it continues, and the link opens that execution (R-ADM-12)."""
    workflow_id, ids = _pager_chain()

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    items = page.locator("ol.geneva-chain > li")
    for index in range(1, 4):
        link = items.nth(index).locator(
            f'a[href$="/geneva/step-executions/{ids[index - 1]}"]'
        )
        assert link.count() == 1, f"chain entry {ids[index]} links nothing"
    items.nth(3).locator(f'a[href$="/geneva/step-executions/{ids[2]}"]').click()
    page.wait_for_url(f"**/geneva/step-executions/{ids[2]}")
    assert page.inner_text("pre.geneva-cursor") == _cursor_text(30)


#: The sentences of the three decisions, as describe_policy_decision writes them.
FLAKY_SENTENCES = [
    f"reattempt 1 of 2 in 30 s — class-level policy #1 for {__name__}.BrowserTimeout"
    " — not reported: no error reporter is configured (report: always)",
    f"reattempt 2 of 2 in 30 s — class-level policy #1 for {__name__}.BrowserTimeout"
    " — not reported: no error reporter is configured (report: always)",
    f"pause (terminal) — class-level policy #1 for {__name__}.BrowserTimeout"
    " — not reported: no error reporter is configured (report: always)",
]


def test_policy_sentence_shows_and_backtrace_opens_on_click(live_url, page):
    """Each failed execution shows its policy decision as a sentence; the backtrace is collapsed until clicked (R-ADM-12, R-PDR-01)."""
    workflow = BrowserFlaky.create(hero=new_user("flaky@example.com"))
    workflow_id = workflow.id
    for _ in range(3):
        with pytest.raises(BrowserTimeout):
            perform_next_step(workflow)
    db.session.remove()  # close the test session's transaction (SQLite write lock)
    rows = execution_rows(workflow_id)
    assert [(row["state"], row["outcome"]) for row in rows] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("failed", "failed"),
    ]
    decisions = [row["metadata"]["policy_decision"] for row in rows]
    assert [describe_policy_decision(d) for d in decisions] == FLAKY_SENTENCES

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    assert page.inner_text(".geneva-state") == "paused"
    for row, sentence in zip(rows, FLAKY_SENTENCES, strict=True):
        cell = page.locator(f'.geneva-timeline tr[data-execution-id="{row["id"]}"]')
        assert cell.locator(".geneva-policy").inner_text() == f"Policy: {sentence}"
        error = cell.locator(".geneva-error").inner_text()
        assert error.startswith(f"{__name__}.BrowserTimeout")

    last = page.locator(f'.geneva-timeline tr[data-execution-id="{rows[2]["id"]}"]')
    assert "the partner API timed out after 10 s" in (
        last.locator(".geneva-error").inner_text()
    )
    assert page.locator("details.geneva-backtrace").count() == 3
    assert page.locator("details.geneva-backtrace[open]").count() == 0
    backtrace = last.locator("details.geneva-backtrace")
    assert not backtrace.locator("pre").is_visible()
    backtrace.locator("summary").click()
    assert backtrace.locator("pre").is_visible()
    assert backtrace.get_attribute("open") is not None
    assert "in call_partner_api" in backtrace.locator("pre").inner_text()
    assert "raise BrowserTimeout(" in backtrace.locator("pre").inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "workflow_detail_failed.png"), full_page=True)
    assert page.geneva_dialogs == []


def _assert_escaped(page: Any, *visible: str) -> None:
    """No payload became an element or ran; ``visible`` texts show as text."""
    assert page.geneva_dialogs == []
    assert page.locator("img[onerror]").count() == 0
    scripts = "[...document.scripts].filter(s => s.textContent.includes('alert('))"
    assert page.evaluate(f"{scripts}.length") == 0
    body = page.inner_text("body")
    for text in visible:
        assert text in body
    content = page.content()
    assert SCRIPT not in content
    if visible:
        assert ESCAPED_SCRIPT in content
        assert ESCAPED_IMG in content


def test_hostile_cursor_hero_label_and_error_render_as_text(
    live_url, page_without_csp, monkeypatch
):
    """A cursor, a hero label and an error message holding <script> and <img onerror> show as text on every page; nothing runs, even with the CSP ignored (R-ADM-06, R-ADM-12, R-ADM-14)."""
    # The hero label is the hero's str() (R-ADM-12); let it be the stored email.
    monkeypatch.setattr(User, "__str__", lambda user: user.email)
    workflow = BrowserHostile.create(hero=new_user(HOSTILE_EMAIL))
    with pytest.raises(RuntimeError):
        perform_next_step(workflow)
    workflow_id = workflow.id
    db.session.remove()  # close the test session's transaction (SQLite write lock)
    (row,) = execution_rows(workflow_id)
    assert row["cursor"] == HOSTILE_CURSOR
    assert row["error_message"] == HOSTILE_MESSAGE
    page = page_without_csp
    cursor_text = json.dumps(HOSTILE_CURSOR, indent=2, sort_keys=True)

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    _assert_escaped(page, HOSTILE_EMAIL, cursor_text, HOSTILE_MESSAGE)
    assert HOSTILE_EMAIL in page.inner_text(".geneva-hero")
    assert page.inner_text("ol.geneva-chain pre.geneva-cursor") == cursor_text
    assert HOSTILE_MESSAGE in page.inner_text(".geneva-timeline .geneva-error")

    page.goto(f"{live_url}/geneva/step-executions/{row['id']}")
    _assert_escaped(page, cursor_text, HOSTILE_MESSAGE)
    assert page.inner_text("pre.geneva-cursor") == cursor_text
    assert page.inner_text("pre.geneva-error-message") == HOSTILE_MESSAGE

    page.goto(f"{live_url}/geneva/")
    _assert_escaped(page, HOSTILE_MESSAGE)

    page.goto(f"{live_url}/geneva/workflows/")
    assert page.locator(f'tr[data-workflow-id="{workflow_id}"]').count() == 1
    _assert_escaped(page)
