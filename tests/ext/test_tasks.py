"""The perform_step task logic (R-JOB-20..23), run in-process without a broker."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from flask_geneva import step
from flask_geneva.ext.tasks import beat_schedule
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyOneStep
from tests.support.refusals import assert_clear_refusal


class TasksTwoSteps(geneva.Workflow):
    default_job_options = {"queue": "workflows", "priority": 3}

    @step
    def first(self):
        self.hero.counter += 1

    @step(job_options={"queue": "critical"})
    def second(self):
        self.hero.counter += 10


@pytest.fixture
def app_config():
    return {"GENEVA_FIND_DELAY": 0.0}


def _executions():
    """(id, state, updated_at) of every stored execution."""
    return db.session.execute(
        sa.select(
            geneva.StepExecution.id,
            geneva.StepExecution.state,
            geneva.StepExecution.updated_at,
        ).order_by(geneva.StepExecution.id)
    ).all()


def test_task_runs_a_scheduled_execution(user, geneva_jobs):
    """The task runs the execution it names and the next step is published (R-JOB-21)."""
    workflow = TasksTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    perform_step_execution(execution_id)
    db.session.expire_all()
    assert user.counter == 1
    assert db.session.get(geneva.StepExecution, execution_id).state == "completed"
    published = geneva_jobs.enqueued[-1]
    assert published.task_name == "flask_geneva.perform_step"
    assert published.step_execution_id == workflow.current_execution.id


def test_unknown_or_missing_id_is_a_logged_no_op(app, caplog):
    """An unknown id or None logs a warning and returns after the retries (R-JOB-20)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    perform_step_execution(987654)
    perform_step_execution(None)
    messages = [r.getMessage() for r in caplog.records]
    assert any("987654" in m and "not found" in m for m in messages)
    assert any("None" in m and "not found" in m for m in messages)


def test_lookup_is_retried_find_attempts_times(app, monkeypatch):
    """The lookup is tried GENEVA_FIND_ATTEMPTS times, sleeping in between (R-JOB-20)."""
    app.config["GENEVA_FIND_ATTEMPTS"] = 3
    app.config["GENEVA_FIND_DELAY"] = 0.25
    geneva.reload_settings(app)
    sleeps: list[float] = []
    monkeypatch.setattr(
        "flask_geneva.engine.executor.prepare.time.sleep", sleeps.append
    )
    perform_step_execution(424242)
    assert sleeps == [0.25, 0.25]


def test_completed_execution_is_not_run_again(user, geneva_jobs):
    """A duplicate delivery of a completed execution changes nothing (R-JOB-22, R-EXE-11)."""
    workflow = TasksTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    perform_step_execution(execution_id)
    db.session.expire_all()
    before = _executions()
    perform_step_execution(execution_id)
    db.session.expire_all()
    after = _executions()
    assert before == after
    assert user.counter == 1


def test_job_options_reach_the_publication(user, geneva_jobs):
    """Class job options apply to every step; step options override them (R-JOB-02/23)."""
    workflow = TasksTwoSteps.create(hero=user)
    first = geneva_jobs.enqueued[-1]
    assert (first.queue, first.priority) == ("workflows", 3)
    perform_step_execution(workflow.current_execution.id)
    second = geneva_jobs.enqueued[-1]
    assert (second.queue, second.priority) == ("critical", 3)


def test_default_queue_setting_applies_without_job_options(app, user, geneva_jobs):
    """GENEVA_DEFAULT_QUEUE is used when no job option names a queue (R-JOB-23)."""
    app.config["GENEVA_DEFAULT_QUEUE"] = "geneva"
    geneva.reload_settings(app)

    EmptyOneStep.create(hero=user)
    assert geneva_jobs.enqueued[-1].queue == "geneva"


def test_celery_defaults_recommend_late_acks_and_prefetch_one():
    """celery_defaults() returns the documented worker settings (R-DSP-06, R-JOB-22)."""
    from flask_geneva import celery_defaults

    settings = celery_defaults(visibility_timeout_seconds=7200)
    assert settings["task_acks_late"] is True
    assert settings["task_reject_on_worker_lost"] is True
    assert settings["worker_prefetch_multiplier"] == 1
    assert settings["broker_transport_options"] == {
        "visibility_timeout": 7200,
        "socket_timeout": 1.25,
        "socket_connect_timeout": 1.25,
    }
    with pytest.raises(ValueError, match="positive int, got 0"):
        celery_defaults(visibility_timeout_seconds=0)


