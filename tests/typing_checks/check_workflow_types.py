"""A user's workflow as a type checker sees it (docs: Typing, issue 15).

mypy checks this file in CI (``[tool.mypy] files`` in ``pyproject.toml``); it is
never imported by the tests. Every ``assert_type`` fails when the public
annotations of ``geneva.Workflow`` / ``geneva.StepExecution`` regress to
``Any``: mypy then reports ``Expression is of type "Any", not "Signup"``.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timedelta
from typing import TYPE_CHECKING
from typing import Any
from typing import assert_type

import sqlalchemy as sa
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import GenevaConfig
from flask_geneva import StepExecutionMixin
from flask_geneva import WorkflowMixin
from flask_geneva import step
from flask_geneva.dsl.ordering import StepCollection
from flask_geneva.ext.app_state import settings

db = SQLAlchemy()
geneva = Geneva(db)

assert_type(geneva.Workflow, type[WorkflowMixin])
assert_type(geneva.StepExecution, type[StepExecutionMixin])
assert_type(geneva.workflow_class("Signup"), type[WorkflowMixin] | None)

# The documented pattern: type checkers see the typed base, Python the model
# class built on db.Model.
if TYPE_CHECKING:
    Workflow = WorkflowMixin
else:
    Workflow = geneva.Workflow


class Signup(Workflow):
    """A sample user workflow."""

    @step
    def send_welcome(self) -> None:
        self.write_metadata("welcomed", True)

    @step(wait=timedelta(days=1))
    def send_reminder(self) -> None:
        if self.read_metadata("unsubscribed"):
            self.finish()


def check_class_api(user: Any) -> None:
    """Class methods return the user's class, not Any."""
    workflow = Signup.create(hero=user)
    assert_type(workflow, Signup)
    assert_type(Signup.create(hero=user, commit=False), Signup)
    assert_type(Signup.create_unless_ongoing(hero=user), tuple[Signup, bool])
    assert_type(Signup.get(1), Signup | None)
    assert_type(Signup.ongoing(), sa.Select[Any])
    assert_type(Signup.for_hero(user), sa.Select[Any])
    assert_type(Signup.step_collection(), StepCollection)
    # Columns are Mapped: SQL expressions on the class, values on instances.
    assert_type(Signup.state == "ready", sa.ColumnElement[bool])
    assert_type(Signup.created_at.desc(), sa.UnaryExpression[datetime])


def check_instance_api(workflow: Signup) -> None:
    """Instance attributes and methods carry their annotations."""
    assert_type(workflow.state, str)
    assert_type(workflow.current_step_name, str | None)
    assert_type(workflow.next_step_name, str | None)
    assert_type(workflow.hero_type, str | None)
    assert_type(workflow.allow_multiple, bool)
    assert_type(workflow.created_at, datetime)
    assert_type(workflow.transitioned_at, datetime | None)
    assert_type(workflow.is_ongoing, bool)
    assert_type(workflow.is_paused, bool)
    assert_type(workflow.steps, StepCollection)
    assert_type(workflow.previous_step_name, str | None)
    assert_type(workflow.step_job_options, dict[str, Any])
    assert_type(workflow.execution_history, list[StepExecutionMixin])
    assert_type(workflow.current_execution, StepExecutionMixin | None)
    assert_type(workflow.pause(), None)
    assert_type(workflow.pause(actor="ops", via="admin", commit=False), None)
    assert_type(workflow.cancel(), None)
    assert_type(workflow.skip(expected_step="send_welcome"), None)
    assert_type(workflow.resume(rewind=True), StepExecutionMixin | None)
    assert_type(workflow.recover(force=True), StepExecutionMixin)
    assert_type(workflow.schedule_next_step(wait=60), StepExecutionMixin | None)
    assert_type(workflow.reschedule_current_step(), StepExecutionMixin)
    assert_type(workflow.transition_to("paused"), None)


def check_step_execution_api(workflow: Signup) -> None:
    """Step executions are typed, and lead back to their workflow."""
    execution = workflow.execution_history[0]
    assert_type(execution.step_name, str)
    assert_type(execution.state, str)
    assert_type(execution.outcome, str | None)
    assert_type(execution.scheduled_for, datetime)
    assert_type(execution.finished_at, datetime | None)
    assert_type(execution.is_completed, bool)
    assert_type(execution.workflow, WorkflowMixin)
    assert_type(execution.successor, StepExecutionMixin | None)
    assert_type(execution.continues_from, StepExecutionMixin | None)
    assert_type(execution.reattempt_reason, str | None)
    assert_type(execution.start(), bool)
    assert_type(geneva.StepExecution.ready_to_execute(), sa.Select[Any])


def check_settings(app: Flask) -> None:
    """The frozen settings object is typed, with units in the names."""
    assert_type(geneva.reload_settings(app), GenevaConfig)
    config = settings()
    assert_type(config, GenevaConfig)
    assert_type(config.find_delay_seconds, float)
    assert_type(config.max_cursor_size_bytes, int | None)
    assert_type(config.stuck_in_progress_threshold, timedelta)
