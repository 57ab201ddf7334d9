"""Cleanup's DELETEs lock only the rows they delete (R-HK-12, R-CFG-04, h46).

On MySQL/MariaDB a ``DELETE … WHERE id IN (SELECT … FROM executions JOIN
workflows …)`` reads its subquery's tables with shared locks at every isolation
level (InnoDB makes a consistent read of them only for INSERT … SELECT, UPDATE
and CREATE … SELECT), so the cleanup locked every live workflow and execution
its scan passed: it waited for an operator or a worker holding one of them and,
under load, deadlocked with a worker's claim or finalize, failing housekeeping
with error 1213 while nothing was even eligible (the h46 soak,
tests/engine/operators/test_operator_soak.py).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva.core import clock
from flask_geneva.db import locks as row_locks
from flask_geneva.engine.operators.housekeeping import cleanup
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.housekeeping import RETENTION
from tests.support.housekeeping import T0
from tests.support.housekeeping import retention_settings  # noqa: F401 - "app_config"
from tests.support.innodb_locks import BOTH_ISOLATION_LEVELS
from tests.support.workers import insert_worker
from tests.support.workers import running_on
from tests.support.workers import workers_table
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user


def _with_short_lock_wait(app, outcome, housekeeping_pass):
    """Run ``housekeeping_pass(session, config=...)`` on a connection that waits
    at most 2 s for a row lock; its result or error lands in ``outcome``."""
    with app.app_context(), db.engine.connect() as connection:
        connection.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 2")
        connection.commit()
        session = current_context().bind(orm.Session(bind=connection))
        try:
            outcome["deleted"] = housekeeping_pass(
                session, config=current_context().settings
            )
        except Exception as error:  # noqa: BLE001 - handed to the test
            outcome["error"] = error
        finally:
            session.close()


def _run_while_held(app, session, housekeeping_pass):
    """Run ``housekeeping_pass`` in another thread (:func:`_with_short_lock_wait`)
    while ``session`` holds its locks, then roll ``session`` back; the pass must
    have ended without an error. Returns its outcome (``deleted``)."""
    outcome: dict = {}
    try:
        thread = threading.Thread(
            target=_with_short_lock_wait, args=(app, outcome, housekeeping_pass)
        )
        thread.start()
        thread.join(timeout=30)
    finally:
        session.rollback()
        db.session.remove()
    assert not thread.is_alive()
    assert "error" not in outcome, repr(outcome.get("error"))
    return outcome


@BOTH_ISOLATION_LEVELS
@pytest.mark.backends("mysql")
@pytest.mark.parametrize("holder", ["operator", "claim"])
def test_cleanup_never_waits_for_a_live_workflows_lock(app, geneva_jobs, holder):
    """An operator holds a live workflow's lock (and its active executions'), or
    a worker's claim has written its execution and not committed yet; meanwhile
    cleanup deletes an old finished workflow. The DELETEs lock only the rows
    they delete, so cleanup neither waits for the holder (a lock wait timeout,
    1205) nor deadlocks with it (R-HK-12, R-CFG-04): it deletes the eligible
    rows and leaves the live ones."""
    with clock.frozen(T0) as frozen:
        old = EmptyTwoSteps.create(hero=make_user("old@example.com"))
        speedrun_workflow(old)
        old_id = old.id
        frozen.advance(RETENTION + timedelta(days=1))
        live = EmptyTwoSteps.create(hero=make_user("live@example.com"))
        live_id, live_execution_id = live.id, live.current_execution.id
    db.session.remove()

    session = current_context().bind(db.session())
    row_locks.lock_workflow(session, live_id)
    if holder == "operator":
        assert len(row_locks.lock_active_executions(session, live_id)) == 1
    else:
        table = geneva.StepExecution.__table__
        session.execute(
            sa.update(table)
            .where(table.c.id == live_execution_id)
            .values(state="in_progress")
        )
    with clock.frozen(T0 + RETENTION + timedelta(days=1)):
        outcome = _run_while_held(app, session, cleanup)
    assert outcome["deleted"] == (1, 2)
    assert execution_rows(old_id) == []
    assert [row["state"] for row in execution_rows(live_id)] == ["scheduled"]
    assert count_workflows() == 1


@BOTH_ISOLATION_LEVELS
@pytest.mark.backends("mysql")
def test_pruning_dead_workers_never_waits_for_a_running_steps_lock(app, geneva_jobs):
    """A worker's finalize holds its workflow's and its in-progress execution's
    locks while housekeeping prunes a dead worker that holds nothing: the
    DELETE's ``NOT IN (SELECT worker_id FROM executions …)`` S-locked every
    in-progress execution on MySQL/MariaDB, so pruning waited for the finalize
    (1205; under load a deadlock). It reads the holders without a lock now and
    deletes the dead worker (R-WRK-07, R-CFG-04)."""
    insert_worker(timedelta(0))  # the evidence that heartbeats get through
    live = insert_worker(timedelta(0))
    dead = insert_worker(timedelta(hours=1))
    running = running_on(EmptyTwoSteps, live)
    execution_id = running.current_execution.id
    db.session.remove()

    session = current_context().bind(db.session())
    row_locks.lock_workflow_and_execution(session, execution_id)
    outcome = _run_while_held(app, session, worker_registry.prune_dead_workers)
    assert outcome["deleted"] == 1
    with db.engine.connect() as connection:
        ids = set(connection.scalars(sa.select(workers_table().c.id)))
    assert dead not in ids
    assert live in ids
