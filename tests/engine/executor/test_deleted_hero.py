"""A deleted hero cancels the workflow with a recorded reason, whatever the timing.

R-EXE-13, R-HERO-07 (issue 34): deleted before the step's Phase 1, between Phase 1
and the body (the body then reads ``self.hero`` as None), or while a condition
runs, the workflow ends canceled and the execution's ``error_message`` says why.
The hero is deleted through a separate connection, as another process would.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import cancel_if
from flask_geneva import signals
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingTwoSteps
from tests.support.workflow import delete_user
from tests.support.workflow import deleting_user_after_the_claim
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row

REASON = "hero User#{id} no longer exists: the workflow is canceled"


class DeletedHeroCondition(geneva.Workflow):
    """A cancel condition that reads the hero, deleting it first (see the test)."""

    seen: list[Any] = []

    @cancel_if
    def hero_blocked(self):
        # Another process deletes the hero after Phase 1's hero check: the
        # condition then reads None. Deleted in the executor's own transaction
        # here, since SQLite's write lock is held by Phase 1.
        db.session.execute(sa.delete(User).where(User.id == self.hero_id))
        hero = self.hero
        DeletedHeroCondition.seen.append(hero)
        return hero.blocked

    @step
    def only(self):
        pass


def _created(workflow_cls: Any, email: str) -> tuple[Any, Any, Any]:
    """Create a workflow; return (workflow id, first execution id, hero id).

    The session is then removed, so the executor's session holds no hero, as
    in a worker process (its identity map would otherwise answer ``hero``).
    """
    hero = make_user(email)
    workflow = workflow_cls.create(hero=hero)
    ids = (workflow.id, workflow.current_execution.id, hero.id)
    db.session.remove()
    return ids


def _assert_canceled_with_reason(workflow_id: Any, hero_id: Any) -> Any:
    assert workflow_row(workflow_id)["state"] == "canceled"
    assert workflow_row(workflow_id)["transitioned_at"] is not None
    [execution] = execution_rows(workflow_id)
    assert (execution["state"], execution["outcome"]) == ("canceled", "canceled")
    assert execution["finished_at"] is not None
    assert REASON.format(id=hero_id) in (execution["error_message"] or ""), execution
    return execution


def test_a_hero_deleted_before_phase_1_cancels_with_the_reason(app, geneva_jobs):
    """Deleted before the step is claimed: canceled, the reason recorded (R-EXE-13,
    R-HERO-07)."""
    workflow_id, execution_id, hero_id = _created(CountingTwoSteps, "a@example.com")
    delete_user(hero_id)
    Executor.execute(execution_id)
    execution = _assert_canceled_with_reason(workflow_id, hero_id)
    assert execution["started_at"] is None  # the body did not run
    assert (
        "CountingTwoSteps does not set may_proceed_without_hero"
        in (execution["error_message"])
    )


def test_a_hero_deleted_between_phase_1_and_the_body_cancels_with_the_reason(
    app, geneva_jobs
):
    """Deleted after the claim committed, before the body reads it: the body's
    AttributeError does not pause the workflow; it is canceled with the reason,
    the exception kept in the execution's metadata, not re-raised (R-HERO-07)."""
    workflow_id, execution_id, hero_id = _created(CountingTwoSteps, "b@example.com")
    with deleting_user_after_the_claim(hero_id):
        Executor.execute(execution_id)
    execution = _assert_canceled_with_reason(workflow_id, hero_id)
    assert execution["started_at"] is not None  # the body ran and raised
    message = execution["error_message"]
    assert "the step raised AttributeError" in message
    assert "'NoneType' object has no attribute 'counter'" in message
    assert execution["metadata"]["exception"]["class"] == "AttributeError"
    assert len(execution_rows(workflow_id)) == 1  # nothing scheduled after it


def test_a_hero_deleted_while_a_condition_runs_cancels_with_the_reason(
    app, geneva_jobs
):
    """A cancel condition that finds the hero gone (deleted after the hero check)
    cancels with the reason instead of pausing (R-HERO-07)."""
    DeletedHeroCondition.seen.clear()
    workflow_id, execution_id, hero_id = _created(DeletedHeroCondition, "c@example.com")
    Executor.execute(execution_id)
    assert DeletedHeroCondition.seen == [None]
    execution = _assert_canceled_with_reason(workflow_id, hero_id)
    assert "the cancel condition raised AttributeError" in execution["error_message"]


@pytest.mark.parametrize("reraise", ["unhandled", "always"])
def test_the_body_error_of_a_deleted_hero_is_not_reraised(app, geneva_jobs, reraise):
    """The cancel is the engine's handling of the missing hero: the task does not
    fail, whatever GENEVA_TASK_RERAISE says (R-HERO-07, R-EXE-50)."""
    app.config["GENEVA_TASK_RERAISE"] = reraise
    geneva.reload_settings(app)
    workflow_id, execution_id, hero_id = _created(CountingTwoSteps, "d@example.com")
    with deleting_user_after_the_claim(hero_id):
        Executor.execute(execution_id)  # raises nothing
    _assert_canceled_with_reason(workflow_id, hero_id)


def test_a_hero_deleted_after_an_inline_claim_cancels_with_the_reason(app, geneva_jobs):
    """In the Celery task's chain, the hero deleted after the second step was
    claimed inline: the first step stays done, the second is canceled with the
    reason, nothing is published (R-HERO-07, R-EXE-70)."""
    workflow_id, execution_id, hero_id = _created(CountingTwoSteps, "e@example.com")
    published = len(geneva_jobs.enqueued)
    claimed = []

    def delete_at_the_second_claim(sender, payload):
        if payload["outcome"] == "passed":
            claimed.append(payload["step_name"])
            if len(claimed) == 2:
                delete_user(hero_id)

    with signals.precondition.connected_to(delete_at_the_second_claim):
        perform_step_execution(execution_id)
    assert claimed == ["first", "second"]
    first, second = execution_rows(workflow_id)
    assert (first["state"], first["outcome"]) == ("completed", "success")
    assert (second["state"], second["outcome"]) == ("canceled", "canceled")
    assert REASON.format(id=hero_id) in second["error_message"]
    assert "the step raised AttributeError" in second["error_message"]
    assert workflow_row(workflow_id)["state"] == "canceled"
    assert len(geneva_jobs.enqueued) == published
