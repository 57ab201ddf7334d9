"""Long waits never live in the broker: the database dispatcher (R-DSP-01..06)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.publications import DEFERRED_JOB_ID
from flask_geneva.ext.operations import dispatch_due
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyOneStep


class DispatcherLongWait(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(wait=timedelta(days=2))
    def later(self):
        pass


def test_long_wait_is_deferred_not_published(user, geneva_jobs):
    """A wait beyond GENEVA_MAX_BROKER_DELAY sets job_id to the sentinel and sends nothing (R-DSP-01)."""
    with clock.frozen() as frozen:
        workflow = DispatcherLongWait.create(hero=user)
        geneva_jobs.drain()
        execution = workflow.current_execution
        assert execution.step_name == "later"
        assert execution.job_id == DEFERRED_JOB_ID
        assert geneva_jobs.enqueued == []
        assert dispatch_due() == 0
        frozen.advance(timedelta(days=2) - timedelta(minutes=5))
        assert dispatch_due() == 1
        db.session.refresh(execution)
        assert execution.job_id != DEFERRED_JOB_ID
        assert execution.state == "scheduled"
        [publication] = geneva_jobs.enqueued
        assert publication.step_execution_id == execution.id
        assert publication.task_id == execution.job_id
        assert publication.eta == execution.scheduled_for
        assert dispatch_due() == 0


def test_short_wait_goes_to_the_broker_with_eta(user, geneva_jobs):
    """Waits within the horizon are published at once with an eta (R-DSP-01, R-SCH-04)."""
    workflow = EmptyOneStep.create(hero=user)
    [publication] = geneva_jobs.enqueued
    assert publication.eta is None
    assert workflow.current_execution.job_id == publication.task_id


def test_paused_workflows_are_not_dispatched_until_resumed(user, geneva_jobs):
    """Executions of paused workflows stay deferred; resume() re-applies the rule (R-DSP-03)."""
    with clock.frozen() as frozen:
        workflow = DispatcherLongWait.create(hero=user)
        geneva_jobs.drain()
        workflow.pause()
        frozen.advance(timedelta(days=3))
        assert dispatch_due() == 0
        geneva_jobs.clear()
        execution = workflow.resume()
        assert execution.job_id != DEFERRED_JOB_ID
        assert geneva_jobs.enqueued[-1].step_execution_id == execution.id


def _park_long_waits(count, geneva_jobs, frozen):
    """``count`` workflows of new heroes parked at ``later``, then due (2 days on)."""
    from tests.apps.basic import User

    heroes = [User(email=f"parked{i}@example.com") for i in range(count)]
    db.session.add_all(heroes)
    db.session.commit()
    for hero in heroes:
        DispatcherLongWait.create(hero=hero)
    geneva_jobs.drain()
    geneva_jobs.clear()
    frozen.advance(timedelta(days=2))


def test_dispatch_works_in_batches(app, user, geneva_jobs):
    """All due rows are dispatched regardless of batch size (R-DSP-02)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    geneva.reload_settings(app)
    with clock.frozen() as frozen:
        _park_long_waits(5, geneva_jobs, frozen)
        assert dispatch_due() == 5
        assert len(geneva_jobs.enqueued) == 5


def test_a_batch_sets_its_task_ids_in_one_statement(app, user, geneva_jobs):
    """The due rows' ``job_id`` writes go out as one ``executemany`` (R-DSP-02, R-DM-42)."""
    from tests.support.statements import recorded_statements

    with clock.frozen() as frozen:
        _park_long_waits(4, geneva_jobs, frozen)
        with recorded_statements() as statements:
            assert dispatch_due() == 4
    job_id_writes = [
        s
        for s in statements
        if s.lstrip().upper().startswith("UPDATE") and "job_id" in s.split("WHERE")[0]
    ]
    assert len(job_id_writes) == 1, job_id_writes
    table = geneva.StepExecution.__table__
    stored = {
        row.id: row.job_id
        for row in db.session.execute(
            sa.select(table.c.id, table.c.job_id).where(
                table.c.id.in_([p.step_execution_id for p in geneva_jobs.enqueued])
            )
        )
    }
    db.session.rollback()
    assert len(stored) == 4
    assert {p.step_execution_id: p.task_id for p in geneva_jobs.enqueued} == stored


