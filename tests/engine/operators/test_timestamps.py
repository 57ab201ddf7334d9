"""Threshold comparisons at the boundary, on every backend incl. SQLite (R-HK-02/11/20)."""

from __future__ import annotations

from datetime import timedelta
from datetime import timezone

import pytest

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.testing import speedrun_workflow
from tests.support.common_workflows import EmptyOneStep
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_row
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

THRESHOLD = timedelta(hours=1)
PLUS_FIVE = timezone(timedelta(hours=5))
MICROSECOND = timedelta(microseconds=1)


@pytest.fixture
def app_config():
    return {
        "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": THRESHOLD,
        "GENEVA_STUCK_SCHEDULED_THRESHOLD": THRESHOLD,
        "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": THRESHOLD,
    }


def test_in_progress_boundary_same_instant_and_one_microsecond(app, geneva_jobs):
    """started_at equal to the cutoff is not stuck; one microsecond earlier is (R-HK-20)."""
    now = T0 + timedelta(hours=3, microseconds=500_001)
    cutoff = now - THRESHOLD
    with clock.frozen(T0):
        at_cutoff = EmptyOneStep.create(hero=make_user("eq@example.com"))
        before = EmptyOneStep.create(hero=make_user("lt@example.com"))
        at_cutoff_id = make_in_progress(at_cutoff, cutoff)
        before_id = make_in_progress(before, cutoff - MICROSECOND)
    with clock.frozen(now):
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    assert execution_row(at_cutoff_id)["state"] == "in_progress"
    assert execution_row(before_id)["outcome"] == "recovered"


def test_scheduled_boundary_with_timezone_aware_values(app, geneva_jobs):
    """Aware values in another zone compare as UTC instants at the boundary (R-HK-20)."""
    now = T0 + timedelta(hours=2)
    cutoff = now - THRESHOLD
    with clock.frozen(T0):
        at_cutoff = EmptyOneStep.create(hero=make_user("eq@example.com"))
        before = EmptyOneStep.create(hero=make_user("lt@example.com"))
        at_cutoff_id = at_cutoff.current_execution.id
        before_id = before.current_execution.id
        update_execution(at_cutoff_id, scheduled_for=cutoff.astimezone(PLUS_FIVE))
        update_execution(
            before_id, scheduled_for=(cutoff - MICROSECOND).astimezone(PLUS_FIVE)
        )
    with clock.frozen(now.astimezone(PLUS_FIVE)):
        summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 1
    assert execution_row(at_cutoff_id)["outcome"] is None
    assert execution_row(before_id)["outcome"] == "recovered"


def test_cleanup_boundary_same_instant_and_one_microsecond(app, geneva_jobs):
    """transitioned_at equal to the cutoff is kept; a microsecond older is deleted
    (R-HK-11).
    """
    now = T0 + timedelta(days=1, microseconds=7)
    cutoff = now - THRESHOLD
    with clock.frozen(T0):
        kept = EmptyOneStep.create(hero=make_user("eq@example.com"))
        gone = EmptyOneStep.create(hero=make_user("lt@example.com"))
        speedrun_workflow(kept)
        speedrun_workflow(gone)
        kept_id, gone_id = kept.id, gone.id
        update_workflow(kept_id, transitioned_at=cutoff)
        update_workflow(gone_id, transitioned_at=cutoff - MICROSECOND)
    with clock.frozen(now):
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 1
    assert workflow_row(kept_id) is not None
    assert workflow_row(gone_id) is None
