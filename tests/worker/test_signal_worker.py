"""A woken step whose publication was lost runs on a real worker (R-WSIG-31).

A real ``celery worker`` with embedded beat (the dispatcher every second,
``GENEVA_PUBLISH_TIMEOUT`` 1 s) parks a ``wait_for`` step. The test process then
delivers the signal with its publication dropped after the commit, as when the
sender dies between its commit and the broker: the execution is woken
(``scheduled``, the signal claimed) but no message exists. The dispatcher's next
run publishes it again and the worker runs the step with the signal.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import reader
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import worker_test_app

INCLUDE = ("--include", "tests.worker.test_signal_worker")
DISPATCH_INTERVAL = 1.0
PUBLISH_TIMEOUT = 1.0


class SigWorkerPayment(basic.geneva.Workflow):
    """Waits for ``payment_confirmed``; adds the paid amount to the hero's counter."""

    @step(wait_for="payment_confirmed")
    def ship(self):
        self.hero.counter += self.received_signal.payload["amount"]


@pytest.fixture
def signal_app(broker_url, worker_database_url, monkeypatch):
    """The test's app and the workers' settings: dispatcher every second."""
    monkeypatch.setenv("GENEVA_TEST_DISPATCH_INTERVAL", str(DISPATCH_INTERVAL))
    monkeypatch.setenv("GENEVA_TEST_PUBLISH_TIMEOUT", str(PUBLISH_TIMEOUT))
    app = worker_test_app(broker_url, worker_database_url)
    yield app
    dispose(app)


def _read(app, statement):
    with reader(app) as connection:
        return list(connection.execute(statement).mappings())


def _signals(app, workflow_id):
    table = basic.geneva.WorkflowSignal.__table__
    return _read(app, sa.select(table).where(table.c.workflow_id == workflow_id))


def _deliver_with_lost_publication(app, workflow_id):
    """Signal the workflow; its wake is committed but never reaches the broker."""
    with app.app_context():
        app.config["GENEVA_TASK_BACKEND"] = "recording"
        basic.geneva.reload_settings(app)
        state = app.extensions["geneva"]
        state.recording_backend.clear()
        workflow = basic.db.session.get(SigWorkerPayment, workflow_id)
        delivery = workflow.signal(
            "payment_confirmed", {"amount": 42}, idempotency_key="evt_1"
        )
        lost = [p.task_id for p in state.recording_backend.enqueued]
        state.recording_backend.clear()  # dropped: the broker never sees it
        app.config["GENEVA_TASK_BACKEND"] = "celery"
        basic.geneva.reload_settings(app)
        basic.db.session.remove()
    return delivery.woken, lost


def test_a_woken_step_whose_publication_was_lost_runs_after_the_dispatcher(
    signal_app, start_worker, tmp_path
):
    """The dispatcher publishes the lost wake again and the step runs with its signal (R-WSIG-11, R-WSIG-31)."""
    app = signal_app
    workflow_id, hero_id = create_workflow(
        app, SigWorkerPayment, "lost-wake@example.com"
    )
    start_worker(*INCLUDE, "--beat", f"--schedule={tmp_path / 'beat-schedule'}")
    wait_for(
        lambda: [e["state"] for e in execution_rows(app, workflow_id)] == ["waiting"],
        timeout=60,
    )
    [parked] = execution_rows(app, workflow_id)

    woken, lost = _deliver_with_lost_publication(app, workflow_id)

    assert woken == (parked["id"],)
    assert len(lost) == 1  # published after the commit, then dropped
    [signal] = _signals(app, workflow_id)
    assert signal["state"] in ("claimed", "consumed")

    def finished():
        [execution] = execution_rows(app, workflow_id)
        return execution["state"] == "completed"

    wait_for(finished, timeout=60, interval=0.25)
    [execution] = execution_rows(app, workflow_id)
    assert (execution["state"], execution["outcome"]) == ("completed", "success")
    assert execution["signal_id"] == signal["id"]
    # It ran from the dispatcher's publication, not the lost one.
    assert execution["job_id"] not in (None, lost[0])
    [signal] = _signals(app, workflow_id)
    assert signal["state"] == "consumed"
    workflows = basic.geneva.Workflow.__table__
    [workflow] = _read(app, sa.select(workflows).where(workflows.c.id == workflow_id))
    assert workflow["state"] == "finished"
    users = basic.User.__table__
    [user] = _read(app, sa.select(users).where(users.c.id == hero_id))
    assert user["counter"] == 42
