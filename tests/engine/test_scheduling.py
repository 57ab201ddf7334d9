"""Creating executions and publishing their jobs (SPEC §6.1-6.2, R-SCH, R-JOB-09,
R-TXN).
"""

from __future__ import annotations

import threading
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import inline_enqueue
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine.publishing import deferral_active
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingTwoSteps
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row

T0 = datetime(2030, 9, 1, 4, 0, tzinfo=UTC)
DEFERRED = {"GENEVA_ENQUEUE_AFTER_COMMIT": True}


class SchedulingSteps(geneva.Workflow):
    @step
    def one(self):
        pass

    @step(wait=timedelta(minutes=3))
    def two(self):
        pass

    @step
    def three(self):
        pass


class SchedulingOptions(geneva.Workflow):
    default_job_options = {"queue": "class-queue", "priority": 1}

    @step
    def plain(self):
        pass

    @step(job_options={"priority": 9})
    def urgent(self):
        pass


class SchedulingOptionWait(geneva.Workflow):
    default_job_options = {"wait": timedelta(minutes=2)}

    @step
    def first(self):
        pass

    @step(wait=timedelta(minutes=5))
    def longer_own_wait(self):
        pass

    @step(job_options={"wait": timedelta(minutes=7)})
    def step_option_wait(self):
        pass


class SchedulingLongWait(geneva.Workflow):
    @step(wait=timedelta(days=2))
    def much_later(self):
        pass


# -- execution rows (R-SCH-01..07) -----------------------------------------------------


def test_first_execution_is_due_now_and_published(user, geneva_jobs):
    """Without a wait scheduled_for is now; the job carries the id and job_id is its
    task id (R-SCH-01, R-SCH-04/05).
    """
    with clock.frozen(T0):
        workflow = SchedulingSteps.create(hero=user)
    row = execution_rows(workflow.id)[0]
    assert row["scheduled_for"] == T0
    [publication] = geneva_jobs.enqueued
    assert publication.step_execution_id == row["id"]
    assert publication.task_name == "flask_geneva.perform_step"
    assert publication.eta is None
    assert row["job_id"] == publication.task_id


def test_delayed_step_is_published_with_eta(user, geneva_jobs):
    """A step with a wait is scheduled and published for now + wait (R-SCH-01,
    R-SCH-04).
    """
    with clock.frozen(T0):
        workflow = SchedulingSteps.create(hero=user)
        geneva_jobs.clear()
        perform_next_step(workflow)
    row = execution_rows(workflow.id)[-1]
    assert (row["step_name"], row["scheduled_for"]) == (
        "two",
        T0 + timedelta(minutes=3),
    )
    assert [(p.step_execution_id, p.eta) for p in geneva_jobs.enqueued] == [
        (row["id"], T0 + timedelta(minutes=3))
    ]
    assert workflow_row(workflow.id)["next_step_name"] == "two"


def test_new_execution_cancels_stray_scheduled_ones(user):
    """Creating an execution cancels the workflow's other scheduled executions
    (R-SCH-03, R-SE-03).
    """
    workflow = SchedulingSteps.create(hero=user)
    old_id = workflow.current_execution.id
    with clock.frozen(T0):
        new = workflow.reschedule_current_step()
    old = execution_row(old_id)
    assert (old["state"], old["outcome"]) == ("canceled", "canceled")
    assert old["canceled_at"] == old["finished_at"] == T0
    assert execution_row(new.id)["state"] == "scheduled"


def test_reschedule_current_step_uses_exactly_the_given_wait(user):
    """reschedule_current_step ignores the step's own wait (R-SCH-07)."""
    with clock.frozen(T0):
        workflow = SchedulingSteps.create(hero=user)
        perform_next_step(workflow)
        without = workflow.reschedule_current_step()
        assert execution_row(without.id)["scheduled_for"] == T0
        delayed = workflow.reschedule_current_step(wait=30)
    row = execution_row(delayed.id)
    assert (row["step_name"], row["scheduled_for"]) == (
        "two",
        T0 + timedelta(seconds=30),
    )


def test_schedule_next_step_finishes_after_the_last_step(user):
    """schedule_next_step finishes the workflow when no step follows (R-SCH-06)."""
    workflow = SchedulingSteps.create(hero=user)
    workflow.transition_to("ready", next_step_name="three")
    with clock.frozen(T0):
        assert workflow.schedule_next_step() is None
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"], row["current_step_name"]) == (
        "finished",
        None,
        None,
    )
    assert row["transitioned_at"] == T0


