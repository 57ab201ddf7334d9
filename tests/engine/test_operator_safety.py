"""Operator calls on rows the code no longer knows, and clear errors for bad calls."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from celery import Celery

from flask_geneva import DuplicateWorkflowError
from flask_geneva import StepNotDefinedError
from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva


class SafetyThreeSteps(geneva.Workflow):
    @step
    def one(self):
        pass

    @step
    def two(self):
        pass

    @step
    def three(self):
        pass


def _rows(workflow_id):
    execution = geneva.StepExecution
    return db.session.execute(
        sa.select(execution.step_name, execution.state)
        .where(execution.workflow_id == workflow_id)
        .order_by(execution.id)
    ).all()


def test_skip_refuses_a_step_that_is_no_longer_defined(user, geneva_jobs):
    """skip() on a removed step raises StepNotDefinedError and changes nothing (R-EXT-04, R-EXT-24)."""
    workflow = SafetyThreeSteps.create(hero=user)
    workflow.pause()
    db.session.execute(
        sa.update(geneva.Workflow)
        .where(geneva.Workflow.id == workflow.id)
        .values(next_step_name="removed_step")
    )
    db.session.commit()
    db.session.refresh(workflow)
    before = _rows(workflow.id)
    with pytest.raises(
        StepNotDefinedError,
        match="Step 'removed_step' is not defined in SafetyThreeSteps; defined steps: one, two, three",
    ):
        workflow.skip()
    db.session.refresh(workflow)
    assert workflow.state == "paused"
    assert _rows(workflow.id) == before


def test_skip_refuses_a_workflow_whose_class_is_gone(user, geneva_jobs):
    """A row of an unregistered type cannot be skipped to 'finished' (R-STI-02, R-EXT-04)."""
    workflow = SafetyThreeSteps.create(hero=user)
    workflow.pause()
    workflow_id = workflow.id
    db.session.execute(
        sa.update(geneva.Workflow)
        .where(geneva.Workflow.id == workflow_id)
        .values(type="RenamedAwayWorkflow")
    )
    db.session.commit()
    db.session.expunge_all()
    orphan = db.session.get(geneva.Workflow, workflow_id)
    assert type(orphan) is geneva.Workflow
    with pytest.raises(
        StepNotDefinedError,
        match="no workflow class is registered for type 'RenamedAwayWorkflow'",
    ):
        orphan.skip()
    db.session.refresh(orphan)
    assert orphan.state == "paused"


def test_duplicate_error_names_type_hero_and_existing_workflow(user, geneva_jobs):
    """DuplicateWorkflowError keeps the spec's sentence and names what clashed (R-UNQ-02/03)."""
    first = SafetyThreeSteps.create(hero=user)
    with pytest.raises(DuplicateWorkflowError) as raised:
        SafetyThreeSteps.create(hero=user)
    message = str(raised.value)
    assert message.startswith(
        "An ongoing workflow of this type already exists for this hero"
    )
    assert f"SafetyThreeSteps for hero User#{user.id} (workflow {first.id})" in message


def test_create_on_the_base_class_is_refused(user):
    """The base Workflow has no steps and no identity; create() says to subclass it."""
    with pytest.raises(TypeError, match=r"class MyWorkflow\(geneva.Workflow\)"):
        geneva.Workflow.create(hero=user)
    assert db.session.scalar(sa.select(sa.func.count(geneva.Workflow.id))) == 0


def test_unsaved_hero_gets_a_clear_error(app):
    """A transient hero is refused with a message saying to add and flush it (R-HERO-01)."""
    hero = User(email="unsaved@example.com")
    with pytest.raises(TypeError, match="has no primary key yet"):
        SafetyThreeSteps.create(hero=hero)
    db.session.rollback()
    assert db.session.scalar(sa.select(sa.func.count(geneva.Workflow.id))) == 0


def test_dispatch_command_and_task_are_registered(app):
    """`flask geneva dispatch` runs the dispatcher; init_celery registers its task (R-DSP-02)."""
    result = app.test_cli_runner().invoke(args=["geneva", "dispatch"])
    assert result.exit_code == 0, result.output
    assert "dispatched 0 step execution(s)" in result.output
    celery = Celery("safety")
    geneva.init_celery(celery, app=app)
    assert {"flask_geneva.perform_step", "flask_geneva.dispatch_due"} <= set(
        celery.tasks
    )
