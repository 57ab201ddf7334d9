"""Claims name their worker; recovery goes by liveness, not age (R-WRK-02..07)."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import resumable_step
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.db import workers as worker_rows
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingOneStep
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workers import insert_worker
from tests.support.workers import workers_table
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

DEAD_AFTER = timedelta(seconds=90)


@pytest.fixture
def app_config():
    return {
        "GENEVA_WORKER_HEARTBEAT_INTERVAL": timedelta(seconds=15),
        "GENEVA_WORKER_DEAD_AFTER": DEAD_AFTER,
    }


def _add_worker(age):
    """A worker started now whose last heartbeat is ``age`` old by the database's
    clock.

    Liveness is judged with the database's clock (R-WRK-15), so the rows are
    aged, not the Python clock moved.
    """
    return insert_worker(age, started_at=timedelta(0))


def _worker_ids():
    with db.engine.connect() as connection:
        return [row.id for row in worker_rows.worker_rows(connection, workers_table())]


def _in_progress_of(workflow, worker_id, started_at):
    execution_id = make_in_progress(workflow, started_at)
    update_execution(execution_id, worker_id=worker_id)
    return execution_id


def _age_heartbeat(worker_id, by):
    """Move the worker's last heartbeat ``by`` earlier (a separate transaction);
    return it as stored."""
    with db.engine.begin() as connection:
        worker_rows.age_heartbeat(connection, workers_table(), worker_id, by)
        return worker_rows.last_heartbeat(connection, workers_table(), worker_id)


def test_a_registered_process_names_itself_in_its_claims(app, user):
    """Registering inserts the row; the claim writes the worker id (R-WRK-02/05)."""
    registration = worker_registry.register_worker(
        current_context(), node_name="celery@test", queues=("a", "b")
    )
    try:
        assert registration is not None
        assert worker_registry.register_worker(current_context()) is registration
        [row] = db.session.execute(sa.select(workers_table())).all()
        db.session.rollback()
        assert (row.id, row.pid, row.node_name, row.queues) == (
            registration.identity.worker_id,
            os.getpid(),
            "celery@test",
            "a,b",
        )
        before = row.last_heartbeat_at
        registration.heartbeat()
        assert (
            db.session.scalar(sa.select(workers_table().c.last_heartbeat_at)) >= before
        )
        db.session.rollback()
        workflow = CountingOneStep.create(hero=user)
        perform_next_step(workflow)
        worker_ids = db.session.scalars(
            sa.select(geneva.StepExecution.worker_id).where(
                geneva.StepExecution.workflow_id == workflow.id
            )
        ).all()
        assert worker_ids == [registration.identity.worker_id]
    finally:
        db.session.rollback()
        assert worker_registry.deregister_workers() == 1
    assert _worker_ids() == []
    # Without a registration the claim names no worker.
    other = CountingOneStep.create(hero=make_user())
    perform_next_step(other)
    assert (
        db.session.scalar(
            sa.select(geneva.StepExecution.worker_id).where(
                geneva.StepExecution.workflow_id == other.id
            )
        )
        is None
    )


def test_a_live_workers_execution_is_never_recovered_for_age(app, user):
    """A fresh heartbeat keeps a day-old in_progress execution alone (R-WRK-06)."""
    with clock.frozen(T0):
        live = _add_worker(timedelta(seconds=10))
        workflow = CountingOneStep.create(hero=user)
        _in_progress_of(workflow, live, T0 - timedelta(days=1))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 0
    assert _worker_ids() == [live]


def test_a_dead_workers_execution_is_recovered_whatever_its_age(app, user):
    """A missed heartbeat or a missing worker row abandons the execution, while
    another worker heartbeats (R-WRK-06/07, R-WRK-14)."""
    with clock.frozen(T0):
        live = _add_worker(timedelta(0))  # the evidence that heartbeats go through
        dead = _add_worker(DEAD_AFTER + timedelta(seconds=1))
        _add_worker(timedelta(hours=3))  # idle and dead: pruned
        workflow = CountingOneStep.create(hero=user)
        _in_progress_of(workflow, dead, T0 - timedelta(seconds=5))
        gone = CountingOneStep.create(hero=make_user())
        _in_progress_of(gone, str(uuid.uuid4()), T0 - timedelta(seconds=5))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 2
    # Both dead workers hold nothing any more: pruned.
    assert _worker_ids() == [live]
    db.session.refresh(workflow)
    assert workflow.state == "ready"
    assert workflow.current_execution.step_name == "only"


def test_rows_without_a_worker_keep_the_age_rule(app, user):
    """An execution claimed outside a registered worker recovers by age (R-WRK-06)."""
    with clock.frozen(T0):
        young = CountingOneStep.create(hero=user)
        make_in_progress(young, T0 - timedelta(minutes=59))
        old = CountingOneStep.create(hero=make_user())
        make_in_progress(old, T0 - timedelta(minutes=61))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1


def test_the_defaults_rerun_a_killed_workers_step_within_two_minutes():
    """With the default settings a step killed with its worker is recovered at
    most GENEVA_WORKER_DEAD_AFTER + GENEVA_DISPATCH_INTERVAL (+ the release spread)
    after its worker's last heartbeat, clearly under 2 minutes, while a live worker
    may miss three heartbeats in a row without being declared dead; the beat
    schedule's default matches the setting (R-WRK-12; bench/recovery.py measures
    it with real processes)."""
    from flask_geneva import beat_schedule
    from flask_geneva.core.config import DEFAULTS

    heartbeat = DEFAULTS["GENEVA_WORKER_HEARTBEAT_INTERVAL"]
    dead_after = DEFAULTS["GENEVA_WORKER_DEAD_AFTER"]
    dispatch = DEFAULTS["GENEVA_DISPATCH_INTERVAL"]
    spread = DEFAULTS["GENEVA_RELEASE_SPREAD"]
    assert dead_after >= 4 * heartbeat
    assert dead_after + dispatch + spread <= timedelta(seconds=100)
    entry = beat_schedule()["flask-geneva-dispatch-due"]
    assert entry["schedule"] == dispatch.total_seconds()
    housekeeping = beat_schedule()["flask-geneva-housekeeping"]
    assert housekeeping["schedule"] == (
        DEFAULTS["GENEVA_HOUSEKEEPING_INTERVAL"].total_seconds()
    )


def test_dead_after_must_be_at_least_twice_the_interval(app):
    """A dead-after shorter than two heartbeats is refused (R-WRK-06, R-CFG-01)."""
    from flask_geneva.core.config import setting_problems

    problems = setting_problems(
        {
            "GENEVA_WORKER_HEARTBEAT_INTERVAL": 10,
            "GENEVA_WORKER_DEAD_AFTER": 15,
        },
        testing=True,
    )
    assert (
        "GENEVA_WORKER_DEAD_AFTER (15 s) must be at least twice "
        "GENEVA_WORKER_HEARTBEAT_INTERVAL (10 s), i.e. at least 20 s"
    ) in "\n".join(problems)


@pytest.mark.parametrize("interval", [0.001, 0.09])
def test_a_heartbeat_interval_under_a_tenth_of_a_second_is_refused(app, interval):
    """Each heartbeat is a database write: the interval has a floor, named in
    the message with the value given (R-WRK-03, R-CFG-01)."""
    from flask_geneva.core.config import setting_problems

    problems = setting_problems(
        {"GENEVA_WORKER_HEARTBEAT_INTERVAL": interval}, testing=True
    )
    assert (
        f"GENEVA_WORKER_HEARTBEAT_INTERVAL ({interval:g} s) must be at least 0.1 s"
    ) in "\n".join(problems)


def test_the_dispatcher_run_recovers_dead_workers_only(app, user):
    """The dispatcher's periodic task recovers dead workers' executions, not old
    ones without a worker (R-WRK-06); another worker heartbeats (R-WRK-14)."""
    from celery import Celery

    from flask_geneva.core.publications import DISPATCH_DUE_TASK
    from flask_geneva.ext.tasks import register_tasks

    celery = Celery("dispatch-task-test", set_as_current=False)
    register_tasks(celery, geneva=geneva, app=app)
    with clock.frozen(T0):
        _add_worker(timedelta(0))
        dead = _add_worker(timedelta(hours=1))
        abandoned = CountingOneStep.create(hero=user)
        _in_progress_of(abandoned, dead, T0 - timedelta(seconds=5))
        old = CountingOneStep.create(hero=make_user())
        make_in_progress(old, T0 - timedelta(days=1))
        assert celery.tasks[DISPATCH_DUE_TASK]() == 0
    db.session.refresh(abandoned)
    db.session.refresh(old)
    assert (abandoned.state, old.state) == ("ready", "performing")


@pytest.mark.parametrize("caller", ["geneva.dispatch_due", "operations.dispatch_due"])
def test_dispatch_due_called_directly_recovers_dead_workers_too(app, user, caller):
    """`geneva.dispatch_due()` and `flask_geneva.ext.operations.dispatch_due()` are the
    same dispatcher run as the Celery task: they recover dead workers' executions
    (not old ones without a worker) and record the run (R-WRK-13, R-HK-40)."""
    from flask_geneva.ext import operations

    run = (
        geneva.dispatch_due
        if caller == "geneva.dispatch_due"
        else operations.dispatch_due
    )
    with clock.frozen(T0):
        dead = _add_worker(DEAD_AFTER + timedelta(seconds=1))
        abandoned = CountingOneStep.create(hero=user)
        _in_progress_of(abandoned, dead, T0 - timedelta(seconds=5))
        live = _add_worker(timedelta(seconds=1))
        running = CountingOneStep.create(hero=make_user("live@example.com"))
        _in_progress_of(running, live, T0 - timedelta(days=1))
        old = CountingOneStep.create(hero=make_user())
        make_in_progress(old, T0 - timedelta(days=1))
        assert run() == 0
        runs = worker_registry_runs()
    db.session.refresh(abandoned)
    db.session.refresh(running)
    db.session.refresh(old)
    assert (abandoned.state, running.state, old.state) == (
        "ready",
        "performing",
        "performing",
    )
    assert runs["dispatcher"]["summary"] == {"published": 0, "recovered": 1}


def worker_registry_runs():
    from flask_geneva.engine.operators import maintenance_runs

    context = current_context()
    return maintenance_runs.last_runs(context.session, config=context.settings)


def test_status_and_gauges_show_live_and_dead_workers(app, user):
    """`status --json` lists workers as alive/dead with what they hold; housekeeping
    emits the worker gauges (R-WRK-09)."""
    from flask_geneva.engine.workers.health import worker_overview
    from tests.support.housekeeping import RecordingMetrics

    with clock.frozen(T0):
        live = _add_worker(timedelta(seconds=5))
        dead = _add_worker(timedelta(hours=1))
        _in_progress_of(
            CountingOneStep.create(hero=user), dead, T0 - timedelta(seconds=5)
        )
        _in_progress_of(
            CountingOneStep.create(hero=make_user()), live, T0 - timedelta(hours=5)
        )
        overview = worker_overview(db.session, config=current_context().settings)
        assert (overview["alive"], overview["dead"]) == (1, 1)
        assert overview["abandoned_executions"] == 1
        by_id = {worker["id"]: worker for worker in overview["workers"]}
        assert by_id[live]["alive"] is True
        assert by_id[dead]["alive"] is False
        assert (by_id[live]["in_progress"], by_id[dead]["in_progress"]) == (1, 1)
        assert by_id[dead]["queues"] == ["default"]
        metrics = RecordingMetrics()
        app.config["GENEVA_METRICS"] = metrics
        run_housekeeping()
    assert metrics.value("geneva_drive.workers_alive") == 1
    assert metrics.value("geneva_drive.workers_dead") == 0  # recovered and pruned
    assert metrics.value("geneva_drive.executions_abandoned") == 0


def test_operator_recover_refuses_an_execution_of_a_live_worker(app, user):
    """recover() without force refuses while the holding worker heartbeats; a dead
    worker's execution needs no force; force always works (R-HK-28, R-WRK-06)."""
    from flask_geneva import InvalidStateError

    with clock.frozen(T0):
        live = _add_worker(timedelta(seconds=5))
        workflow = CountingOneStep.create(hero=user)
        _in_progress_of(workflow, live, T0 - timedelta(hours=2))
        with pytest.raises(InvalidStateError, match=f"its worker {live} is alive"):
            workflow.recover()
        workflow.recover(force=True)
        dead = _add_worker(timedelta(hours=1))
        other = CountingOneStep.create(hero=make_user())
        _in_progress_of(other, dead, T0 - timedelta(hours=2))
        other.recover()
    db.session.refresh(workflow)
    db.session.refresh(other)
    assert (workflow.state, other.state) == ("ready", "ready")


