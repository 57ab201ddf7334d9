"""Celery eager mode, when explicitly allowed, runs steps after the commit (R-TH-21)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import step

db = SQLAlchemy()
geneva = Geneva(db)
RUNS: list[str] = []


class Hero(db.Model):  # type: ignore[name-defined, misc]
    __tablename__ = "eager_heroes"
    id = sa.Column(sa.Integer, primary_key=True)


class EagerThreeSteps(geneva.Workflow):
    @step
    def first(self):
        RUNS.append("first")

    @step
    def second(self):
        RUNS.append("second")

    @step
    def third(self):
        RUNS.append("third")


@pytest.mark.backends("sqlite")  # brings its own SQLite database
def test_allowed_eager_mode_runs_every_step_iteratively(tmp_path):
    """With GENEVA_ALLOW_EAGER, eager tasks run after the commit, one after another (R-TH-21)."""
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'eager.sqlite3'}",
        GENEVA_ALLOW_EAGER=True,
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
    )
    celery = Celery("eager-test")
    celery.conf.task_always_eager = True
    db.init_app(app)
    geneva.init_app(app, celery=celery)
    RUNS.clear()
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
