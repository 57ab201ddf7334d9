"""The dispatcher publishes again what stayed scheduled past its time (R-FLT-20).

A due execution whose message was lost (a claim that met a database outage
longer than its retries, R-FLT-02) stays ``scheduled`` with nothing in the
broker. The dispatcher publishes it again once it is due and unwritten for a
dispatch interval (30 s), once per time it came due, and never a row that
waits for the dispatcher's own pass, for a limit or for ``resume()``.
"""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.publications import DEFERRED_JOB_ID
from flask_geneva.engine.operators import dispatcher
from flask_geneva.ext.app_state import current_context
from flask_geneva.ext.operations import run_housekeeping
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workers import insert_worker
from tests.support.workflow import execution_row
from tests.support.workflow import make_user

INTERVAL = timedelta(seconds=30)  # GENEVA_DISPATCH_INTERVAL's default


class Stranded(geneva.Workflow):
    @step
    def only(self):
        pass


def _republished() -> int:
    return dispatcher.run_dispatcher(current_context()).republished


def test_a_due_execution_unwritten_for_an_interval_is_published_once(user, geneva_jobs):
    """Published again for now with a new task id after 30 s; not a second
    time; a row published since (fresh) is left alone (R-FLT-20)."""
    with clock.frozen() as frozen:
        lost = Stranded.create(hero=user).current_execution
        lost_id, first_task = lost.id, lost.job_id
        geneva_jobs.clear()
        frozen.advance(INTERVAL)
        assert _republished() == 0  # not yet more than an interval
        fresh_id = Stranded.create(hero=make_user()).current_execution.id
        geneva_jobs.clear()
        frozen.advance(timedelta(seconds=1))
        assert _republished() == 1
        [publication] = geneva_jobs.enqueued
        assert publication.step_execution_id == lost_id
        assert publication.eta is None
        row = execution_row(lost_id)
        assert (row.state, row.job_id) == ("scheduled", publication.task_id)
        assert row.job_id != first_task
        geneva_jobs.clear()
        frozen.advance(timedelta(minutes=5))
        # The fresh one's first publication is lost too by now; the other
        # one was published again already: only once per time it came due.
        assert _republished() == 1
        assert [p.step_execution_id for p in geneva_jobs.enqueued] == [fresh_id]
        assert execution_row(lost_id).job_id == publication.task_id


def test_deferred_and_paused_executions_are_left_to_their_own_paths(user, geneva_jobs):
    """A deferred row is the dispatcher's own pass (R-DSP-02); a paused
    workflow's waits for resume() (R-DSP-03)."""
    with clock.frozen() as frozen:
        paused = Stranded.create(hero=user)
        paused.pause()
        deferred = Stranded.create(hero=make_user()).current_execution
        deferred.job_id = DEFERRED_JOB_ID
        deferred.scheduled_for = clock.now() + timedelta(days=1)
        db.session.commit()
        frozen.advance(timedelta(hours=2))
        assert _republished() == 0
        assert execution_row(deferred.id).job_id == DEFERRED_JOB_ID


def test_nothing_is_published_again_while_every_worker_is_silent(user, geneva_jobs):
    """With the worker registry: no heartbeat for GENEVA_WORKER_DEAD_AFTER
    means nobody consumes; the message is not lost, and is not doubled
    (R-FLT-20). A worker's heartbeat lets the pass run."""
    insert_worker(timedelta(minutes=10))
    with clock.frozen() as frozen:
        execution_id = Stranded.create(hero=user).current_execution.id
        geneva_jobs.clear()
        frozen.advance(timedelta(minutes=2))
        assert _republished() == 0
        insert_worker(timedelta(0))
        assert _republished() == 1
        assert [p.step_execution_id for p in geneva_jobs.enqueued] == [execution_id]


def test_a_failed_deferred_publication_ends_the_run_before_the_stranded_pass(
    app, user, geneva_jobs, monkeypatch
):
    """When the deferred pass's publication fails, the run publishes nothing
    more (R-DSP-08): the stranded row is not tried against the same broker
    in that run, and the next run publishes both (R-FLT-20)."""
    backend = app.extensions["geneva"].recording_backend
    attempts: list[object] = []

    def refuse(publication):
        attempts.append(publication.step_execution_id)
        raise ConnectionError("broker down")

    with clock.frozen() as frozen:
        stranded_id = Stranded.create(hero=user).current_execution.id
        deferred = Stranded.create(hero=make_user()).current_execution
        deferred.job_id = DEFERRED_JOB_ID
        db.session.commit()
        deferred_id = deferred.id
        geneva_jobs.clear()
        frozen.advance(timedelta(minutes=2))
        monkeypatch.setattr(backend, "publish", refuse)
        run = dispatcher.run_dispatcher(current_context())
        assert (run.published, run.republished) == (0, 0)
        assert attempts == [deferred_id]
        assert execution_row(stranded_id).job_id != DEFERRED_JOB_ID
        monkeypatch.undo()
        run = dispatcher.run_dispatcher(current_context())
        assert (run.published, run.republished) == (1, 1)
        assert sorted(p.step_execution_id for p in geneva_jobs.enqueued) == sorted(
            [deferred_id, stranded_id]
        )


def test_rows_due_longer_ago_than_the_stuck_threshold_are_left_to_housekeeping(
    user, geneva_jobs
):
    """The pass reads only rows due at most GENEVA_STUCK_SCHEDULED_THRESHOLD
    (15 minutes) ago, so that a run costs what came due lately, not every
    overdue row of every paused workflow; an older lost row is housekeeping's
    stuck-scheduled recovery's (R-FLT-20, R-HK-20)."""
    with clock.frozen() as frozen:
        old = Stranded.create(hero=user).current_execution.id
        frozen.advance(timedelta(minutes=15, seconds=1))
        recent = Stranded.create(hero=make_user()).current_execution.id
        geneva_jobs.clear()
        frozen.advance(INTERVAL + timedelta(seconds=1))
        assert _republished() == 1
        assert [p.step_execution_id for p in geneva_jobs.enqueued] == [recent]
        summary = run_housekeeping()
        assert summary["stuck_scheduled_recovered"] == 1
        assert execution_row(old).state != "scheduled"
        assert execution_row(recent).state == "scheduled"
