"""A real worker runs a 10-step workflow with fewer task deliveries than steps (§7.9)."""

from __future__ import annotations

import re

import sqlalchemy as sa


def test_ten_steps_finish_with_fewer_deliveries_than_steps(run_on_worker, tmp_path):
    """The worker continues inline: one delivery runs several steps (R-EXE-70, R-EXE-72)."""
    from tests.apps import basic
    from tests.apps import worker_app

    app, workflow_id, hero_id = run_on_worker(
        worker_app.WorkerTenSteps, "inline@example.com"
    )
    with app.app_context():
        execution_cls = basic.geneva.StepExecution
        executions = basic.db.session.scalars(
            sa.select(execution_cls).where(execution_cls.workflow_id == workflow_id)
        ).all()
        assert len(executions) == 10
        assert {(e.state, e.outcome) for e in executions} == {("completed", "success")}
        assert basic.db.session.get(basic.User, hero_id).counter == 10
        basic.db.session.remove()
    log = (tmp_path / "worker-0.log").read_text(errors="replace")
    deliveries = len(
        re.findall(r"Task flask_geneva\.perform_step\[[^\]]+\] received", log)
    )
    assert 1 <= deliveries < 10, log[-3000:]
