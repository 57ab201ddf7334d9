"""Housekeeping continues stuck resumable executions from their cursor (R-HK-24)."""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import resumable_step
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows

PROCESSED: list[str] = []


class HkResumableLetters(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over(["a", "b", "c"]):
            PROCESSED.append(item)

    @step
    def done(self):
        pass


def test_stuck_in_progress_resumable_continues_from_its_cursor(user, geneva_jobs):
    """A stuck resumable execution is recovered by a successor carrying its cursor, so
    only the remaining item is processed (R-HK-24, R-SCH-08, §17 resumable scenario).
    """
    PROCESSED.clear()
    with clock.frozen(T0) as frozen:
        workflow = HkResumableLetters.create(hero=user)
        first = run_iterations(workflow, 2)
        assert PROCESSED == ["a", "b"]
        stuck_id = make_in_progress(workflow, clock.now())
        assert execution_row(stuck_id)["cursor"] == 2
        frozen.advance(timedelta(hours=2))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    stuck = execution_row(stuck_id)
    assert (stuck["state"], stuck["outcome"]) == ("completed", "recovered")
    successor = execution_rows(workflow.id)[-1]
    assert successor["state"] == "scheduled"
    assert successor["continues_from_id"] == stuck_id
    assert successor["cursor"] == 2
    assert first.id != stuck_id
    speedrun_workflow(workflow)
    assert workflow.state == "finished"
    assert PROCESSED == ["a", "b", "c"]


def test_stuck_scheduled_resumable_successor_keeps_the_cursor(user, geneva_jobs):
    """A stuck scheduled successor is replaced by a successor with the same cursor
    (R-HK-24, Q-05).
    """
    PROCESSED.clear()
    with clock.frozen(T0) as frozen:
        workflow = HkResumableLetters.create(hero=user)
        run_iterations(workflow, 1)
        stuck_id = workflow.current_execution.id
        frozen.advance(timedelta(hours=1))
        summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 1
    successor = execution_rows(workflow.id)[-1]
    assert successor["continues_from_id"] == stuck_id
    assert successor["cursor"] == 1
    speedrun_workflow(workflow)
    assert PROCESSED == ["a", "b", "c"]
