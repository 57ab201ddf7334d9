"""A step execution delivered before its time does not run (R-EXE-18, issue 12 point 1).

R-EXE-18 [DEV]: in Phase 1, under the row locks and right after the duplicate
check (R-EXE-11), an execution whose ``scheduled_for`` is more than
``GENEVA_CLOCK_SKEW_TOLERANCE`` (default 1 s) after now is not claimed. Of a
ready or performing workflow it is published again for its time through the
scheduling code (R-SCH-09), or left for the dispatcher when that time is beyond
``GENEVA_MAX_BROKER_DELAY`` (R-DSP-01); of a paused workflow it is left for
``resume()`` (R-EXT-21). Its state and ``scheduled_for`` never change, a warning
is logged, and no signal is sent (R-SIG-02).

The deliveries go through the task logic a Celery worker runs
(:func:`flask_geneva.ext.tasks.perform_step_execution`), with the clock frozen.
"""

from __future__ import annotations

import logging
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import signals
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.publications import DEFERRED_JOB_ID
from flask_geneva.ext.operations import dispatch_due
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

T0 = datetime(2031, 5, 4, 8, 0, tzinfo=UTC)
RUNS: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


class EarlyWaitTenMinutes(geneva.Workflow):
    @step
    def a(self):
        RUNS.append("a")

    @step(wait=timedelta(minutes=10))
    def b(self):
        RUNS.append("b")


class EarlyWaitOneDay(geneva.Workflow):
    @step
    def a(self):
        RUNS.append("a")

    @step(wait=timedelta(days=1))
    def c(self):
        RUNS.append("c")


def _waiting_execution(workflow_cls, user, geneva_jobs):
    """Create at T0 and run the first step; return the waiting execution's row."""
    workflow = workflow_cls.create(hero=user)
    workflow_id = workflow.id
    assert geneva_jobs.drain(respect_eta=True) == 1
    assert RUNS == ["a"]
    db.session.remove()
    waiting = execution_rows(workflow_id)[-1]
    assert waiting["state"] == "scheduled"
    return workflow_id, waiting


def test_early_delivery_is_not_run_but_published_for_its_time(
    user, geneva_jobs, caplog
):
    """Delivered 5 min before a 10-min wait: not run, re-published with eta = scheduled_for, logged (R-EXE-18, R-SCH-09)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    sent: list[str] = []

    def receiver(sender, **payload):
        sent.append(payload.get("outcome"))

    with clock.frozen(T0) as frozen:
        workflow_id, waiting = _waiting_execution(
            EarlyWaitTenMinutes, user, geneva_jobs
        )
        assert waiting["scheduled_for"] == T0 + timedelta(minutes=10)
        [original] = geneva_jobs.enqueued
        assert original.eta == waiting["scheduled_for"]

        frozen.advance(timedelta(minutes=5))
        with (
            signals.precondition.connected_to(receiver),
            signals.step.connected_to(receiver),
            signals.finalize.connected_to(receiver),
        ):
            perform_step_execution(waiting["id"])  # the early delivery
        db.session.remove()

        assert RUNS == ["a"]
        assert sent == []
        row = execution_row(waiting["id"])
        assert row["state"] == "scheduled"
        assert row["started_at"] is None
        assert row["scheduled_for"] == waiting["scheduled_for"]
        assert workflow_row(workflow_id)["state"] == "ready"
        original_again, republished = geneva_jobs.enqueued
        assert original_again is original
        assert republished.step_execution_id == waiting["id"]
        assert republished.eta == waiting["scheduled_for"]
        assert republished.task_id == row["job_id"] != original.task_id
        [record] = [r for r in caplog.records if "R-EXE-18" in r.getMessage()]
        assert record.levelno == logging.WARNING
        assert "300.000 s before its scheduled_for" in record.getMessage()
        assert f"execution_id={waiting['id']}" in record.getMessage()

        # At its time both messages arrive: one runs it, the other is a duplicate.
        frozen.advance(timedelta(minutes=5))
        assert geneva_jobs.drain(respect_eta=True) == 2
    assert RUNS == ["a", "b"]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert execution_row(waiting["id"])["outcome"] == "success"


def test_early_delivery_beyond_the_broker_horizon_is_left_for_the_dispatcher(
    user, geneva_jobs
):
    """Delivered 23 h early: job_id becomes the dispatcher's sentinel, nothing is sent (R-EXE-18, R-DSP-01/02)."""
    with clock.frozen(T0) as frozen:
        _, waiting = _waiting_execution(EarlyWaitOneDay, user, geneva_jobs)
        assert waiting["job_id"] == DEFERRED_JOB_ID
        # As if a task id had been sent for it (a manual send, an old release).
        table = geneva.StepExecution.__table__
        with db.engine.begin() as connection:
            connection.execute(
                table.update()
                .where(table.c.id == waiting["id"])
                .values(job_id="a-stale-task-id")
            )
        frozen.advance(timedelta(hours=1))
        perform_step_execution(waiting["id"])  # a stray message, 23 h early
        db.session.remove()
        assert RUNS == ["a"]
        row = execution_row(waiting["id"])
        assert (row["state"], row["job_id"]) == ("scheduled", DEFERRED_JOB_ID)
        assert geneva_jobs.enqueued == []

        frozen.advance(timedelta(hours=23) - timedelta(minutes=5))
        assert dispatch_due() == 1
        [publication] = geneva_jobs.enqueued
        assert publication.eta == waiting["scheduled_for"]
        frozen.advance(timedelta(minutes=5))
        assert geneva_jobs.drain(respect_eta=True) == 1
    assert RUNS == ["a", "c"]


