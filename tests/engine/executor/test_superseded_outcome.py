"""Fencing: a worker whose step was taken over meanwhile has its finalize refused.

SPEC §29.1, R-EXE-41, R-FLT-12. A registered worker runs ``charge``; while its
body runs, the worker looks dead (its heartbeat stale, another worker fresh:
a worker cut off from the database), the dispatcher recovers its execution and
another run takes the step over and finishes the workflow. When the first
body then returns, its finalize finds its execution ended by the recovery:
the outcome is not applied (no second ``receipt``), and the execution keeps
what the body did under ``superseded``, next to the recovery's record.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import step
from flask_geneva.db import workers as worker_rows
from flask_geneva.engine.operators import dispatcher
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workers import insert_worker
from tests.support.workers import workers_table
from tests.support.workflow import execution_rows
from tests.support.workflow import in_other_thread
from tests.support.workflow import workflow_row

ran: list[str] = []


def _take_over(workflow_id):
    """In another thread: the running worker looks cut off (no heartbeat for
    10 minutes while another worker heartbeats), the dispatcher recovers its
    execution, and the recovered step runs to the workflow's end."""
    me = worker_registry.current_worker_id(db.session)
    db.session.rollback()
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(workers_table())
            .where(workers_table().c.id == me)
            .values(
                last_heartbeat_at=worker_rows.DatabaseTime(None, timedelta(minutes=10))
            )
        )
    insert_worker(timedelta(0))
    context = current_context()
    context.publisher.clear()
    assert dispatcher.run_dispatcher(context).recovered == 1
    [publication] = context.publisher.enqueued
    perform_step_execution(publication.step_execution_id)


class TakenOver(geneva.Workflow):
    @step
    def charge(self):
        ran.append("charge")
        if len(ran) == 1:
            workflow_id = self.id
            in_other_thread(lambda: _take_over(workflow_id))

    @step
    def receipt(self):
        ran.append("receipt")


@pytest.fixture
def app_config():
    # No heartbeat of this process's registration during the test.
    return {
        "GENEVA_WORKER_HEARTBEAT_INTERVAL": timedelta(seconds=60),
        "GENEVA_WORKER_DEAD_AFTER": timedelta(seconds=120),
        "GENEVA_RELEASE_SPREAD": 0,
    }


@pytest.fixture
def registration(app):
    registered = worker_registry.register_worker(current_context())
    assert registered is not None
    assert registered.registered
    yield registered
    db.session.rollback()
    worker_registry.deregister_workers()


def test_a_late_finalize_after_a_takeover_is_refused_and_audited(
    registration, user, caplog
):
    """R-FLT-12: the takeover wins; the late body's outcome is recorded as
    superseded, the workflow finished once."""
    ran.clear()
    workflow = TakenOver.create(hero=user)
    workflow_id, first_id = workflow.id, workflow.current_execution.id
    db.session.remove()
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    perform_step_execution(first_id)
    db.session.remove()
    assert ran == ["charge", "charge", "receipt"]
    assert workflow_row(workflow_id).state == "finished"
    rows = execution_rows(workflow_id)
    assert [(r.step_name, r.state, r.outcome) for r in rows] == [
        ("charge", "completed", "recovered"),
        ("charge", "completed", "success"),
        ("receipt", "completed", "success"),
    ]
    first = db.session.get(geneva.StepExecution, first_id)
    assert first.read_metadata("recovery")["cause"] == "worker_lost"
    assert first.error_class_name == "flask_geneva.exceptions.WorkerLostError"
    superseded = first.read_metadata("superseded")
    assert superseded is not None
    assert {key: superseded[key] for key in superseded if key != "body_ended_at"} == {
        "outcome": "completed",
        "error": None,
        "found_state": "completed",
        "found_outcome": "recovered",
        "worker_id": registration.identity.worker_id,
    }
    [warning] = [r for r in caplog.records if "superseded" in r.getMessage()]
    assert str(first_id) in warning.getMessage()
