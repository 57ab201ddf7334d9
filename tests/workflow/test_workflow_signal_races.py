"""Workflow signals under concurrency, on PostgreSQL and MariaDB (R-WSIG-22, R-WSIG-30).

Small versions of the issue-18 race tests (the 1,000-round one is still to
come): threads deliver one idempotency key at once, and a signal races the
step's park, round after round, with no lost wake-up.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.workflow.support import make_user

pytestmark = pytest.mark.backends("postgresql", "mysql")

THREADS = 8
ROUNDS = 25


class SigRace(geneva.Workflow):
    @step(wait_for="go")
    def use(self):
        self.hero.counter += 1


def _run_together(app, actions):
    barrier = threading.Barrier(len(actions))
    errors: list[BaseException] = []
    results: list[object] = [None] * len(actions)

    def run(index, action):
        try:
            with app.app_context():
                barrier.wait(timeout=30)
                results[index] = action()
                db.session.remove()
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(index, action))
        for index, action in enumerate(actions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    return results


def _rows(table, workflow_id):
    with db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        return list(
            connection.execute(
                sa.select(table)
                .where(table.c.workflow_id == workflow_id)
                .order_by(table.c.id)
            ).mappings()
        )


def test_eight_deliveries_with_one_key_give_one_row_and_one_wake(
    app, user, geneva_jobs
):
    """8 threads send one key to a parked step: one row, one wake (R-WSIG-22, R-WSIG-30)."""
    workflow = SigRace.create(hero=user)
    geneva_jobs.drain()
    workflow_id = workflow.id
    db.session.remove()

    def deliver():
        target = db.session.get(SigRace, workflow_id)
        delivery = target.signal("go", {"n": 1}, idempotency_key="evt-42")
        return (delivery.duplicate, delivery.woken)

    results = _run_together(app, [deliver] * THREADS)
    assert sorted(duplicate for duplicate, _ in results) == [False] + [True] * 7
    assert sum(len(woken) for _, woken in results) == 1
    assert len(_rows(geneva.WorkflowSignal.__table__, workflow_id)) == 1
    assert len(geneva_jobs.enqueued) == 1
    geneva_jobs.drain()
    executions = _rows(geneva.StepExecution.__table__, workflow_id)
    assert [(e["state"], e["outcome"]) for e in executions] == [
        ("completed", "success")
    ]


def test_a_signal_racing_the_park_is_never_lost(app, geneva_jobs):
    """Round after round the step's gate and the sender race: no wake-up is lost (R-WSIG-30)."""
    signal_table = geneva.WorkflowSignal.__table__
    execution_table = geneva.StepExecution.__table__
    outcomes = {"claimed at the gate": 0, "woken by the sender": 0}
    for round_number in range(ROUNDS):
        hero = make_user(f"race{round_number}@example.com")
        workflow = SigRace.create(hero=hero)
        workflow_id = workflow.id
        execution_id = workflow.current_execution.id
        geneva_jobs.clear()
        db.session.remove()

        def execute(execution_id=execution_id):
            Executor.execute(execution_id)

        def send(workflow_id=workflow_id):
            db.session.get(SigRace, workflow_id).signal("go")

        _run_together(app, [execute, send])

        execution = _rows(execution_table, workflow_id)[0]
        signal = _rows(signal_table, workflow_id)[0]
        # Lost wake-up: the step parked while its signal stayed pending.
        assert not (execution["state"] == "waiting" and signal["state"] == "pending")
        if execution["state"] == "completed":
            outcomes["claimed at the gate"] += 1
        else:
            assert execution["state"] == "scheduled"
            assert execution["signal_id"] == signal["id"]
            outcomes["woken by the sender"] += 1
        speedrun_workflow(db.session.get(SigRace, workflow_id))
        assert _rows(signal_table, workflow_id)[0]["state"] == "consumed"
        db.session.remove()
    assert sum(outcomes.values()) == ROUNDS
