"""Housekeeping and workflow signals: cleanup of their rows, parked executions never stuck (R-WSIG-63, R-WSIG-64)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.db.test_workflow_signals_schema import without_signals  # noqa: F401
from tests.support.common_workflows import EmptyOneStep
from tests.support.common_workflows import WaitsForGo
from tests.support.housekeeping import T0
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row

RETENTION = timedelta(days=30)


@pytest.fixture
def app_config():
    return {
        "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": RETENTION,
        "GENEVA_HOUSEKEEPING_BATCH_SIZE": 2,
        "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": timedelta(hours=1),
        "GENEVA_STUCK_SCHEDULED_THRESHOLD": timedelta(minutes=15),
    }


def _signal_count(workflow_id):
    count = db.session.execute(
        db.text("SELECT count(*) FROM geneva_drive_signals WHERE workflow_id = :id"),
        {"id": workflow_id},
    ).scalar()
    db.session.rollback()
    return count


def _with_signals(email, count):
    workflow = WaitsForGo.create(hero=make_user(email))
    for index in range(count):
        workflow.signal("other", {"n": index}, warn_unawaited=False)
    return workflow


def test_cleanup_deletes_the_signals_of_cleaned_up_workflows_in_batches(
    app, geneva_jobs
):
    """The signals of a deleted workflow go too, across batches; those of kept workflows stay (R-WSIG-63)."""
    with clock.frozen(T0) as frozen:
        old = _with_signals("old@example.com", 5)
        old.cancel()
        old_id = old.id
        ongoing = _with_signals("ongoing@example.com", 3)
        frozen.advance(RETENTION + timedelta(days=1))
        recent = _with_signals("recent@example.com", 1)
        recent.cancel()
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 1
    assert workflow_row(old_id) is None
    assert _signal_count(old_id) == 0
    assert _signal_count(ongoing.id) == 3
    assert _signal_count(recent.id) == 1


def test_cleanup_without_the_unit_works_unchanged(app, geneva_jobs, without_signals):  # noqa: F811
    """Without add_workflow_signals the cleanup deletes workflows and executions as before (R-WSIG-63, R-WSIG-04)."""

    with clock.frozen(T0) as frozen:
        workflow = EmptyOneStep.create(hero=make_user("plain@example.com"))
        workflow.cancel()
        frozen.advance(RETENTION + timedelta(days=1))
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 1
    left = db.session.execute(
        db.text("SELECT count(*) FROM geneva_drive_step_executions")
    ).scalar()
    db.session.rollback()
    assert left == 0


def test_a_parked_execution_is_never_stuck(app, geneva_jobs):
    """A waiting execution whose scheduled_for and started_at lie far beyond both thresholds is neither stuck-scheduled nor stuck-in-progress (R-WSIG-64)."""
    with clock.frozen(T0) as frozen:
        workflow = WaitsForGo.create(hero=make_user("parked@example.com"))
        perform_next_step(workflow)
        [parked] = execution_rows(workflow.id)
        assert parked["state"] == "waiting"
        update_execution(parked["id"], started_at=T0, scheduled_for=T0)
        frozen.advance(timedelta(days=3))
        summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 0
    assert summary["stuck_in_progress_recovered"] == 0
    [after] = execution_rows(workflow.id)
    assert (after["state"], after["outcome"]) == ("waiting", None)
    assert workflow_row(workflow.id)["state"] == "ready"
