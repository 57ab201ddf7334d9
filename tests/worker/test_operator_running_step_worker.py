"""Operators acting while a real worker runs a step, or after it was SIGKILLed.

R-EXE-42 (amended), R-EXT-26 and R-HK-28 end to end: the worker imports this
module (``--include``); the step waits for a flag file, so the test acts while the
execution is ``in_progress`` and the body has not returned.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import InvalidStateError
from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_files
from tests.support.worker_harness import worker_test_app
from tests.worker import heartbeat_worker

FLAG_DIR_VARIABLE = "GENEVA_TEST_OP_FLAG_DIR"
INCLUDE = ("--include", "tests.worker.test_operator_running_step_worker")


class OpWorkerCharge(basic.geneva.Workflow):
    """``charge`` adds 100 once released (a payment, say); ``receipt`` adds 1."""

    @step
    def charge(self):
        execution_id = self.current_execution.id
        # End the read transaction: on SQLite (BEGIN IMMEDIATE) it would hold the
        # write lock while the step waits, and the operator could not act.
        basic.db.session.commit()
        heartbeat_worker.block_until_released(FLAG_DIR_VARIABLE, execution_id)
        self.hero.counter += 100

    @step
    def receipt(self):
        self.hero.counter += 1


def _executions(workflow_id):
    execution_cls = basic.geneva.StepExecution
    rows = basic.db.session.execute(
        sa.select(execution_cls.step_name, execution_cls.state, execution_cls.outcome)
        .where(execution_cls.workflow_id == workflow_id)
        .order_by(execution_cls.created_at, execution_cls.id)
    ).all()
    basic.db.session.rollback()
    return [tuple(row) for row in rows]


def _workflow(workflow_id):
    basic.db.session.expire_all()
    return basic.db.session.get(basic.geneva.Workflow, workflow_id)


@pytest.fixture
def op_app(broker_url, worker_database_url, tmp_path, monkeypatch):
    """The test's app on the worker's database, with one hero; the flag folder set."""
    monkeypatch.setenv(FLAG_DIR_VARIABLE, str(tmp_path))
    app = worker_test_app(broker_url, worker_database_url)
    with app.app_context():
        hero = basic.User(email="payer@example.com")
        basic.db.session.add(hero)
        basic.db.session.commit()
        app.config["TEST_HERO_ID"] = hero.id
        basic.db.session.remove()
    return app


def _wait_until(app, workflow_id, predicate):
    def check():
        with app.app_context():
            value = predicate(_executions(workflow_id), _workflow(workflow_id))
            basic.db.session.remove()
            return value

    wait_for(check, timeout=60)


def test_pause_during_a_running_step_never_charges_twice(
    op_app, start_worker, tmp_path
):
    """Paused while the worker runs the step: skip is refused, the finished body is
    recorded completed/success, and resume runs only the next step (R-EXE-42a,
    R-EXT-26, R-EXT-21).
    """
    with op_app.app_context():
        workflow_id = _create(op_app)
    start_worker(*INCLUDE)
    wait_for_files(tmp_path, "started-*")
    with op_app.app_context():
        workflow = _workflow(workflow_id)
        workflow.pause(actor="ops")
        with pytest.raises(InvalidStateError, match="is still in progress"):
            _workflow(workflow_id).skip()
        basic.db.session.remove()
    (tmp_path / "release").touch()
    _wait_until(
        op_app,
        workflow_id,
        lambda rows, wf: rows[0][1] == "completed" and len(rows) == 2,
    )
    with op_app.app_context():
        assert _executions(workflow_id) == [
            ("charge", "completed", "success"),
            ("receipt", "scheduled", None),
        ]
        assert _workflow(workflow_id).state == "paused"
        _workflow(workflow_id).resume(actor="ops")
        basic.db.session.remove()
    _wait_until(op_app, workflow_id, lambda rows, wf: wf.state == "finished")
    with op_app.app_context():
        assert _executions(workflow_id) == [
            ("charge", "completed", "success"),
            ("receipt", "completed", "success"),
        ]
        hero = basic.db.session.get(basic.User, op_app.config["TEST_HERO_ID"])
        assert hero.counter == 101


def test_killed_worker_step_is_recovered_by_the_operator_at_once(
    op_app, start_worker, tmp_path
):
    """After SIGKILL mid-step: pause then resume gives performing back without an
    IntegrityError, and recover(force=True) reschedules the step at once, long
    before the stuck threshold; a new worker finishes the workflow (R-EXT-26,
    R-HK-28).
    """
    with op_app.app_context():
        workflow_id = _create(op_app)
    first = start_worker(*INCLUDE)
    wait_for_files(tmp_path, "started-*")
    first.kill()
    first.wait(timeout=30)
    with op_app.app_context():
        _workflow(workflow_id).pause(actor="ops")
        resumed = _workflow(workflow_id).resume(actor="ops")
        assert resumed.state == "in_progress"
        assert _workflow(workflow_id).state == "performing"
        _workflow(workflow_id).recover(force=True, actor="ops")
        assert _executions(workflow_id) == [
            ("charge", "completed", "recovered"),
            ("charge", "scheduled", None),
        ]
        basic.db.session.remove()
    (tmp_path / "release").touch()
    start_worker(*INCLUDE)
    _wait_until(op_app, workflow_id, lambda rows, wf: wf.state == "finished")
    with op_app.app_context():
        assert _executions(workflow_id) == [
            ("charge", "completed", "recovered"),
            ("charge", "completed", "success"),
            ("receipt", "completed", "success"),
        ]
        actions = _workflow(workflow_id).read_metadata("operator_actions")
        assert [a["action"] for a in actions] == ["pause", "resume", "recover_forced"]
        hero = basic.db.session.get(basic.User, op_app.config["TEST_HERO_ID"])
        assert hero.counter == 101


def _create(app):
    hero = basic.db.session.get(basic.User, app.config["TEST_HERO_ID"])
    workflow_id = OpWorkerCharge.create(hero=hero).id
    basic.db.session.remove()
    return workflow_id
