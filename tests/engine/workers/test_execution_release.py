"""A live worker releases the executions whose run ended (R-WRK-18, R-EXE-35).

The registration's set of running executions and the release statement,
without a Celery worker: the registration is made in the test process, and
``release_finished()`` is called as its heartbeat thread calls it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine.operators import dispatcher
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EscapesWithCancelledError
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

seen_running: list[bool] = []


def _note_whether_running(workflow):
    """In a step: note in ``seen_running`` whether the worker's running set holds
    the step's execution."""
    running = worker_registry.running_executions(db.session)
    seen_running.append(workflow.current_execution.id in running.snapshot())


class RelOneStep(geneva.Workflow):
    @step
    def only(self):
        _note_whether_running(self)


class RelTwoSteps(geneva.Workflow):
    @step
    def first(self):
        _note_whether_running(self)

    @step
    def second(self):
        _note_whether_running(self)


@pytest.fixture
def registration(app):
    registered = worker_registry.register_worker(current_context())
    assert registered is not None
    assert registered.registered
    yield registered
    db.session.rollback()
    worker_registry.deregister_workers()


def _row(execution_id):
    execution = geneva.StepExecution
    row = db.session.execute(
        sa.select(execution.state, execution.worker_id).where(
            execution.id == execution_id
        )
    ).one()
    db.session.rollback()
    return row


def _claimed(worker_id, started_ago):
    workflow = RelOneStep.create(hero=make_user())
    execution_id = make_in_progress(workflow, clock.now() - started_ago)
    update_execution(execution_id, worker_id=worker_id)
    return execution_id


def test_a_live_worker_releases_only_the_old_executions_it_no_longer_runs(
    registration, caplog
):
    """Released: this worker's in_progress execution, started before the margin
    (GENEVA_WORKER_DEAD_AFTER by the database's clock) and not in its running set.
    Kept: a fresh claim, an old one it is running, another worker's (R-WRK-18)."""
    me = registration.identity.worker_id
    fresh = _claimed(me, timedelta(seconds=1))
    running = _claimed(me, timedelta(hours=2))
    finished = _claimed(me, timedelta(hours=2))
    others = _claimed("0" * 36, timedelta(hours=2))
    caplog.set_level(logging.WARNING, logger="flask_geneva.workers")
    with registration.running.holding(running):
        assert registration.release_finished() == [finished]
        assert registration.release_finished() == []
    assert _row(finished) == ("in_progress", None)
    for kept, worker_id in ((fresh, me), (running, me), (others, "0" * 36)):
        assert _row(kept) == ("in_progress", worker_id)
    [record] = [r for r in caplog.records if "released" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert str(finished) in record.getMessage()


def test_a_released_execution_is_recovered_by_the_next_dispatcher_run(registration):
    """The release names the worker in job_id, and the next dispatcher run
    recovers the row (cause ``released``), not the age rule's hour (R-WRK-18,
    R-FLT-11); while it named the live worker nothing recovered it."""
    me = registration.identity.worker_id
    execution_id = _claimed(me, timedelta(minutes=2))
    assert run_housekeeping()["stuck_in_progress_recovered"] == 0
    assert dispatcher.run_dispatcher(current_context()).recovered == 0
    assert registration.release_finished() == [execution_id]
    execution = db.session.get(geneva.StepExecution, execution_id)
    assert execution.job_id == f"geneva:released:{me}"
    db.session.rollback()
    run = dispatcher.run_dispatcher(current_context())
    assert run.recovered == 1
    execution = db.session.get(geneva.StepExecution, execution_id)
    assert (execution.state, execution.outcome) == ("completed", "recovered")
    recovery = execution.read_metadata("recovery")
    assert (recovery["cause"], recovery["by"]) == ("released", "dispatcher")
    assert recovery["released_by"] == me
    assert execution.error_message.startswith(f"worker {me} released it while alive")


def test_a_run_holds_its_execution_as_running_until_it_ends(registration, user):
    """The executor adds the id before the claim commits and removes it when the
    run ends (R-WRK-18)."""
    seen_running.clear()
    workflow = RelOneStep.create(hero=user)
    execution_id = workflow.current_execution.id
    perform_next_step(workflow)
    assert seen_running == [True]
    assert registration.running.snapshot() == frozenset()
    assert _row(execution_id).state == "completed"


def test_a_base_exception_escaping_a_step_is_logged_and_released(
    registration, user, caplog
):
    """asyncio.CancelledError is no flow-control signal: it propagates (R-EXE-35),
    logged at ERROR with the execution id, and the execution leaves the running
    set so that the heartbeat releases it (R-WRK-18)."""
    workflow = EscapesWithCancelledError.create(hero=user)
    execution_id = workflow.current_execution.id
    caplog.set_level(logging.ERROR, logger="flask_geneva")
    with pytest.raises(asyncio.CancelledError):
        perform_next_step(workflow)
    db.session.rollback()
    escaped = [r for r in caplog.records if "escaped the step" in r.getMessage()]
    assert [r.levelno for r in escaped] == [logging.ERROR]
    assert str(execution_id) in escaped[0].getMessage()
    assert registration.running.snapshot() == frozenset()
    me = registration.identity.worker_id
    assert _row(execution_id) == ("in_progress", me)
    update_execution(execution_id, started_at=clock.now() - timedelta(hours=2))
    assert registration.release_finished() == [execution_id]


def test_an_inline_continued_step_is_held_as_running(registration, user):
    """The step claimed inline by its predecessor's finalize is in the set
    while it runs, and the set is empty once the task ends (R-WRK-18, R-EXE-70)."""
    seen_running.clear()
    workflow = RelTwoSteps.create(hero=user)
    first_id, workflow_id = workflow.current_execution.id, workflow.id
    db.session.remove()
    Executor.execute(first_id, continue_inline=True)
    assert seen_running == [True, True]
    assert registration.running.snapshot() == frozenset()
    execution = geneva.StepExecution
    rows = db.session.execute(
        sa.select(execution.step_name, execution.state, execution.worker_id)
        .where(execution.workflow_id == workflow_id)
        .order_by(execution.id)
    ).all()
    me = registration.identity.worker_id
    assert rows == [("first", "completed", me), ("second", "completed", me)]