class WrkHeartbeating(geneva.Workflow):
    @step
    def long(self):
        self.hero.counter = 1 if self.heartbeat() else -1


class WrkCheckpointing(geneva.Workflow):
    @resumable_step
    def sweep(self, it):
        for value in range(3):
            it.set(value)
            it.checkpoint()


def test_a_step_heartbeat_and_a_checkpoint_prove_liveness(app, user):
    """self.heartbeat() writes the worker's heartbeat now; a checkpoint counts as
    one; outside a registered worker heartbeat() does nothing (R-WRK-11)."""
    outside = WrkHeartbeating.create(hero=make_user())
    perform_next_step(outside)
    assert db.session.get(type(user), outside.hero_id).counter == -1
    with clock.frozen(T0) as frozen:
        registration = worker_registry.register_worker(current_context())
        try:

            def last_beat():
                value = db.session.scalar(
                    sa.select(workers_table().c.last_heartbeat_at)
                )
                db.session.rollback()
                return value

            # The database's clock writes the beats (R-WRK-15): each step's
            # beat is later than the one before, whatever the frozen clock.
            _age_heartbeat(registration.identity.worker_id, timedelta(seconds=30))
            registered = last_beat()
            frozen.advance(timedelta(seconds=10))
            perform_next_step(WrkHeartbeating.create(hero=user))
            db.session.refresh(user)
            assert user.counter == 1
            stepped = last_beat()
            assert stepped > registered
            _age_heartbeat(registration.identity.worker_id, timedelta(seconds=30))
            aged = last_beat()
            registration._last_beat -= 60  # half an interval ago and more
            perform_next_step(WrkCheckpointing.create(hero=make_user("c@example.com")))
            assert last_beat() > aged
        finally:
            db.session.rollback()
            worker_registry.deregister_workers()