def test_schedule_next_step_finishing_cancels_the_scheduled_execution(user):
    """A finish by schedule_next_step leaves no execution scheduled behind it
    (R-SCH-06 amended, R-SCH-03): the finished workflow's pending one ends canceled.
    """
    workflow = SchedulingSteps.create(hero=user)
    workflow.transition_to("ready", next_step_name="three")
    with clock.frozen(T0):
        assert workflow.schedule_next_step() is None
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("one", "canceled", "canceled")
    ]
    assert (rows[0]["canceled_at"], rows[0]["finished_at"]) == (T0, T0)
    assert workflow_row(workflow.id)["state"] == "finished"


def test_schedule_next_step_of_paused_last_step_cancels_the_preserved_one(user):
    """Paused at the last step with its execution preserved (R-EXT-01), a finish by
    schedule_next_step cancels that execution too (R-SCH-06 amended): a finished
    workflow keeps no execution that resume() or the dispatcher could still run.
    """
    workflow = SchedulingSteps.create(hero=user)
    perform_next_step(workflow)
    perform_next_step(workflow)
    workflow.pause()
    preserved = execution_rows(workflow.id)[-1]
    assert (preserved["step_name"], preserved["state"]) == ("three", "scheduled")
    with clock.frozen(T0):
        assert workflow.schedule_next_step() is None
    assert execution_row(preserved["id"])["state"] == "canceled"
    assert workflow_row(workflow.id)["state"] == "finished"
    assert not [
        r for r in execution_rows(workflow.id) if r["state"] in ("scheduled", "waiting")
    ]


def test_schedule_next_step_with_explicit_wait(user):
    """schedule_next_step uses the given wait instead of the step's own (R-SCH-06)."""
    with clock.frozen(T0):
        workflow = SchedulingSteps.create(hero=user)
        execution = workflow.schedule_next_step(wait=timedelta(hours=1))
    row = execution_row(execution.id)
    assert (row["step_name"], row["scheduled_for"]) == ("two", T0 + timedelta(hours=1))


# -- job options (R-JOB-02, R-JOB-09, R-DSP-01) ----------------------------------------


def test_job_options_merge_class_instance_and_step(user, geneva_jobs):
    """Publications use class < instance < step options (R-JOB-02)."""
    workflow = SchedulingOptions.create(hero=user, step_job_options={"queue": "mine"})
    perform_next_step(workflow)
    assert [(p.queue, p.priority) for p in geneva_jobs.enqueued] == [
        ("mine", 1),
        ("mine", 9),
    ]


def test_job_option_wait_is_folded_into_scheduled_for(user, geneva_jobs):
    """Job-option waits delay scheduled_for itself; the later time wins (R-JOB-09)."""
    with clock.frozen(T0):
        workflow = SchedulingOptionWait.create(hero=user)
        first = execution_rows(workflow.id)[0]
        assert first["scheduled_for"] == T0 + timedelta(minutes=2)
        perform_next_step(workflow)
        second = execution_rows(workflow.id)[-1]
        assert second["scheduled_for"] == T0 + timedelta(minutes=5)
        perform_next_step(workflow)
        third = execution_rows(workflow.id)[-1]
        assert third["scheduled_for"] == T0 + timedelta(minutes=7)
    etas = {p.step_execution_id: p.eta for p in geneva_jobs.enqueued}
    assert etas[first["id"]] == T0 + timedelta(minutes=2)
    assert etas[third["id"]] == T0 + timedelta(minutes=7)


def test_job_option_wait_until_is_folded_into_scheduled_for(user):
    """An instance wait_until sets scheduled_for when it is later (R-JOB-09)."""
    at = T0 + timedelta(minutes=4)
    with clock.frozen(T0):
        workflow = SchedulingSteps.create(
            hero=user, step_job_options={"wait_until": at}
        )
    assert execution_rows(workflow.id)[0]["scheduled_for"] == at


def test_long_waits_are_left_to_the_dispatcher(user, geneva_jobs):
    """An eta beyond GENEVA_MAX_BROKER_DELAY is not published; job_id marks it deferred
    (R-DSP-01).
    """
    with clock.frozen(T0):
        workflow = SchedulingLongWait.create(hero=user)
    row = execution_rows(workflow.id)[0]
    assert row["scheduled_for"] == T0 + timedelta(days=2)
    assert row["job_id"] == "geneva:deferred"
    assert geneva_jobs.enqueued == []


# -- publication and transactions (R-TXN-01..06) ---------------------------------------


