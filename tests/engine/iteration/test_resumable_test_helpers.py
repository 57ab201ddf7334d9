"""Test helpers for resumable steps (R-TH-02, R-TH-05, R-TH-08, R-TH-09)."""

from __future__ import annotations

import pytest

from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.testing import assert_cursor
from flask_geneva.testing import assert_step_has_successor
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_current_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row

SEEN: list[object] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


class Ten(geneva.Workflow):
    @resumable_step(max_iterations=3)
    def walk(self, it):
        for item in it.iterate_over(range(10)):
            SEEN.append(item)

    @step
    def after(self):
        SEEN.append("after")


def test_run_iterations_runs_count_checkpoints_and_chains(user, geneva_jobs):
    """run_iterations interrupts after count checkpoints and returns the continued execution (R-TH-05)."""
    workflow = Ten.create(hero=user)
    execution = run_iterations(workflow, 4)
    assert (execution.state, execution.outcome) == ("completed", "continued")
    assert execution.cursor_value == 4
    assert SEEN == [0, 1, 2, 3]
    assert_cursor(workflow, 4)
    assert_step_has_successor(workflow, "walk")
    again = run_iterations(workflow, 2)
    assert again.continues_from_id == execution.id
    assert SEEN == [0, 1, 2, 3, 4, 5]
    assert_cursor(workflow, 6)


def test_run_iterations_without_current_execution_raises(user, geneva_jobs):
    """run_iterations needs a current execution (R-TH-05)."""
    workflow = Ten.create(hero=user)
    speedrun_workflow(workflow)
    with pytest.raises(RuntimeError, match="No current step execution to run"):
        run_iterations(workflow, 1)


def test_assert_cursor_reports_expected_and_actual(user, geneva_jobs):
    """assert_cursor compares the current execution's cursor (R-TH-08)."""
    workflow = Ten.create(hero=user)
    assert_cursor(workflow, None)
    run_iterations(workflow, 2)
    with pytest.raises(AssertionError, match=r"Expected cursor 5, got 2"):
        assert_cursor(workflow, 5)
    speedrun_workflow(workflow)
    assert_cursor(workflow, None)


def test_assert_step_has_successor_messages(user, geneva_jobs):
    """assert_step_has_successor names each failure (R-TH-09)."""
    workflow = Ten.create(hero=user)
    with pytest.raises(
        AssertionError, match="Expected completed execution for step walk"
    ):
        assert_step_has_successor(workflow, "walk")
    run_iterations(workflow, 1)
    assert_step_has_successor(workflow, "walk")
    successor = execution_rows(workflow.id)[-1]
    update_execution(successor["id"], state="in_progress")
    with pytest.raises(
        AssertionError, match="Expected successor to be scheduled, but was in_progress"
    ):
        assert_step_has_successor(workflow, "walk")
    update_execution(successor["id"], state="scheduled")
    speedrun_workflow(workflow)
    with pytest.raises(
        AssertionError,
        match="Expected successor execution for step walk, but none found",
    ):
        assert_step_has_successor(workflow, "walk")


def test_assert_step_has_successor_uses_the_latest_completed_execution(
    user, geneva_jobs
):
    """The most recent completed execution decides, not an arbitrary one (R-TH-09, BTR-20)."""
    workflow = Ten.create(hero=user)
    run_iterations(workflow, 1)
    run_iterations(workflow, 1)
    speedrun_current_step(workflow)
    with pytest.raises(AssertionError, match="none found"):
        assert_step_has_successor(workflow, "walk")


def test_speedrun_current_step_follows_the_chain_and_stops_before_next_step(
    user, geneva_jobs
):
    """speedrun_current_step runs the whole chain but never the next step (R-TH-02)."""
    workflow = Ten.create(hero=user)
    run_iterations(workflow, 1)
    final = speedrun_current_step(workflow)
    assert (final.step_name, final.state, final.outcome) == (
        "walk",
        "completed",
        "success",
    )
    assert list(range(10)) == SEEN
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"]) == ("ready", "after")
    assert execution_rows(workflow.id)[-1]["state"] == "scheduled"


def test_speedrun_current_step_without_current_execution_returns_none(
    user, geneva_jobs
):
    """No current execution → None (R-TH-02)."""
    workflow = Ten.create(hero=user)
    speedrun_workflow(workflow)
    assert speedrun_current_step(workflow) is None


class Endless(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        it.skip_to((it.cursor or 0) + 1)


def test_speedrun_current_step_gives_up_after_max_executions(user, geneva_jobs):
    """An endless chain raises RuntimeError naming the step and max_executions (R-TH-02)."""
    workflow = Endless.create(hero=user)
    with pytest.raises(RuntimeError, match=r"'walk'.*max_executions=5"):
        speedrun_current_step(workflow, max_executions=5)
    assert len(execution_rows(workflow.id)) == 6


def test_speedrun_workflow_runs_resumable_steps_to_the_end(user, geneva_jobs):
    """speedrun_workflow ignores max_iterations and finishes the workflow (R-TH-01, R-INT-01)."""
    workflow = Ten.create(hero=user)
    speedrun_workflow(workflow)
    assert [*range(10), "after"] == SEEN
    assert [r["outcome"] for r in execution_rows(workflow.id)] == [
        "success",
        "success",
    ]