@pytest.mark.backends("postgresql", "mysql")
def test_a_worker_alive_again_under_the_lock_keeps_its_execution(
    app, user, monkeypatch
):
    """Liveness is checked again once the rows are locked: a worker that
    heartbeats between the candidates' read and its row's lock (after a freeze or
    a database outage) keeps its execution; the dead one's is recovered (R-WRK-06).
    """
    from flask_geneva.db.queries import maintenance as maintenance_queries

    with clock.frozen(T0):
        _add_worker(timedelta(0))  # another worker heartbeats (R-WRK-14)
        stale = DEAD_AFTER + timedelta(seconds=30)
        dead = _add_worker(stale)
        revived = _add_worker(stale)
        first = CountingOneStep.create(hero=user)
        _in_progress_of(first, dead, T0 - timedelta(seconds=20))
        second = CountingOneStep.create(hero=make_user())
        revived_execution = _in_progress_of(second, revived, T0 - timedelta(seconds=10))
        read_candidates = maintenance_queries.stuck_in_progress_candidates

        def candidates_then_a_heartbeat(*args, **kwargs):
            for number, candidate in enumerate(read_candidates(*args, **kwargs)):
                if number == 1:
                    # The revived worker writes a heartbeat before its row is locked.
                    with db.engine.begin() as connection:
                        worker_rows.touch_worker(connection, workers_table(), revived)
                yield candidate

        monkeypatch.setattr(
            maintenance_queries,
            "stuck_in_progress_candidates",
            candidates_then_a_heartbeat,
        )
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    db.session.refresh(first)
    db.session.refresh(second)
    assert (first.state, second.state) == ("ready", "performing")
    with db.engine.connect() as connection:
        state = connection.scalar(
            sa.select(geneva.StepExecution.__table__.c.state).where(
                geneva.StepExecution.__table__.c.id == revived_execution
            )
        )
    assert state == "in_progress"


