"""A resumable step's successor delivered while its workflow is paused (R-EXE-12).

The successor carries the cursor its predecessor checkpointed (R-SCH-08). It was
published when it was scheduled, so its task can arrive after an operator paused
the workflow; Phase 1 then cancels it (R-EXE-12). resume() must go on from that
cursor: the predecessor's iterations were committed and must never run again.
Found by h34 while racing operators against R-EXE-79's merged INSERT (the walk
race of test_merged_insert_races.py hit it on SQLite); it is independent of the
merge and failed on every backend without threads before R-EXT-22 (c).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import workflow_row

#: The cursor each run of ``walk`` started from.
STARTS: list[Any] = []
_LOCK = threading.Lock()


class PausedSuccessorWalk(geneva.Workflow):
    @step
    def a(self):
        pass

    @resumable_step
    def walk(self, it):
        cursor = it.cursor or 0
        with _LOCK:
            STARTS.append(cursor)
        if cursor < 2:
            it.skip_to(cursor + 1)


def _scheduled(workflow_id: Any) -> Any:
    (due,) = [r["id"] for r in execution_rows(workflow_id) if r["state"] == "scheduled"]
    return due


@pytest.mark.parametrize(
    ("rewind", "starts"),
    [(False, [0, 1, 2]), (True, [0, 0, 1, 2])],
    ids=["resume", "rewind"],
)
def test_resume_continues_a_successor_canceled_while_paused(
    app, user, geneva_jobs, rewind, starts
):
    """Pause between a successor's publication and its delivery, deliver it (it is
    canceled, R-EXE-12), resume: walk goes on from cursor 1, never from the start
    (R-EXT-22 c, R-SCH-08, R-RES-20). A rewind resume starts it over instead.
    """
    STARTS.clear()
    workflow_id = PausedSuccessorWalk.create(hero=user).id
    db.session.remove()
    perform_step_execution(_scheduled(workflow_id))  # a
    perform_step_execution(_scheduled(workflow_id))  # walk from 0: skip_to(1)
    successor = _scheduled(workflow_id)
    assert STARTS == [0]
    geneva.Workflow.get(workflow_id).pause()
    db.session.remove()
    perform_step_execution(successor)  # its task, published before the pause
    db.session.remove()
    rows = {r["id"]: r for r in execution_rows(workflow_id)}
    assert (rows[successor]["state"], rows[successor]["cursor"]) == ("canceled", 1)
    geneva.Workflow.get(workflow_id).resume(rewind=rewind)
    db.session.remove()
    for _ in range(5):
        if workflow_row(workflow_id)["state"] != "ready":
            break
        perform_step_execution(_scheduled(workflow_id))
        db.session.remove()
    assert workflow_row(workflow_id)["state"] == "finished"
    assert starts == STARTS
    walks = [r for r in execution_rows(workflow_id) if r["step_name"] == "walk"]
    # The new chain continues from the canceled successor (R-SCH-08).
    assert walks[2]["continues_from_id"] == successor


#: Step names in the order their bodies ran.
LAST_STEP_RUNS: list[str] = []


class PausedDuringLastStep(geneva.Workflow):
    @step
    def first(self):
        LAST_STEP_RUNS.append("first")

    @step
    def last(self):
        LAST_STEP_RUNS.append("last")
        externally(self.id, "pause")


@pytest.mark.parametrize("via", ["api", "admin", "cli"])
def test_skip_after_the_last_step_completed_while_paused_finishes(
    app, user, geneva_jobs, via
):
    """The last step completed under an external pause leaves no current or next
    step (R-EXE-42a); skip() then finishes the workflow as resume() would, and
    never schedules the first step again (R-EXT-04, R-EXT-05).
    """
    LAST_STEP_RUNS.clear()
    workflow_id = PausedDuringLastStep.create(hero=user).id
    db.session.remove()
    perform_step_execution(_scheduled(workflow_id))  # first, then last inline
    row = workflow_row(workflow_id)
    assert (row["state"], row["current_step_name"], row["next_step_name"]) == (
        "paused",
        None,
        None,
    )
    geneva.Workflow.get(workflow_id).skip(via=via)
    db.session.remove()
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow_id)] == [
        ("first", "completed"),
        ("last", "completed"),
    ]
    assert LAST_STEP_RUNS == ["first", "last"]
    actions = workflow_row(workflow_id)["metadata"]["operator_actions"]
    assert [(a["action"], a["to_state"]) for a in actions][-1] == ("skip", "finished")
