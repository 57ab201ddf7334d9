"""Recovery of stuck executions (R-HK-20..27, housekeeping_job_test)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine.operators.housekeeping import recover_stuck_scheduled
from flask_geneva.ext.app_state import current_state
from flask_geneva.policies.release_spread import release_offset
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingTwoSteps
from tests.support.housekeeping import T0
from tests.support.housekeeping import RecordingReporter
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

SPREAD = timedelta(seconds=5)

IN_PROGRESS_THRESHOLD = timedelta(hours=1)
SCHEDULED_THRESHOLD = timedelta(minutes=15)


class HkRecoverLater(geneva.Workflow):
    @step(wait=timedelta(hours=2))
    def later(self):
        pass


@pytest.fixture
def reporter():
    return RecordingReporter()


@pytest.fixture
def app_config(reporter):
    return {
        "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": IN_PROGRESS_THRESHOLD,
        "GENEVA_STUCK_SCHEDULED_THRESHOLD": SCHEDULED_THRESHOLD,
        "GENEVA_ERROR_REPORTER": reporter,
    }


def _ended(execution_id, state, outcome):
    """The stuck execution's row, which must have ended ``state``/``outcome``."""
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == (state, outcome)
    return row


def test_stuck_in_progress_is_reattempted(app, user, geneva_jobs):
    """A stuck in_progress execution ends completed/recovered and the step runs again
    (R-HK-20, R-HK-24, R-SE-03, R-SE-10).
    """
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = make_in_progress(workflow, T0)
        now = frozen.advance(IN_PROGRESS_THRESHOLD + timedelta(seconds=1))
        geneva_jobs.clear()
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    assert summary["stuck_scheduled_recovered"] == 0
    stuck = _ended(stuck_id, "completed", "recovered")
    assert stuck["completed_at"] == now
    assert stuck["finished_at"] == now
    row = workflow_row(workflow.id)
    assert row["state"] == "ready"
    assert row["current_step_name"] is None
    assert row["next_step_name"] == "first"
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("first", "scheduled"),
    ]
    # Spread over GENEVA_RELEASE_SPREAD (5 s) by the workflow's offset (R-SCH-20).
    assert rows[1]["scheduled_for"] == now + release_offset(workflow.id, SPREAD)
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [rows[1]["id"]]


def test_stuck_in_progress_is_canceled_with_cancel_action(app, user, geneva_jobs):
    """With GENEVA_STUCK_RECOVERY_ACTION="cancel" the execution ends canceled/recovered
    and the workflow canceled (R-HK-25).
    """
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = make_in_progress(workflow, T0)
        now = frozen.advance(IN_PROGRESS_THRESHOLD * 2)
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    stuck = _ended(stuck_id, "canceled", "recovered")
    assert stuck["canceled_at"] == now
    assert stuck["finished_at"] == now
    row = workflow_row(workflow.id)
    assert row["state"] == "canceled"
    assert row["transitioned_at"] == now
    assert len(execution_rows(workflow.id)) == 1


def test_stuck_scheduled_is_reattempted(app, user, geneva_jobs):
    """An execution overdue beyond the threshold is replaced by a fresh one (R-HK-20/24)."""
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = workflow.current_execution.id
        now = frozen.advance(SCHEDULED_THRESHOLD + timedelta(minutes=1))
        summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 1
    assert summary["stuck_in_progress_recovered"] == 0
    _ended(stuck_id, "completed", "recovered")
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("first", "scheduled"),
    ]
    # Spread over GENEVA_RELEASE_SPREAD (5 s) by the workflow's offset (R-SCH-20).
    assert rows[1]["scheduled_for"] == now + release_offset(workflow.id, SPREAD)
    speedrun_workflow(workflow)
    assert workflow.state == "finished"
    db.session.refresh(user)
    assert user.counter == 11


def test_stuck_scheduled_is_canceled_with_cancel_action(app, user, geneva_jobs):
    """The cancel action also applies to stuck scheduled executions (R-HK-25)."""
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = workflow.current_execution.id
        frozen.advance(timedelta(hours=1))
        summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 1
    _ended(stuck_id, "canceled", "recovered")
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_recent_and_future_executions_are_untouched(app, geneva_jobs):
    """Executions within the thresholds or due in the future are left alone (R-HK-20)."""
    with clock.frozen(T0) as frozen:
        running = CountingTwoSteps.create(hero=make_user("run@example.com"))
        overdue = CountingTwoSteps.create(hero=make_user("due@example.com"))
        future = HkRecoverLater.create(hero=make_user("later@example.com"))
        frozen.advance(timedelta(minutes=10))
        running_id = make_in_progress(running, clock.now())
        frozen.advance(timedelta(minutes=50))
        update_execution(
            overdue.current_execution.id,
            scheduled_for=clock.now() - timedelta(minutes=14),
        )
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 0
    assert summary["stuck_scheduled_recovered"] == 0
    assert execution_row(running_id)["state"] == "in_progress"
    for workflow in (overdue, future):
        [row] = execution_rows(workflow.id)
        assert (row["state"], row["outcome"]) == ("scheduled", None)