def test_a_stopped_registration_never_writes_its_row_again(app):
    """After a clean shutdown's deregistration, a heartbeat still in flight does
    not re-insert the worker row (R-WRK-04)."""
    identity = worker_rows.WorkerIdentity(
        str(uuid.uuid4()), "host", 4242, "celery@host", ("default",), "test"
    )
    registration = worker_registry.WorkerRegistration(
        identity, db.engine, workers_table(), interval_seconds=60
    )
    registration.start()
    assert identity.worker_id in _worker_ids()
    registration.stop()
    assert identity.worker_id not in _worker_ids()
    registration.heartbeat()
    assert identity.worker_id not in _worker_ids()


def test_heartbeats_do_not_wait_for_the_hosts_connection_pool(app):
    """Steps holding every connection of the host's pool do not delay the
    registration or its heartbeats: they write through a pool of their own
    (R-WRK-03)."""
    host = sa.create_engine(
        db.engine.url, pool_size=1, max_overflow=0, pool_timeout=0.5
    )
    identity = worker_rows.WorkerIdentity(
        str(uuid.uuid4()), "host", 4242, "celery@host", ("default",), "test"
    )
    registration = worker_registry.WorkerRegistration(
        identity, host, workers_table(), interval_seconds=60
    )
    try:
        with host.connect() as held:  # a running step holds the only connection
            assert held.closed is False
            registration.start()
            aged = _age_heartbeat(identity.worker_id, timedelta(hours=1))
            registration.heartbeat()
            with db.engine.connect() as connection:
                beat = worker_rows.last_heartbeat(
                    connection, workers_table(), identity.worker_id
                )
            assert beat is not None
            assert aged is not None
            assert beat > aged
    finally:
        registration.stop()
        host.dispose()
    assert identity.worker_id not in _worker_ids()


