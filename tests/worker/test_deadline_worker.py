"""A deadline cancels a waiting workflow through the beat-run dispatcher on a
real worker (SPEC §27.1, R-DL-20, R-DL-40).

A real ``celery worker`` with embedded beat (the dispatcher every second) runs
a workflow whose class gives it a 3-second deadline and whose only step waits
for a signal that never comes (with a timeout of a day). The dispatcher's run
after the deadline cancels the workflow and its parked execution.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import reader
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app

INCLUDE = ("--include", "tests.worker.test_deadline_worker")
DISPATCH_INTERVAL = 1.0


class DeadlineWorkerWait(basic.geneva.Workflow):
    """Waits a day for a signal; its deadline is 3 seconds after creation."""

    __geneva_deadline__ = timedelta(seconds=3)

    @step(wait_for="never_sent", wait_timeout=timedelta(days=1))
    def gate(self):
        pass


@pytest.fixture
def deadline_app(broker_url, worker_database_url, monkeypatch):
    """The test's app and the workers' settings: dispatcher every second."""
    monkeypatch.setenv("GENEVA_TEST_DISPATCH_INTERVAL", str(DISPATCH_INTERVAL))
    app = worker_test_app(broker_url, worker_database_url)
    yield app
    dispose(app)


def test_the_beat_run_dispatcher_cancels_a_waiting_workflow_at_its_deadline(
    deadline_app, start_worker, tmp_path
):
    """The parked step is canceled with its workflow once the deadline passed, recorded via "deadline" (R-DL-20, R-DL-21, R-DL-40)."""
    app = deadline_app
    workflow_id, _ = create_workflow(app, DeadlineWorkerWait, "deadline@example.com")
    start_worker(*INCLUDE, "--beat", f"--schedule={tmp_path / 'beat-schedule'}")
    wait_for(
        lambda: (
            [e["state"] for e in execution_rows(app, workflow_id)]
            in (["waiting"], ["canceled"])
        ),
        timeout=60,
    )
    wait_for_state(app, workflow_id, "canceled", timeout=60)
    [execution] = execution_rows(app, workflow_id)
    assert (execution["state"], execution["outcome"]) == ("canceled", "canceled")
    table = basic.geneva.Workflow.__table__
    with reader(app) as connection:
        workflow = (
            connection.execute(sa.select(table).where(table.c.id == workflow_id))
            .mappings()
            .one()
        )
    # Never before the deadline: the dispatcher acts only once it passed.
    assert workflow["transitioned_at"] >= workflow["deadline_at"]
    metadata = workflow["metadata"]
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    [action] = metadata["operator_actions"]
    assert (action["action"], action["via"]) == ("cancel", "deadline")
    assert action["from_state"] == "ready"
