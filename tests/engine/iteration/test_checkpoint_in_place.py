"""checkpoint() stores the cursor however the body changed it (R-IT-04, R-IT-10).

A body that sets a dict cursor once and then changes it in place
(``it.cursor["last_id"] = i``) before each ``checkpoint()`` must find that value
in the stored row, so that a successor continues after the last item instead of
starting over (issue 12, point 3). Runs on every database of the suite.
"""

from __future__ import annotations

import pytest

from flask_geneva import CursorTooLargeError
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows

ITEMS = 5
SEEN: list[int] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


class InPlaceCursor(geneva.Workflow):
    """Walks items 1..5 with a ``{"last_id": n}`` cursor changed in place."""

    @resumable_step
    def walk(self, it):
        if it.cursor is None:
            it.set({"last_id": 0})
        for item in range(it.cursor["last_id"] + 1, ITEMS + 1):
            SEEN.append(item)
            it.cursor["last_id"] = item
            it.checkpoint()

    @step
    def after(self):
        pass


def _walk_rows(workflow_id: object) -> list[object]:
    return [r for r in execution_rows(workflow_id) if r["step_name"] == "walk"]


def test_in_place_cursor_change_is_stored_at_each_checkpoint(user, geneva_jobs):
    """An interrupted chunk stores the in-place cursor; its successor goes on (R-IT-04, R-IT-10, R-RES-20)."""
    workflow = InPlaceCursor.create(hero=user)
    # Checkpoint 1 is set()'s own, then items 1 and 2: interrupted at the third.
    first = run_iterations(workflow, 3)
    assert first.state == "completed"
    assert first.outcome == "continued"
    assert SEEN == [1, 2]
    rows = _walk_rows(workflow.id)
    assert rows[0]["cursor"] == {"last_id": 2}
    assert rows[1]["state"] == "scheduled"
    assert rows[1]["cursor"] == {"last_id": 2}

    speedrun_workflow(workflow)
    assert SEEN == [1, 2, 3, 4, 5]
    rows = _walk_rows(workflow.id)
    assert rows[-1]["cursor"] == {"last_id": ITEMS}
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "continued"),
        ("completed", "success"),
    ]


class InPlaceGrowth(geneva.Workflow):
    """Grows a list cursor in place past the size limit."""

    @resumable_step
    def grow(self, it):
        it.set({"seen": []})
        for item in range(50):
            it.cursor["seen"].append("x" * 40 + str(item))
            it.checkpoint()


@pytest.mark.parametrize("app_config", [{"GENEVA_MAX_CURSOR_SIZE": 400}])
def test_in_place_change_over_the_size_limit_is_refused_at_checkpoint(
    user, geneva_jobs
):
    """An in-place change is size-checked like set(): the stored cursor keeps its last good value (R-IT-10, R-CUR-10)."""
    workflow = InPlaceGrowth.create(hero=user)
    with pytest.raises(CursorTooLargeError):
        speedrun_workflow(workflow)
    (row,) = [r for r in execution_rows(workflow.id) if r["step_name"] == "grow"]
    stored = row["cursor"]["seen"]
    assert 0 < len(stored) < 50
    assert stored == ["x" * 40 + str(item) for item in range(len(stored))]