def test_failing_row_does_not_stop_the_run(app, geneva_jobs, reporter):
    """A row whose recovery raises is logged, reported, left as is and not counted;
    the other rows are recovered and the run ends, with batches of one (R-HK-21, R-HK-22).
    """
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 1
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        broken = CountingTwoSteps.create(hero=make_user("broken@example.com"))
        frozen.advance(timedelta(seconds=1))
        healthy = CountingTwoSteps.create(hero=make_user("ok@example.com"))
        broken_execution = broken.current_execution.id
        broken_id, healthy_id = broken.id, healthy.id
        # Its class was removed from the code: the step cannot be rescheduled.
        update_workflow(broken_id, type="HkRecoverRemovedClass")
        # As in a housekeeping process: no instance of the old class is loaded.
        db.session.expunge_all()
        frozen.advance(timedelta(hours=1))
        summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 1
    row = execution_row(broken_execution)
    assert (row["state"], row["outcome"]) == ("scheduled", None)
    assert workflow_row(broken_id)["state"] == "ready"
    assert [r["state"] for r in execution_rows(healthy_id)] == [
        "completed",
        "scheduled",
    ]
    [(error, context)] = reporter.calls
    assert type(error).__name__ == "StepNotDefinedError"
    assert context["geneva_drive"]["step_execution_id"] == broken_execution


def test_unknown_recovery_action_fails_each_row(app, user, geneva_jobs, reporter):
    """An unknown action raises ValueError per row, reported and not counted (R-HK-26)."""
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = workflow.current_execution.id
        frozen.advance(timedelta(hours=1))
        state = current_state()
        recovered = recover_stuck_scheduled(
            state.geneva.session, config=state.config, action="explode"
        )
    assert recovered == 0
    [(error, _)] = reporter.calls
    assert isinstance(error, ValueError)
    assert "Unknown stuck_recovery_action" in str(error)
    assert execution_row(stuck_id)["state"] == "scheduled"


def test_paused_workflow_keeps_its_overdue_execution(app, user, geneva_jobs):
    """A paused workflow's overdue scheduled execution is untouched and not counted
    (R-HK-27, R-EXT-01).
    """
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        preserved = workflow.current_execution.id
        workflow.pause()
        frozen.advance(timedelta(days=2))
        summary = run_housekeeping()
        assert summary["stuck_scheduled_recovered"] == 0
        row = execution_row(preserved)
        assert (row["state"], row["outcome"]) == ("scheduled", None)
        assert row["scheduled_for"] == T0
        assert workflow.resume().id == preserved


def test_paused_workflow_stuck_in_progress_is_recovered_without_scheduling(
    app, user, geneva_jobs
):
    """A paused workflow's stuck in_progress execution ends completed/recovered and
    nothing is scheduled (R-HK-27).
    """
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = make_in_progress(workflow, T0)
        update_workflow(workflow.id, state="paused", transitioned_at=T0)
        frozen.advance(timedelta(hours=2))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    _ended(stuck_id, "completed", "recovered")
    assert len(execution_rows(workflow.id)) == 1
    assert workflow_row(workflow.id)["state"] == "paused"


@pytest.mark.parametrize("workflow_state", ["finished", "canceled"])
def test_terminal_workflow_stuck_execution_is_canceled(
    app, user, geneva_jobs, workflow_state
):
    """A stuck execution of a finished/canceled workflow ends canceled/canceled and
    nothing is scheduled (R-HK-27).
    """
    with clock.frozen(T0) as frozen:
        workflow = CountingTwoSteps.create(hero=user)
        stuck_id = make_in_progress(workflow, T0)
        update_workflow(workflow.id, state=workflow_state, transitioned_at=T0)
        frozen.advance(timedelta(hours=2))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    _ended(stuck_id, "canceled", "canceled")
    assert len(execution_rows(workflow.id)) == 1
    assert workflow_row(workflow.id)["state"] == workflow_state


def test_many_rows_are_recovered_across_batches(app, geneva_jobs):
    """Every stuck row is recovered in one run whatever the batch size (R-HK-21)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 3
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflows = [
            CountingTwoSteps.create(hero=make_user(f"m{i}@example.com"))
            for i in range(7)
        ]
        for index, workflow in enumerate(workflows[:4]):
            # Same started_at for several rows: the keyset tie-break is the id.
            make_in_progress(workflow, T0 + timedelta(seconds=index // 2))
        frozen.advance(timedelta(hours=2))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 4
    assert summary["stuck_scheduled_recovered"] == 3
    for workflow in workflows:
        rows = execution_rows(workflow.id)
        assert [(r["state"], r["outcome"]) for r in rows] == [
            ("completed", "recovered"),
            ("scheduled", None),
        ]


def test_cleanup_and_recovery_in_one_run(app, geneva_jobs):
    """One run cleans up and recovers, and the summary has all four keys (R-HK-01)."""
    app.config["GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER"] = timedelta(days=1)
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        done = CountingTwoSteps.create(hero=make_user("done@example.com"))
        speedrun_workflow(done)
        done_id = done.id
        frozen.advance(timedelta(days=2))
        stuck = CountingTwoSteps.create(hero=make_user("stuck@example.com"))
        make_in_progress(stuck, clock.now())
        frozen.advance(timedelta(hours=2))
        summary = geneva.run_housekeeping()
    assert summary == {
        "workflows_cleaned_up": 1,
        "step_executions_cleaned_up": 2,
        "stuck_in_progress_recovered": 1,
        "stuck_scheduled_recovered": 0,
    }
    assert workflow_row(done_id) is None
