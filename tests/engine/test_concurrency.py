"""Concurrent deliveries of one execution: the row lock lets exactly one run it."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

DELIVERIES = 8


class ConcurrencyCountingWorkflow(geneva.Workflow):
    @step
    def count(self):
        # Increment in SQL so that a second run would show up as 2.
        db.session.execute(
            sa.update(User)
            .where(User.id == self.hero_id)
            .values(counter=User.counter + 1)
        )

    @step
    def after(self):
        pass


def test_parallel_deliveries_run_the_body_once(app, user, geneva_jobs):
    """8 threads deliver one execution at once: one body run, one active execution (R-EXE-10/11, BTR-13)."""
    workflow = ConcurrencyCountingWorkflow.create(hero=user)
    execution_id = workflow.current_execution.id
    workflow_id, user_id = workflow.id, user.id
    db.session.remove()

    barrier = threading.Barrier(DELIVERIES)
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            with app.app_context():
                barrier.wait(timeout=30)
                Executor.execute(execution_id)
                db.session.remove()
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=deliver) for _ in range(DELIVERIES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    with app.app_context():
        assert db.session.get(User, user_id).counter == 1
        executions = db.session.scalars(
            sa.select(geneva.StepExecution)
            .where(geneva.StepExecution.workflow_id == workflow_id)
            .order_by(geneva.StepExecution.id)
        ).all()
        assert [(e.step_name, e.state, e.outcome) for e in executions] == [
            ("count", "completed", "success"),
            ("after", "scheduled", None),
        ]
        active = [e for e in executions if e.state in ("scheduled", "in_progress")]
        assert len(active) == 1
