"""A parent and its children in a real browser (SPEC §25.5).

Open a parent's page, see its Children panel (R-CHD-61), follow a child's link
and its Parent link back, then "Act on all N children": the workflows list
filtered by ``parent`` and its "Cancel all matching" bulk action (R-CHD-62).
"""

from __future__ import annotations

import pytest

from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS
from tests.support.operator_children import OpsParent
from tests.support.operator_children import build_family
from tests.support.operator_children import waiting_execution_id
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser


def test_from_a_parent_to_a_child_and_back_then_cancel_its_children(
    live_url, page, geneva_jobs
):
    """R-CHD-61, R-CHD-62: the panel lists the children and the waiting
    execution; a child's Parent link leads back; the filtered list's bulk
    cancel cancels exactly the parent's children, which settle for it."""
    parent_id, child_ids = build_family(geneva_jobs)
    other_id, other_children = build_family(
        geneva_jobs, ["other"], email="other@example.com"
    )
    waiting = waiting_execution_id(parent_id)
    db.session.remove()  # close the test's transaction (SQLite write lock)

    page.goto(f"{live_url}/geneva/workflows/{parent_id}")
    page.wait_for_selector("#children")
    counts = " ".join(page.inner_text(".geneva-child-counts").split())
    assert counts == (
        f"Started 3, settled 0, failed 0. Execution {waiting} waits until 3 have "
        "settled."
    )
    assert "Step collect is waiting for 3 settled children (0 settled now)" in (
        page.inner_text(".geneva-waiting")
    )
    assert page.locator("tr[data-child-id]").count() == 3
    assert page.inner_text(".geneva-child-state") == "ready 3"

    page.click(f'tr[data-child-id="{child_ids[1]}"] a')
    page.wait_for_selector(".geneva-parent")
    assert page.url.endswith(f"/geneva/workflows/{child_ids[1]}")
    assert "key part-1" in " ".join(page.inner_text(".geneva-parent").split())
    page.click(".geneva-parent-link")
    page.wait_for_selector("#children")
    assert page.url.endswith(f"/geneva/workflows/{parent_id}")

    page.click(".geneva-act-on-children")
    page.wait_for_selector(".geneva-match-count:has-text('3 workflows match.')")
    assert page.url.endswith(f"/geneva/workflows/?parent={parent_id}")
    listed = page.locator("tr[data-workflow-id]").evaluate_all(
        "rows => rows.map(row => row.dataset.workflowId)"
    )
    assert sorted(map(int, listed)) == child_ids
    assert f"child of workflow {parent_id}" in page.inner_text(".geneva-filter-line")

    page.click('button[data-geneva-bulk-all="cancel"]')
    page.wait_for_selector('button[data-geneva-confirm="bulk-all-cancel"]')
    assert page.inner_text("h2") == "Cancel all 3 workflows matching the filter?"
    assert f"child of workflow {parent_id}" in page.inner_text(".geneva-filter-summary")
    page.click('button[data-geneva-confirm="bulk-all-cancel"]')
    page.wait_for_selector(".geneva-bulk-summary")
    assert (
        page.inner_text(".geneva-bulk-summary")
        == "Cancel all matching: 3 succeeded, 0 refused"
    )
    assert {workflow_row(i)["state"] for i in child_ids} == {"canceled"}
    assert workflow_row(parent_id)["state"] == "ready"
    assert workflow_row(other_id)["state"] == "ready"
    assert workflow_row(other_children[0])["state"] == "ready"
    counts = OpsParent.get(parent_id).child_counts
    db.session.remove()
    assert (counts.started, counts.settled, counts.failed) == (3, 3, 3)

    page.goto(f"{live_url}/geneva/workflows/{parent_id}")
    page.wait_for_selector("#children")
    assert page.inner_text(".geneva-child-state") == "canceled 3"
    assert page.geneva_dialogs == []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "children_panel.png"), full_page=True)