@pytest.mark.parametrize(
    ("app_config", "early_by", "runs"),
    [
        ({}, timedelta(milliseconds=500), True),
        ({}, timedelta(seconds=2), False),
        ({"GENEVA_CLOCK_SKEW_TOLERANCE": 600}, timedelta(minutes=5), True),
        (
            {"GENEVA_CLOCK_SKEW_TOLERANCE": timedelta(0)},
            timedelta(microseconds=1),
            False,
        ),
    ],
    ids=["default-0.5s", "default-2s", "600s-5min", "zero-1us"],
)
def test_clock_skew_tolerance_decides_what_is_early(user, geneva_jobs, early_by, runs):
    """Within GENEVA_CLOCK_SKEW_TOLERANCE of its time an execution runs; beyond it, it waits (R-EXE-18)."""
    with clock.frozen(T0) as frozen:
        _, waiting = _waiting_execution(EarlyWaitTenMinutes, user, geneva_jobs)
        frozen.advance(timedelta(minutes=10) - early_by)
        perform_step_execution(waiting["id"])
        db.session.remove()
    ran = list(RUNS)
    assert ran == (["a", "b"] if runs else ["a"])
    assert execution_row(waiting["id"])["state"] == (
        "completed" if runs else "scheduled"
    )


def test_early_delivery_of_a_paused_workflow_changes_nothing(user, geneva_jobs):
    """Paused: the early execution stays scheduled and unpublished; resume() publishes it for its time (R-EXE-18, R-EXT-21)."""
    with clock.frozen(T0) as frozen:
        workflow_id, waiting = _waiting_execution(
            EarlyWaitTenMinutes, user, geneva_jobs
        )
        update_workflow(workflow_id, state="paused")
        geneva_jobs.clear()
        frozen.advance(timedelta(minutes=5))
        perform_step_execution(waiting["id"])
        db.session.remove()
        row = execution_row(waiting["id"])
        assert (row["state"], row["job_id"]) == ("scheduled", waiting["job_id"])
        assert geneva_jobs.enqueued == []

        workflow = db.session.get(geneva.Workflow, workflow_id)
        workflow.resume()
        [publication] = geneva_jobs.enqueued
        assert publication.step_execution_id == waiting["id"]
        assert publication.eta == waiting["scheduled_for"]
        frozen.advance(timedelta(minutes=5))
        assert geneva_jobs.drain(respect_eta=True) == 1
    assert RUNS == ["a", "b"]


def test_test_helpers_still_run_a_waiting_step_at_once(user, geneva_jobs):
    """speedrun_workflow ignores scheduled_for (R-TH-01); drain() without respect_eta too (R-TH-20)."""
    from flask_geneva.testing import speedrun_workflow

    with clock.frozen(T0):
        workflow = EarlyWaitTenMinutes.create(hero=user)
        speedrun_workflow(workflow)
        assert RUNS == ["a", "b"]
        RUNS.clear()
        EarlyWaitTenMinutes.create(hero=user, allow_multiple=True)
        geneva_jobs.drain()
    assert RUNS == ["a", "b"]
