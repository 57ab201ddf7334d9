"""Workflows across a deploy that removed or renamed steps (issue 19, R-EVO-02..09).

Rows written by the "old code" are simulated by storing the old step names
(``update_execution``/``update_workflow``), as an older deploy would have left
them; tests/worker/test_deploy_worker.py runs a real deploy with a worker.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import Executor
from flask_geneva import InvalidStateError
from flask_geneva import StepNotDefinedError
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.housekeeping import T0
from tests.support.workflow import execution_history
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


class EvoSignup(geneva.Workflow):
    """After a deploy: 'charge_card' was removed, 'email_receipt' renamed."""

    @step
    def create_account(self):
        self.hero.counter += 1

    step.removed("charge_card")

    @step
    def send_receipt(self):
        self.hero.counter += 10

    step.renamed("email_receipt", to="send_receipt")

    @step
    def welcome(self):
        self.hero.counter += 100

    step.removed("survey")


def _current_id(workflow):
    db.session.refresh(workflow)
    return workflow.current_execution.id


def _run_until_done(workflow_id, limit=10):
    for _ in range(limit):
        rows = [r for r in execution_rows(workflow_id) if r["state"] == "scheduled"]
        if not rows:
            return
        Executor.execute(rows[-1]["id"])
    raise AssertionError("the workflow did not settle")


def test_an_execution_of_a_removed_step_is_skipped_and_the_next_step_runs(user):
    """An execution created under a removed name is recorded skipped (through the
    skip_removed_step entry) and the next step after the gravestone is scheduled
    (R-EVO-02).
    """
    workflow = EvoSignup.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, step_name="charge_card")
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("skipped", "skipped")
    state = workflow_row(workflow.id)
    assert (state["state"], state["next_step_name"]) == ("ready", "send_receipt")
    _run_until_done(workflow.id)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert execution_history(workflow.id) == [
        ("charge_card", "skipped", "skipped"),
        ("send_receipt", "completed", "success"),
        ("welcome", "completed", "success"),
    ]
    assert hero_counter(user.id) == 110


def test_a_removed_last_step_finishes_the_workflow(user):
    """A gravestone after the last step: skipping it finishes the workflow (R-EVO-02)."""
    workflow = EvoSignup.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, step_name="survey")
    Executor.execute(execution_id)
    assert execution_row(execution_id)["state"] == "skipped"
    assert workflow_row(workflow.id)["state"] == "finished"


def test_an_execution_of_a_renamed_step_runs_the_new_step(user):
    """An execution carrying the old name runs the new step's body; the workflow
    continues after the new step (R-EVO-04).
    """
    workflow = EvoSignup.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, step_name="email_receipt")
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["step_name"], row["state"], row["outcome"]) == (
        "email_receipt",
        "completed",
        "success",
    )
    assert hero_counter(user.id) == 10
    assert workflow_row(workflow.id)["next_step_name"] == "welcome"


def test_an_undefined_step_still_fails_and_pauses_and_resume_points_to_resume_at(
    user,
):
    """A name neither defined, removed nor renamed keeps R-EXE-14; resume() then
    refuses with a message naming resume_at (R-EXE-14, R-EVO-07).
    """
    workflow = EvoSignup.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, step_name="vanished")
    update_workflow(workflow.id, next_step_name="vanished")
    with pytest.raises(StepNotDefinedError):
        Executor.execute(execution_id)
    assert workflow_row(workflow.id)["state"] == "paused"
    db.session.expire_all()
    with pytest.raises(StepNotDefinedError) as raised:
        workflow.resume()
    message = str(raised.value)
    assert "Step 'vanished' is not defined in EvoSignup" in message
    assert "workflow.resume_at(step_name)" in message
    assert f"flask geneva resume {workflow.id} --at STEP" in message
    assert workflow_row(workflow.id)["state"] == "paused"


@pytest.mark.parametrize(
    ("next_step_name", "expected"),
    [("email_receipt", "send_receipt"), ("charge_card", "send_receipt")],
)
def test_resume_follows_renames_and_gravestones(user, next_step_name, expected):
    """A paused workflow whose next_step_name is renamed runs the new step; one at
    a gravestone runs the next step after it (R-EVO-04, R-EVO-07).
    """
    workflow = EvoSignup.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, state="canceled", outcome="canceled")
    update_workflow(
        workflow.id,
        state="paused",
        next_step_name=next_step_name,
        current_step_name=None,
    )
    db.session.expire_all()
    resumed = workflow.resume()
    assert resumed.step_name == expected
    assert workflow_row(workflow.id)["state"] == "ready"


def test_a_preserved_execution_of_an_undefined_step_is_not_resumed(user):
    """resume() refuses to publish a preserved execution whose step the code does
    not know; the message names resume_at (R-EVO-07).
    """
    workflow = EvoSignup.create(hero=user)
    update_execution(_current_id(workflow), step_name="vanished")
    workflow.pause()
    with pytest.raises(StepNotDefinedError, match="resume_at"):
        workflow.resume()


def test_resume_at_runs_the_named_step_and_is_audited(user):
    """resume_at cancels the preserved execution, schedules the named step due now
    and records the operator action with the step (R-EVO-06, R-PDR-05).
    """
    workflow = EvoSignup.create(hero=user)
    preserved_id = _current_id(workflow)
    workflow.pause()
    execution = workflow.resume_at("welcome", actor="ops@example.com", via="api")
    assert execution.step_name == "welcome"
    assert execution_row(preserved_id)["state"] == "canceled"
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"], row["current_step_name"]) == (
        "ready",
        "welcome",
        None,
    )
    db.session.expire_all()
    action = workflow.read_metadata("operator_actions")[-1]
    assert action["action"] == "resume_at"
    assert action["step"] == "welcome"
    assert action["actor"] == "ops@example.com"
    assert (action["from_state"], action["to_state"]) == ("paused", "ready")
    Executor.execute(execution.id)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 100


def test_resume_at_a_stranded_workflow(user):
    """A workflow paused by R-EXE-14 continues from a named step (R-EVO-06)."""
    workflow = EvoSignup.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, step_name="vanished")
    with pytest.raises(StepNotDefinedError):
        Executor.execute(execution_id)
    db.session.expire_all()
    execution = workflow.resume_at("send_receipt")
    Executor.execute(execution.id)
    assert workflow_row(workflow.id)["next_step_name"] == "welcome"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("charge_card", "it was removed from EvoSignup (step.removed)"),
        ("nonsense", "EvoSignup defines no such step"),
    ],
)
def test_resume_at_refuses_removed_and_undefined_steps(user, name, fragment):
    """The error names the allowed steps; nothing changes (R-EVO-06)."""
    workflow = EvoSignup.create(hero=user)
    workflow.pause()
    with pytest.raises(StepNotDefinedError) as raised:
        workflow.resume_at(name)
    assert fragment in str(raised.value)
    assert "allowed steps: 'create_account', 'send_receipt', 'welcome'" in str(
        raised.value
    )
    assert workflow_row(workflow.id)["state"] == "paused"


def test_resume_at_refuses_a_workflow_that_is_not_paused(user):
    """Only a paused workflow can be resumed at a step (R-EVO-06)."""
    workflow = EvoSignup.create(hero=user)
    with pytest.raises(InvalidStateError, match="Cannot resume a ready workflow"):
        workflow.resume_at("welcome")


def test_resume_at_accepts_a_renamed_name(user):
    """The old name of a renamed step resumes at the new step (R-EVO-04, R-EVO-06)."""
    workflow = EvoSignup.create(hero=user)
    workflow.pause()
    assert workflow.resume_at("email_receipt").step_name == "send_receipt"


def test_skip_at_a_gravestone_moves_to_the_next_step(user):
    """skip() of a paused workflow at a removed step schedules the step after the
    gravestone (R-EVO-02, R-EXT-04).
    """
    workflow = EvoSignup.create(hero=user)
    update_execution(_current_id(workflow), state="canceled", outcome="canceled")
    update_workflow(
        workflow.id,
        state="paused",
        next_step_name="charge_card",
        current_step_name=None,
    )
    db.session.expire_all()
    workflow.skip()
    assert workflow_row(workflow.id)["next_step_name"] == "send_receipt"


def test_removed_steps_in_flight_lists_the_names_rows_still_carry(user):
    """removed_steps_in_flight() counts ongoing workflows carrying a gravestone or
    renamed name, as next step or active execution (R-EVO-09).
    """
    assert EvoSignup.removed_steps_in_flight() == {}
    first = EvoSignup.create(hero=user)
    update_execution(_current_id(first), step_name="charge_card")
    second = EvoSignup.create(hero=user, allow_multiple=True)
    update_workflow(second.id, next_step_name="email_receipt")
    finished = EvoSignup.create(hero=user, allow_multiple=True)
    update_workflow(finished.id, state="finished", next_step_name="survey")
    db.session.expire_all()
    assert EvoSignup.removed_steps_in_flight() == {
        "charge_card": 1,
        "email_receipt": 1,
    }


def test_housekeeping_moves_a_stuck_execution_of_a_removed_step_on(user):
    """A stuck in-progress execution of a removed step (its old-code worker died
    during the deploy) is recovered and the step after the gravestone scheduled,
    never rerun (R-EVO-03, R-HK-24).
    """
    with clock.frozen(T0) as frozen:
        workflow = EvoSignup.create(hero=user)
        execution_id = _current_id(workflow)
        update_execution(
            execution_id, step_name="charge_card", state="in_progress", started_at=T0
        )
        update_workflow(
            workflow.id, state="performing", current_step_name="charge_card"
        )
        frozen.advance(timedelta(hours=2))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "recovered")
    state = workflow_row(workflow.id)
    assert (state["state"], state["current_step_name"], state["next_step_name"]) == (
        "ready",
        None,
        "send_receipt",
    )
