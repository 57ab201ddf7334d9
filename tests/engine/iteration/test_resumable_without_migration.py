"""Without the ``cursor``/``continues_from_id`` columns (R-DEG-01..03, R-EXE-15).

The schema is built as usual, then the two resumable columns are dropped with
``ALTER TABLE``, as on a database that never ran the resumable-support migration.
On a server the shared schema is rebuilt for the next test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import StepConfigurationError
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.testing import assert_cursor
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.common_workflows import CountingTwoSteps
from tests.support.workflow import executions_table
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row

from tests.apps.basic import geneva  # isort: skip


def execution_rows(workflow_id: Any) -> list[Any]:
    """The workflow's stored executions, naming only columns that still exist."""
    table = executions_table()
    columns = [
        table.c[name]
        for name in ("id", "step_name", "state", "outcome", "error_message")
    ]
    reader = db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    with reader as connection:
        return list(
            connection.execute(
                sa.select(*columns)
                .where(table.c.workflow_id == workflow_id)
                .order_by(table.c.created_at, table.c.id)
            ).mappings()
        )


@pytest.fixture
def degraded(without_unit: Callable[[str], None]) -> None:
    """The app's database without the resumable columns."""
    without_unit("add_resumable_support")
    columns = {
        c["name"]
        for c in sa.inspect(db.engine).get_columns("geneva_drive_step_executions")
    }
    assert not {"cursor", "continues_from_id"} & columns


@pytest.fixture
def hero(degraded: None) -> Any:
    user = User(email="degraded@example.com")
    db.session.add(user)
    db.session.commit()
    return user


class WithResumable(geneva.Workflow):
    @step
    def first(self):
        self.hero.counter += 1

    @resumable_step
    def walk(self, it):
        for _ in it.iterate_over([1, 2]):
            self.hero.counter += 100


def test_regular_workflows_complete(hero, geneva_jobs):
    """CountingTwoSteps steps run unchanged without the resumable columns (R-DEG-01)."""
    workflow = CountingTwoSteps.create(hero=hero)
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(hero.id) == 11
    assert [r["outcome"] for r in execution_rows(workflow.id)] == [
        "success",
        "success",
    ]


def test_pause_resume_skip_cancel_of_regular_workflows(hero, geneva_jobs):
    """External pause, resume, skip and cancel work without the columns (R-DEG-01, R-DEG-02)."""
    workflow = CountingTwoSteps.create(hero=hero)
    workflow.pause()
    resumed = workflow.resume()
    assert resumed.step_name == "first"
    assert workflow_row(workflow.id)["state"] == "ready"
    workflow.skip()
    assert workflow_row(workflow.id)["next_step_name"] == "second"
    workflow.cancel()
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_resume_after_failure_skips_the_resumable_branches(hero, geneva_jobs):
    """resume() creates a fresh execution when the columns are absent (R-DEG-02, R-EXT-23)."""
    workflow = WithResumable.create(hero=hero)
    perform_next_step(workflow)
    with pytest.raises(StepConfigurationError):
        perform_next_step(workflow)
    execution = workflow.resume()
    assert execution.step_name == "walk"
    assert execution.resuming is False
    assert execution.continues_from is None
    assert workflow_row(workflow.id)["state"] == "ready"


REPORTED: list[BaseException] = []


def _reporter(error: BaseException, **kwargs: Any) -> None:
    REPORTED.append(error)


@pytest.mark.parametrize("app_config", [{"GENEVA_ERROR_REPORTER": _reporter}])
def test_resumable_step_fails_loudly(hero, geneva_jobs):
    """Executing a resumable step pauses the workflow and raises, naming the install command (R-DEG-03, R-EXE-15, R-REP-05)."""
    workflow = WithResumable.create(hero=hero)
    perform_next_step(workflow)
    with pytest.raises(StepConfigurationError) as raised:
        perform_next_step(workflow)
    assert "flask geneva install" in str(raised.value)
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("first", "completed", "success"),
        ("walk", "failed", "failed"),
    ]
    message = rows[1]["error_message"]
    assert "resumable_step" in message
    assert "flask geneva install" in message
    assert "cursor" in message
    assert workflow_row(workflow.id)["state"] == "paused"
    assert hero_counter(hero.id) == 1
    assert REPORTED == []


def test_cursor_accessors_degrade(hero, geneva_jobs):
    """cursor_value reads None, writes are no-ops, no chain links (R-DEG-02, R-SE-41, R-SE-42)."""
    workflow = WithResumable.create(hero=hero)
    execution = workflow.current_execution
    execution.cursor_value = {"page": 3}
    db.session.commit()
    assert execution.cursor_value is None
    assert execution.resuming is False
    assert execution.successor is None
    assert execution.continues_from is None
    assert_cursor(workflow, None)
