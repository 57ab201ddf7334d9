"""Cleanup of old finished and canceled workflows (R-HK-10..13, housekeeping_job_test)."""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import geneva
from tests.support.housekeeping import RETENTION
from tests.support.housekeeping import T0
from tests.support.housekeeping import finished_workflow
from tests.support.housekeeping import retention_settings  # noqa: F401 - "app_config"
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


class HkCleanupWaiting(geneva.Workflow):
    @step(wait=timedelta(days=365))
    def later(self):
        pass


def test_cleanup_disabled_when_retention_is_none(app, geneva_jobs):
    """With GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER None nothing is deleted (R-HK-10)."""
    app.config["GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER"] = None
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflow_id = finished_workflow("a@example.com")
        frozen.advance(timedelta(days=400))
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 0
    assert summary["step_executions_cleaned_up"] == 0
    assert workflow_row(workflow_id) is not None
    assert len(execution_rows(workflow_id)) == 2


def test_deletes_old_terminal_workflows_and_keeps_the_rest(app, geneva_jobs):
    """Old finished/canceled rows go with their executions; recent, ongoing, old paused
    and NULL-transitioned rows stay (R-HK-11, R-HK-12).
    """
    with clock.frozen(T0) as frozen:
        old_finished = finished_workflow("f@example.com")
        old_canceled = HkCleanupWaiting.create(hero=make_user("c@example.com"))
        old_canceled.cancel()
        old_canceled_id = old_canceled.id
        old_paused = HkCleanupWaiting.create(hero=make_user("p@example.com"))
        old_paused.pause()
        old_ready = HkCleanupWaiting.create(hero=make_user("r@example.com"))
        no_timestamp = finished_workflow("n@example.com")
        update_workflow(no_timestamp, transitioned_at=None)
        frozen.advance(RETENTION + timedelta(days=1))
        recent_finished = finished_workflow("recent@example.com")
        summary = run_housekeeping()

    assert summary["workflows_cleaned_up"] == 2
    assert summary["step_executions_cleaned_up"] == 3
    assert workflow_row(old_finished) is None
    assert execution_rows(old_finished) == []
    assert workflow_row(old_canceled_id) is None
    assert execution_rows(old_canceled_id) == []
    for kept in (old_paused.id, old_ready.id, no_timestamp, recent_finished):
        assert workflow_row(kept) is not None
        assert execution_rows(kept) != []
    assert count_workflows() == 4


def test_deletes_every_eligible_row_across_batches(app, geneva_jobs):
    """All eligible rows are deleted in one run whatever the batch size (R-HK-12/13)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        ids = [finished_workflow(f"b{i}@example.com") for i in range(5)]
        frozen.advance(RETENTION + timedelta(seconds=1))
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 5
    assert summary["step_executions_cleaned_up"] == 10
    assert all(workflow_row(workflow_id) is None for workflow_id in ids)
    assert count_workflows() == 0


def test_exact_batch_multiple_deletes_everything(app, geneva_jobs):
    """A count that is a multiple of the batch size ends after an empty batch (R-HK-12)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        for i in range(2):
            finished_workflow(f"m{i}@example.com")
        frozen.advance(RETENTION + timedelta(seconds=1))
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 2
    assert summary["step_executions_cleaned_up"] == 4
    assert count_workflows() == 0
