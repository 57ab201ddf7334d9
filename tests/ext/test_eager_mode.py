"""Celery eager mode, when explicitly allowed, runs steps after the commit (R-TH-21).

It never runs a waiting step before its time: the dispatcher runs it once due
(R-EXE-18).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.publications import DEFERRED_JOB_ID
from tests.support.step_bodies import recording_steps

db = SQLAlchemy()
geneva = Geneva(db)
RUNS: list[str] = []


class Hero(db.Model):  # type: ignore[name-defined, misc]
    __tablename__ = "eager_heroes"
    id = sa.Column(sa.Integer, primary_key=True)


class EagerThreeSteps(geneva.Workflow):
    _steps = recording_steps(RUNS, "first", "second", "third")


def _eager_app(database: Path) -> Flask:
    """An app on its own SQLite file whose Celery app runs tasks eagerly, with
    GENEVA_ALLOW_EAGER; :data:`RUNS` is emptied."""
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{database}",
        GENEVA_ALLOW_EAGER=True,
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
    )
    celery = Celery(f"eager-{database.stem}")
    celery.conf.task_always_eager = True
    db.init_app(app)
    geneva.init_app(app, celery=celery)
    RUNS.clear()
    return app


@pytest.mark.backends("sqlite")  # brings its own SQLite database
def test_allowed_eager_mode_runs_every_step_iteratively(tmp_path):
    """With GENEVA_ALLOW_EAGER, eager tasks run after the commit, one after another (R-TH-21)."""
    app = _eager_app(tmp_path / "eager.sqlite3")
    with app.app_context():
        db.create_all()
        hero = Hero()
        db.session.add(hero)
        db.session.commit()
        workflow = EagerThreeSteps.create(hero=hero)
        workflow_id = workflow.id
        db.session.remove()
        state = db.session.scalar(
            sa.select(geneva.Workflow.state).where(geneva.Workflow.id == workflow_id)
        )
        outcomes = db.session.scalars(
            sa.select(geneva.StepExecution.outcome)
            .where(geneva.StepExecution.workflow_id == workflow_id)
            .order_by(geneva.StepExecution.id)
        ).all()
        db.session.remove()
        db.drop_all()
    assert RUNS == ["first", "second", "third"]
    assert state == "finished"
    assert outcomes == ["success", "success", "success"]


class EagerWaitingSecond(geneva.Workflow):
    @step
    def first(self):
        RUNS.append("first")

    @step(wait=timedelta(minutes=10))
    def second(self):
        RUNS.append("second")


class EagerWaitingFirst(geneva.Workflow):
    @step(wait=timedelta(minutes=10))
    def only(self):
        RUNS.append("only")


def _execution_rows(workflow_id):
    table = geneva.StepExecution.__table__
    with db.engine.connect() as connection:
        return (
            connection.execute(
                sa.select(table.c.step_name, table.c.state, table.c.job_id)
                .where(table.c.workflow_id == workflow_id)
                .order_by(table.c.id)
            )
            .mappings()
            .all()
        )


@pytest.mark.backends("sqlite")  # brings its own SQLite database
def test_eager_mode_never_runs_a_waiting_step_before_its_time(tmp_path):
    """Eager mode leaves a waiting step to the dispatcher, which runs it once due (R-EXE-18, R-TH-21, R-DSP-02)."""
    app = _eager_app(tmp_path / "eager-wait.sqlite3")
    t0 = datetime(2031, 5, 4, 8, 0, tzinfo=UTC)
    with app.app_context(), clock.frozen(t0) as frozen:
        db.create_all()
        hero = Hero()
        db.session.add(hero)
        db.session.commit()
        waiting_first = EagerWaitingFirst.create(hero=hero).id
        waiting_second = EagerWaitingSecond.create(hero=hero).id
        assert RUNS == ["first"]
        assert [tuple(r.values()) for r in _execution_rows(waiting_first)] == [
            ("only", "scheduled", DEFERRED_JOB_ID)
        ]
        assert [tuple(r.values()) for r in _execution_rows(waiting_second)] == [
            ("first", "completed", _execution_rows(waiting_second)[0]["job_id"]),
            ("second", "scheduled", DEFERRED_JOB_ID),
        ]
        # Within the broker horizon, but not due: eager mode cannot hold it.
        frozen.advance(timedelta(minutes=5))
        assert geneva.dispatch_due() == 0
        assert RUNS == ["first"]

        frozen.advance(timedelta(minutes=5))
        assert geneva.dispatch_due() == 2
        assert sorted(RUNS) == ["first", "only", "second"]
        states = db.session.execute(
            sa.select(geneva.Workflow.state).order_by(geneva.Workflow.id)
        ).scalars()
        assert list(states) == ["finished", "finished"]
        db.session.remove()
        db.drop_all()