class DispatcherUrgentLater(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(wait=timedelta(days=2), job_options={"priority": 13})
    def later(self):
        pass


def _refuse_thirteen(priority: int) -> int:
    if priority == 13:
        raise ValueError("priority 13 cannot be mapped")
    return priority


def test_a_row_that_raises_does_not_stop_the_dispatcher(app, user, geneva_jobs):
    """A row whose publication cannot be prepared is reported and stays deferred; every other due row of the batch and the next batches is published and counted; each run considers a row once (issue 14, R-DSP-08)."""
    from tests.apps.basic import User

    reported: list[BaseException] = []
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    app.config["GENEVA_PRIORITY_MAPPER"] = _refuse_thirteen
    app.config["GENEVA_ERROR_REPORTER"] = lambda error, **_: reported.append(error)
    geneva.reload_settings(app)
    with clock.frozen() as frozen:
        heroes = [User(email=f"r{i}@example.com") for i in range(5)]
        db.session.add_all(heroes)
        db.session.commit()
        broken = [DispatcherUrgentLater.create(hero=heroes[0])]
        broken.append(DispatcherUrgentLater.create(hero=heroes[1]))
        fine = [DispatcherLongWait.create(hero=hero) for hero in heroes[2:]]
        geneva_jobs.drain()
        geneva_jobs.clear()
        frozen.advance(timedelta(days=2))
        assert dispatch_due() == 3
        assert len(reported) == 2
        assert {p.step_execution_id for p in geneva_jobs.enqueued} == {
            workflow.current_execution.id for workflow in fine
        }
        for workflow in broken:
            db.session.refresh(workflow.current_execution)
            assert workflow.current_execution.job_id == DEFERRED_JOB_ID
        # The next run tries them again, once each.
        assert dispatch_due() == 0
        assert len(reported) == 4


@pytest.mark.parametrize("after_commit", [True, False], ids=["deferred", "inline"])
def test_a_failed_publication_defers_the_rest_and_ends_the_run(
    app, user, geneva_jobs, monkeypatch, after_commit
):
    """After a failed publication the rest of its batch is deferred again without being
    tried, no further batch is read, and nothing is counted; the next run sends them
    all, whether publications wait for the commit or not (R-DSP-08)."""
    from tests.apps.basic import User

    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    app.config["GENEVA_ENQUEUE_AFTER_COMMIT"] = after_commit
    geneva.reload_settings(app)
    backend = app.extensions["geneva"].recording_backend
    attempts = []

    def refuse(publication):
        attempts.append(publication.step_execution_id)
        raise ConnectionError("broker down")

    with clock.frozen() as frozen:
        heroes = [User(email=f"f{i}@example.com") for i in range(5)]
        db.session.add_all(heroes)
        db.session.commit()
        workflows = [DispatcherLongWait.create(hero=hero) for hero in heroes]
        geneva_jobs.drain()
        geneva_jobs.clear()
        execution_ids = sorted(w.current_execution.id for w in workflows)
        frozen.advance(timedelta(days=2))
        monkeypatch.setattr(backend, "publish", refuse)
        assert dispatch_due() == 0
        # Keyset order (scheduled_for, id): the first row was tried, its batch
        # neighbour was not, and the run ended before the next batches.
        assert attempts == execution_ids[:1]
        table = geneva.StepExecution.__table__
        job_ids = db.session.execute(
            sa.select(table.c.job_id).where(table.c.id.in_(execution_ids))
        ).scalars()
        assert set(job_ids) == {DEFERRED_JOB_ID}
        monkeypatch.undo()
        assert dispatch_due() == 5
        assert sorted(p.step_execution_id for p in geneva_jobs.enqueued) == (
            execution_ids
        )