def test_testing_apps_publish_immediately_by_default(user, geneva_jobs):
    """With app.testing deferral is off: publication happens inside the transaction
    (R-TXN-01, R-TXN-04).
    """
    SchedulingSteps.create(hero=user, commit=False)
    assert len(geneva_jobs.enqueued) == 1
    db.session.rollback()


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_publication_waits_for_the_commit(user, geneva_jobs):
    """With deferral a job is published only after the outermost commit (R-TXN-02)."""
    workflow = SchedulingSteps.create(hero=user, commit=False)
    assert geneva_jobs.enqueued == []
    db.session.commit()
    [publication] = geneva_jobs.enqueued
    row = execution_rows(workflow.id)[0]
    assert publication.step_execution_id == row["id"]
    assert row["job_id"] == publication.task_id


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_rollback_publishes_nothing(user, geneva_jobs):
    """A rolled-back transaction discards its publications (R-TXN-02)."""
    SchedulingSteps.create(hero=user, commit=False)
    db.session.rollback()
    assert geneva_jobs.enqueued == []
    assert count_workflows() == 0
    db.session.commit()
    assert geneva_jobs.enqueued == []


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_savepoint_commit_does_not_publish(user, geneva_jobs):
    """Releasing a savepoint does not publish; the root commit does (R-TXN-03)."""
    with db.session.begin_nested():
        SchedulingSteps.create(hero=user, commit=False)
    assert geneva_jobs.enqueued == []
    db.session.commit()
    assert len(geneva_jobs.enqueued) == 1


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_rolled_back_savepoint_discards_its_publications(user, geneva_jobs):
    """Publications requested inside a rolled-back savepoint are dropped
    (R-TXN-02/03).
    """
    other = make_user()
    kept = SchedulingSteps.create(hero=user, commit=False)
    savepoint = db.session.begin_nested()
    SchedulingSteps.create(hero=other, commit=False)
    savepoint.rollback()
    assert geneva_jobs.enqueued == []
    db.session.commit()
    assert count_workflows() == 1
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [
        execution_rows(kept.id)[0]["id"]
    ]


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_committed_create_publishes_once(user, geneva_jobs):
    """create() with commit=True publishes exactly once (R-TXN-02, R-TXN-06)."""
    SchedulingSteps.create(hero=user)
    assert len(geneva_jobs.enqueued) == 1
    db.session.commit()
    assert len(geneva_jobs.enqueued) == 1


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_inline_enqueue_publishes_inside_the_transaction(user, geneva_jobs):
    """inline_enqueue() publishes at once even inside a transaction (R-TXN-05)."""
    with inline_enqueue():
        SchedulingSteps.create(hero=user, commit=False)
        assert len(geneva_jobs.enqueued) == 1
    db.session.rollback()
    assert len(geneva_jobs.enqueued) == 1


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_inline_enqueue_restores_on_exception_and_nests(app, geneva_jobs):
    """inline_enqueue restores the previous mode on exit and on exceptions, and nests
    (R-TXN-05).
    """
    assert deferral_active(True)
    with inline_enqueue():
        with inline_enqueue():
            assert not deferral_active(True)
        assert not deferral_active(True)
        with pytest.raises(KeyError), inline_enqueue():
            raise KeyError("boom")
        assert not deferral_active(True)
    assert deferral_active(True)
    inside = []

    def fail_inside():
        with geneva.inline_enqueue():
            inside.append(deferral_active(True))
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_inside()
    assert inside == [False]
    assert deferral_active(True)


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_inline_enqueue_is_per_thread(app):
    """inline_enqueue affects only the current thread (R-TXN-05)."""
    seen = []
    with inline_enqueue():
        thread = threading.Thread(target=lambda: seen.append(deferral_active(True)))
        thread.start()
        thread.join()
    assert seen == [True]


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_steps_completed_by_the_executor_publish_after_its_commit(user, geneva_jobs):
    """With deferral the executor's next-step publication is not lost (R-TXN-02)."""
    workflow = CountingTwoSteps.create(hero=user)
    assert geneva_jobs.drain() == 2
    assert workflow_row(workflow.id)["state"] == "finished"


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_resume_inside_an_outer_transaction_publishes_after_commit(user, geneva_jobs):
    """resume(commit=False) publishes when the caller commits (R-TXN-02)."""
    workflow = CountingTwoSteps.create(hero=user)
    workflow.pause()
    geneva_jobs.clear()
    other = make_user()
    other.counter = 7
    workflow.resume(commit=False)
    assert geneva_jobs.enqueued == []
    db.session.commit()
    assert len(geneva_jobs.enqueued) == 1
    assert workflow_row(workflow.id)["state"] == "ready"
    assert hero_counter(other.id) == 7
