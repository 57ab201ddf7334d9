"""A real ``celery worker`` process runs a workflow to the end (issue: engine core)."""

from __future__ import annotations

import redis
import sqlalchemy as sa

from tests.worker.conftest import prepare_database
from tests.worker.conftest import wait_for


def test_worker_runs_three_step_workflow_to_finished(
    start_worker, broker_url, worker_database_url
):
    """A worker runs every step once, the waiting one no earlier than due (R-JOB-20, R-SCH-01)."""
    redis.Redis.from_url(broker_url).flushdb()
    from tests.apps import basic
    from tests.apps import worker_app

    app, _ = worker_app.build_app(worker_database_url, broker_url)
    prepare_database(app)
    with app.app_context():
        hero = basic.User(email="worker@example.com")
        basic.db.session.add(hero)
        basic.db.session.commit()
        workflow = worker_app.WorkerThreeSteps.create(hero=hero)
        workflow_id, hero_id = workflow.id, hero.id
        basic.db.session.remove()

    start_worker()

    def finished():
        with app.app_context():
            state = basic.db.session.scalar(
                sa.select(basic.geneva.Workflow.state).where(
                    basic.geneva.Workflow.id == workflow_id
                )
            )
            basic.db.session.remove()
            return state == "finished"

    wait_for(finished, timeout=60)
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
