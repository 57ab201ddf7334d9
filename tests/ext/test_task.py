"""The housekeeping Celery task and the beat entry (R-HK-01, SPEC §15.7)."""

from __future__ import annotations

from datetime import timedelta

from celery import Celery

from flask_geneva import beat_schedule
from flask_geneva.core import clock
from flask_geneva.ext.tasks import HOUSEKEEPING_TASK
from flask_geneva.ext.tasks import register_tasks
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyOneStep
from tests.support.housekeeping import T0
from tests.support.workflow import execution_rows


def test_task_runs_housekeeping_and_returns_the_summary(app, user, geneva_jobs):
    """flask_geneva.housekeeping runs a full pass and returns its summary (R-HK-01)."""
    celery = Celery("housekeeping-task-test", set_as_current=False)
    register_tasks(celery, geneva=geneva, app=app)
    with clock.frozen(T0) as frozen:
        workflow = EmptyOneStep.create(hero=user)
        frozen.advance(timedelta(hours=1))
        summary = celery.tasks[HOUSEKEEPING_TASK]()
    assert summary["stuck_scheduled_recovered"] == 1
    assert sorted(summary) == [
        "step_executions_cleaned_up",
        "stuck_in_progress_recovered",
        "stuck_scheduled_recovered",
        "workflows_cleaned_up",
    ]
    assert [r["outcome"] for r in execution_rows(workflow.id)] == ["recovered", None]


def test_beat_schedule_runs_housekeeping_every_30_minutes():
    """beat_schedule() has a housekeeping entry, every 30 minutes by default (§11)."""
    entry = beat_schedule()["flask-geneva-housekeeping"]
    assert entry == {"task": "flask_geneva.housekeeping", "schedule": 1800.0}
    custom = beat_schedule(housekeeping_interval_seconds=60)
    assert custom["flask-geneva-housekeeping"]["schedule"] == 60.0
