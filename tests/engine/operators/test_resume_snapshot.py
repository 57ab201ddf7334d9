"""resume() finds the pause marker a finalize committed after the operator's
snapshot (R-EXT-22, MariaDB's REPEATABLE READ).

The operator loads the workflow (its transaction's snapshot starts there), then a
worker's resumable step checkpoints with ``skip_to`` while another operator
pauses the workflow, and finalize commits the ``workflow_paused`` marker. The
first operator's ``resume()`` must continue the chain from that marker's cursor;
a plain SELECT read the older snapshot, found no marker, and started the step
over from an empty cursor (a checkpointed iteration ran twice).
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_geneva import Executor
from flask_geneva import resumable_step
from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.innodb_locks import BOTH_ISOLATION_LEVELS
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import in_other_thread
from tests.support.workflow import start_without_jobs

pytestmark = pytest.mark.backends("mysql", "postgresql")

RUNS: list[Any] = []
PAUSE: dict[str, Any] = {}


class SnapshotWalk(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        cursor = it.cursor or 0
        RUNS.append(cursor)
        if cursor == 0:
            # An operator pauses while the body runs (R-EXE-42).
            externally(self.id, "pause", via="api")
            it.skip_to(1)

    @step
    def tail(self):
        RUNS.append("tail")


@BOTH_ISOLATION_LEVELS
def test_resume_continues_from_a_marker_committed_after_its_snapshot(
    app, user, geneva_jobs
):
    """The marker committed after the operator's first read is found: the
    successor carries cursor 1 and iteration 0 never runs again (R-EXT-22 a,
    R-EXE-42)."""
    RUNS.clear()
    workflow_id, execution_id = start_without_jobs(SnapshotWalk, user, geneva_jobs)
    workflow = geneva.Workflow.get(workflow_id)  # the snapshot starts here
    assert workflow.state == "ready"
    in_other_thread(lambda: Executor.execute(execution_id))
    marker = [r for r in execution_rows(workflow_id) if r["outcome"]]
    assert [(r["state"], r["outcome"]) for r in marker] == [
        ("completed", "workflow_paused")
    ]
    resumed = workflow.resume(via="api")
    assert resumed.continues_from_id == execution_id
    resumed_id = resumed.id
    db.session.remove()
    Executor.execute(resumed_id)
    assert RUNS == [0, 1]
