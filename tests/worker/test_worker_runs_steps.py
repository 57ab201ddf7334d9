"""A real ``celery worker`` process runs a workflow to the end (issue: engine core)."""

from __future__ import annotations

import sqlalchemy as sa

from tests.support.common_workflows import WaitingThreeSteps


def test_worker_runs_three_step_workflow_to_finished(run_on_worker):
    """A worker runs every step once, the waiting one no earlier than due (R-JOB-20, R-SCH-01)."""
    from tests.apps import basic

    app, workflow_id, hero_id = run_on_worker(WaitingThreeSteps, "worker@example.com")
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
