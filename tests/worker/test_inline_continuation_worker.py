"""A real worker runs a 10-step workflow with fewer task deliveries than steps (§7.9)."""

from __future__ import annotations

import re

import redis
import sqlalchemy as sa

from tests.worker.conftest import prepare_database
from tests.worker.conftest import wait_for


def test_ten_steps_finish_with_fewer_deliveries_than_steps(
    start_worker, broker_url, worker_database_url, tmp_path
):
    """The worker continues inline: one delivery runs several steps (R-EXE-70, R-EXE-72)."""
    redis.Redis.from_url(broker_url).flushdb()
    from tests.apps import basic
    from tests.apps import worker_app

    app, _ = worker_app.build_app(worker_database_url, broker_url)
    prepare_database(app)
    with app.app_context():
        hero = basic.User(email="inline@example.com")
        basic.db.session.add(hero)
        basic.db.session.commit()
        workflow = worker_app.WorkerTenSteps.create(hero=hero)
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
            sa.select(execution_cls).where(execution_cls.workflow_id == workflow_id)
        ).all()
        assert len(executions) == 10
        assert {(e.state, e.outcome) for e in executions} == {("completed", "success")}
        assert basic.db.session.get(basic.User, hero_id).counter == 10
        basic.db.session.remove()
        for engine in basic.db.engines.values():
            engine.dispose()
    log = (tmp_path / "worker-0.log").read_text(errors="replace")
    deliveries = len(
        re.findall(r"Task flask_geneva\.perform_step\[[^\]]+\] received", log)
    )
    assert 1 <= deliveries < 10, log[-3000:]