def test_celery_defaults_bound_broker_operations_by_the_publish_timeout():
    """celery_defaults() gives the broker timeouts a quarter of the publish timeout each, so one publication with its retry stays within it (issue 14)."""
    from flask_geneva import celery_defaults

    settings = celery_defaults(publish_timeout_seconds=4)
    assert settings["broker_connection_timeout"] == 1.0
    assert settings["broker_transport_options"]["socket_timeout"] == 1.0
    assert settings["broker_transport_options"]["socket_connect_timeout"] == 1.0
    for wrong in (0, -1, "5", True):
        with pytest.raises(
            ValueError, match="publish_timeout_seconds must be a positive"
        ):
            celery_defaults(publish_timeout_seconds=wrong)


def test_celery_defaults_merge_into_the_apps_transport_options():
    """celery_defaults(celery) keeps the app's own broker_transport_options keys
    and sets flask_geneva's three, so conf.update no longer drops a key prefix or
    a Sentinel master name (R-DSP-09)."""
    from celery import Celery

    from flask_geneva import celery_defaults

    celery = Celery("merge-defaults")
    own = {
        "global_keyprefix": "app:",
        "master_name": "mymaster",
        "visibility_timeout": 60,
    }
    celery.conf.broker_transport_options = own
    celery.conf.update(celery_defaults(celery, publish_timeout_seconds=4))
    assert celery.conf.broker_transport_options == {
        "global_keyprefix": "app:",
        "master_name": "mymaster",
        "visibility_timeout": 3600,
        "socket_timeout": 1.0,
        "socket_connect_timeout": 1.0,
    }
    assert celery.conf.task_acks_late is True
    # The app's own mapping is replaced by conf.update, not changed in place.
    assert own["visibility_timeout"] == 60
    assert celery_defaults(Celery("no-options"))["broker_transport_options"] == {
        "visibility_timeout": 3600,
        "socket_timeout": 1.25,
        "socket_connect_timeout": 1.25,
    }
    with pytest.raises(TypeError, match=r"celery must be a Celery app.*got 'redis://'"):
        celery_defaults("redis://")


def test_apply_celery_defaults_keeps_what_the_host_set():
    """apply_celery_defaults() fills only settings left at Celery's default; the host's transport options win (issue 14)."""
    from celery import Celery

    from flask_geneva.ext.tasks import apply_celery_defaults

    celery = Celery("apply-defaults")
    celery.conf.update(
        worker_prefetch_multiplier=8,
        broker_transport_options={"visibility_timeout": 99, "socket_timeout": 0.5},
    )
    apply_celery_defaults(celery, publish_timeout_seconds=8)
    assert celery.conf.worker_prefetch_multiplier == 8
    assert celery.conf.task_acks_late is True
    assert celery.conf.broker_connection_timeout == 2.0
    assert celery.conf.broker_transport_options == {
        "visibility_timeout": 99,
        "socket_timeout": 0.5,
        "socket_connect_timeout": 2.0,
    }


def test_beat_schedule_runs_the_dispatcher():
    """beat_schedule() has the dispatch_due entry at the given interval (R-DSP-02)."""
    from flask_geneva import beat_schedule

    schedule = beat_schedule(dispatch_interval_seconds=30)
    assert schedule == {
        "flask-geneva-dispatch-due": {
            "task": "flask_geneva.dispatch_due",
            "schedule": 30.0,
        },
        "flask-geneva-housekeeping": {
            "task": "flask_geneva.housekeeping",
            "schedule": 1800.0,
        },
    }


@pytest.mark.parametrize(
    "value", [0, -5, float("nan"), float("inf"), True, None, "30", [30]]
)
@pytest.mark.parametrize(
    "keyword", ["dispatch_interval_seconds", "housekeeping_interval_seconds"]
)
def test_beat_schedule_refuses_an_interval_that_is_no_positive_number(value, keyword):
    """beat_schedule() refuses an interval beat could not run (zero, negative, NaN, infinite, a bool, text), naming the keyword and the value (R-FLT-72)."""
    with pytest.raises(ValueError, match="positive number of seconds") as raised:
        beat_schedule(**{keyword: value})
    assert_clear_refusal(
        raised.value, f"{keyword} must be a positive number of seconds", repr(value)
    )


def test_beat_schedule_takes_positive_seconds():
    """Ints and floats are taken as seconds (R-FLT-72)."""
    entries = beat_schedule(
        dispatch_interval_seconds=2, housekeeping_interval_seconds=0.5
    )
    assert entries["flask-geneva-dispatch-due"]["schedule"] == 2.0
    assert entries["flask-geneva-housekeeping"]["schedule"] == 0.5
