"""A first end-to-end run through the executor."""

from __future__ import annotations

from flask_geneva.testing import speedrun_workflow
from tests.support.common_workflows import CountingTwoSteps


def test_workflow_runs_to_finished(user, geneva_jobs):
    """A two-step workflow runs both steps and finishes (R-EXE-44, R-SCH-06)."""
    workflow = CountingTwoSteps.create(hero=user)
    assert workflow.state == "ready"
    assert workflow.next_step_name == "first"
    assert len(geneva_jobs.enqueued) == 1
    speedrun_workflow(workflow)
    assert workflow.state == "finished"
    assert user.counter == 11
    assert [e.outcome for e in workflow.execution_history] == ["success", "success"]
