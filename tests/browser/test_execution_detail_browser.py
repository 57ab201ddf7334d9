"""The step execution detail page in a real browser: expand controls, escaping (R-ADM-14, R-ADM-06)."""

from __future__ import annotations

import pytest

from tests.admin.execution_support import SCRIPT
from tests.admin.execution_support import detail_url
from tests.admin.execution_support import finished_resumable_chain
from tests.admin.support import failed_workflow
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

pytestmark = pytest.mark.browser


def test_backtrace_and_long_cursor_expand_and_no_script_runs(
    live_url, page_without_csp
):
    """The backtrace and a cursor over 2 KB open on click (no JavaScript of ours); stored <script> text never runs (R-ADM-14, R-ADM-06)."""
    page = page_without_csp  # no dialog must fire even without the CSP
    failed_id = execution_rows(failed_workflow().id)[0]["id"]
    _, rows = finished_resumable_chain()
    cursor_id = rows[0]["id"]
    update_execution(cursor_id, cursor={"position": SCRIPT, "pad": "x" * 3000})
    db.session.remove()  # close the test session's transaction (SQLite write lock)

    page.goto(f"{live_url}{detail_url(failed_id)}")
    assert "<script>alert('boom')</script>" in page.inner_text(".geneva-error")
    assert not page.is_visible(".geneva-backtrace pre")
    page.click(".geneva-backtrace summary")
    assert page.is_visible(".geneva-backtrace pre")
    assert "in explode" in page.inner_text(".geneva-backtrace pre")

    page.goto(f"{live_url}{detail_url(cursor_id)}")
    assert page.is_visible(".geneva-cursor-preview")
    assert not page.is_visible("details.geneva-cursor pre")
    page.click("details.geneva-cursor summary")
    full = page.inner_text("details.geneva-cursor pre")
    assert SCRIPT in full
    assert "x" * 3000 in full
    assert page.geneva_dialogs == []
