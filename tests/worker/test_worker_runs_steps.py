"""A real ``celery worker`` process runs a workflow to the end (issue: engine core)."""

from __future__ import annotations

import sqlalchemy as sa

from tests.worker.conftest import create_workflow
from tests.worker.conftest import wait_for_state
from tests.worker.conftest import worker_test_app


def test_worker_runs_three_step_workflow_to_finished(
    start_worker, broker_url, worker_database_url
):
    """A worker runs every step once, the waiting one no earlier than due (R-JOB-20, R-SCH-01)."""
    from tests.apps import basic
    from tests.apps import worker_app

    app = worker_test_app(broker_url, worker_database_url)
    workflow_id, hero_id = create_workflow(
        app, worker_app.WorkerThreeSteps, "worker@example.com"
    )

    start_worker()

    wait_for_state(app, workflow_id, "finished")
    with app.app_context():
        execution_cls = basic.geneva.StepExecution
        executions = basic.db.session.scalars(
            sa.select(execution_cls)
            .where(execution_cls.workflow_id == workflow_id)
            .order_by(execution_cls.created_at, execution_cls.id)
        ).all()
        assert [(e.step_name, e.state, e.outcome) for e in executions] == [
            ("first", "completed", "success"),
            ("second", "completed", "success"),
            ("third", "completed", "success"),
        ]
        second = executions[1]
        assert second.started_at >= second.scheduled_for
        assert basic.db.session.get(basic.User, hero_id).counter == 111
        basic.db.session.remove()
        for engine in basic.db.engines.values():
            engine.dispose()  # no pooled connection outlives the test