def _unreachable_engine(tmp_path):
    """An engine whose every connection fails: the database is down."""
    return sa.create_engine(f"sqlite:///{tmp_path / 'missing-dir' / 'db.sqlite3'}")


def test_a_registration_that_fails_is_retried_by_its_heartbeat_thread(app, tmp_path):
    """A worker whose registration fails (the database down at its start) runs
    on and keeps trying from its heartbeat thread: it names no worker in its
    claims until the row is written, then registers as soon as the database is
    back (R-WRK-16)."""
    from tests.support.worker_harness import wait_for

    identity = worker_rows.WorkerIdentity(
        str(uuid.uuid4()), "host", 4242, "celery@host", ("default",), "test"
    )
    registration = worker_registry.WorkerRegistration(
        identity, db.engine, workers_table(), interval_seconds=0.2
    )
    working = registration._writer
    registration._writer = _unreachable_engine(tmp_path)
    try:
        registration.start()
        assert registration.registered is False
        assert identity.worker_id not in _worker_ids()
        registration._writer = working  # the database is back
        # The thread sets the flag after its commit: once it is set, the row is
        # there (the row can be seen a moment before the flag).
        wait_for(lambda: registration.registered, timeout=30)
        assert identity.worker_id in _worker_ids()
    finally:
        registration.stop()
    assert identity.worker_id not in _worker_ids()


def test_a_step_heartbeat_during_a_database_blip_warns_and_returns_false(
    app, user, tmp_path, caplog
):
    """self.heartbeat() never fails the step for a liveness write: when the
    database refuses it, it logs a warning and returns False (R-WRK-11)."""
    registration = worker_registry.register_worker(current_context())
    assert registration is not None
    working = registration._writer
    registration._writer = _unreachable_engine(tmp_path)
    try:
        workflow = WrkHeartbeating.create(hero=user)
        perform_next_step(workflow)
        db.session.refresh(user)
        assert user.counter == -1
        db.session.refresh(workflow)
        assert workflow.state == "finished"
    finally:
        registration._writer = working
        db.session.rollback()
        worker_registry.deregister_workers()
    assert "heartbeat of worker" in caplog.text
    assert "failed" in caplog.text
