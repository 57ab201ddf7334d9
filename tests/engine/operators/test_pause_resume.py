"""External pause and resume (R-EXT-01, R-EXT-20..27, R-PDR-05)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
from sqlalchemy.orm.attributes import set_committed_value

from flask_geneva import InvalidStateError
from flask_geneva import StepNotDefinedError
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingTwoSteps
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

T0 = datetime(2030, 5, 1, 10, 0, tzinfo=UTC)


class PauseResumeTwoStep(geneva.Workflow):
    @step
    def first(self):
        self.hero.counter += 1

    @step(wait=timedelta(hours=2))
    def second(self):
        self.hero.counter += 10


class PauseResumeDelayedFirst(geneva.Workflow):
    @step(wait=timedelta(hours=1))
    def first(self):
        self.hero.counter += 1


class PauseResumeFailing(geneva.Workflow):
    @step
    def flaky(self):
        self.hero.counter += 1
        if self.hero.counter < 2:
            raise RuntimeError("not yet")

    @step
    def tail(self):
        self.hero.counter += 10


def _scheduled(workflow_id):
    return [r for r in execution_rows(workflow_id) if r["state"] == "scheduled"]


# -- pause leaves scheduled executions alone (R-EXT-01) -------------------------------


@pytest.mark.parametrize(
    ("workflow_cls", "advance_steps", "overdue"),
    [
        (PauseResumeTwoStep, 1, False),  # future-scheduled second step
        (PauseResumeTwoStep, 1, True),  # overdue second step
        (PauseResumeDelayedFirst, 0, False),  # first step, scheduled ahead
        (CountingTwoSteps, 0, False),  # immediate first step
    ],
)
def test_pause_leaves_the_scheduled_execution_unchanged(
    user, workflow_cls, advance_steps, overdue
):
    """Pausing keeps the scheduled execution: same id, state, time, no outcome
    (R-EXT-01).
    """
    with clock.frozen(T0) as frozen:
        workflow = workflow_cls.create(hero=user)
        for _ in range(advance_steps):
            perform_next_step(workflow)
        if overdue:
            frozen.advance(timedelta(hours=3))
        before = execution_rows(workflow.id)
        workflow.pause()
    after = execution_rows(workflow.id)
    assert after == before
    assert after[-1]["state"] == "scheduled"
    assert after[-1]["outcome"] is None
    assert not any(r["outcome"] in ("canceled", "workflow_paused") for r in after)
    assert workflow_row(workflow.id)["state"] == "paused"


@pytest.mark.parametrize("state", ["paused", "finished"])
def test_pause_rejects_paused_and_finished(user, state):
    """pause() from paused or finished raises (R-EXT-01)."""
    workflow = CountingTwoSteps.create(hero=user)
    workflow.transition_to(state)
    with pytest.raises(InvalidStateError, match=f"Cannot pause a {state} workflow"):
        workflow.pause()


def test_pause_rechecks_the_state_under_the_lock(user):
    """A stale in-memory state does not bypass the locked re-check (R-EXT-01, §8.2)."""
    workflow = CountingTwoSteps.create(hero=user)
    update_workflow(workflow.id, state="finished")
    set_committed_value(workflow, "state", "ready")  # a stale in-memory copy
    assert workflow.state == "ready"
    with pytest.raises(InvalidStateError, match=r"^Cannot pause a finished workflow$"):
        workflow.pause()
    assert workflow_row(workflow.id)["state"] == "finished"


def test_resume_rechecks_the_state_under_the_lock(user):
    """resume() re-checks paused after locking and changes nothing otherwise
    (R-EXT-20).
    """
    workflow = CountingTwoSteps.create(hero=user)
    workflow.pause()
    update_workflow(workflow.id, state="canceled")
    set_committed_value(workflow, "state", "paused")  # a stale in-memory copy
    before = execution_rows(workflow.id)
    with pytest.raises(InvalidStateError, match=r"^Cannot resume a canceled workflow$"):
        workflow.resume()
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert execution_rows(workflow.id) == before


# -- resume (R-EXT-20..25) -------------------------------------------------------------


def test_resume_with_a_future_execution_keeps_id_and_time(app, user, geneva_jobs):
    """A preserved future execution is re-published for its original time (R-EXT-21,
    R-SCH-09).
    """
    app.config["GENEVA_MAX_BROKER_DELAY"] = timedelta(days=1)
    geneva.reload_settings(app)
    with clock.frozen(T0):
        workflow = PauseResumeTwoStep.create(hero=user)
        perform_next_step(workflow)
        second = _scheduled(workflow.id)[0]
        workflow.pause()
        geneva_jobs.clear()
        resumed = workflow.resume()
    assert resumed.id == second["id"]
    row = execution_row(second["id"])
    assert (row["state"], row["outcome"], row["scheduled_for"]) == (
        "scheduled",
        None,
        T0 + timedelta(hours=2),
    )
    assert len(execution_rows(workflow.id)) == 2
    assert [(p.step_execution_id, p.eta) for p in geneva_jobs.enqueued] == [
        (second["id"], T0 + timedelta(hours=2))
    ]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["transitioned_at"]) == ("ready", None)


def test_resume_of_a_far_future_execution_leaves_it_to_the_dispatcher(
    user, geneva_jobs
):
    """A preserved execution beyond the broker delay is marked deferred, not published
    (R-DSP-01/03).
    """
    with clock.frozen(T0):
        workflow = PauseResumeTwoStep.create(hero=user)
        perform_next_step(workflow)
        second = _scheduled(workflow.id)[0]
        workflow.pause()
        update_execution(second["id"], job_id="stale-task-id")
        geneva_jobs.clear()
        resumed = workflow.resume()
    assert resumed.id == second["id"]
    assert execution_row(second["id"])["job_id"] == "geneva:deferred"
    assert geneva_jobs.enqueued == []


def test_resume_with_an_overdue_execution_publishes_it_immediately(user, geneva_jobs):
    """A preserved overdue execution is re-published without eta, same row
    (R-EXT-21).
    """
    with clock.frozen(T0) as frozen:
        workflow = PauseResumeTwoStep.create(hero=user)
        perform_next_step(workflow)
        second = _scheduled(workflow.id)[0]
        workflow.pause()
        frozen.advance(timedelta(hours=5))
        geneva_jobs.clear()
        resumed = workflow.resume()
    assert resumed.id == second["id"]
    assert execution_row(second["id"])["scheduled_for"] == T0 + timedelta(hours=2)
    assert [(p.step_execution_id, p.eta) for p in geneva_jobs.enqueued] == [
        (second["id"], None)
    ]
    assert len(execution_rows(workflow.id)) == 2


def test_resume_without_a_scheduled_execution_creates_one(user, geneva_jobs):
    """Resume after a failure creates a new execution of next_step_name due now
    (R-EXT-23).
    """
    with clock.frozen(T0):
        workflow = PauseResumeFailing.create(hero=user)
        with pytest.raises(RuntimeError):
            perform_next_step(workflow)
        geneva_jobs.clear()
        resumed = workflow.resume()
    row = execution_row(resumed.id)
    assert (row["step_name"], row["state"], row["scheduled_for"]) == (
        "flaky",
        "scheduled",
        T0,
    )
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [resumed.id]
    assert len(execution_rows(workflow.id)) == 2


def test_resume_after_the_executor_canceled_the_preserved_execution(user):
    """If the preserved execution was canceled while paused, resume makes a fresh one
    due now (R-EXT-23, R-EXE-12).
    """
    with clock.frozen(T0) as frozen:
        workflow = PauseResumeTwoStep.create(hero=user)
        perform_next_step(workflow)
        second = _scheduled(workflow.id)[0]
        workflow.pause()
        frozen.advance(timedelta(hours=3))
        perform_next_step(workflow)  # a delivery while paused: R-EXE-12
        assert execution_row(second["id"])["state"] == "canceled"
        resumed = workflow.resume()
    row = execution_row(resumed.id)
    assert resumed.id != second["id"]
    assert (row["step_name"], row["scheduled_for"]) == (
        "second",
        T0 + timedelta(hours=3),
    )


def test_repeated_pause_resume_cycles_keep_one_execution(user):
    """Pause/resume cycles reuse the same scheduled execution (R-EXT-21)."""
    workflow = PauseResumeTwoStep.create(hero=user)
    perform_next_step(workflow)
    second_id = _scheduled(workflow.id)[0]["id"]
    for _ in range(3):
        workflow.pause()
        assert workflow.resume().id == second_id
    assert [r["id"] for r in _scheduled(workflow.id)] == [second_id]
    assert len(execution_rows(workflow.id)) == 2


@pytest.mark.parametrize("state", ["ready", "finished"])
def test_resume_rejects_ready_and_finished(user, state):
    """resume() from ready or finished raises (R-EXT-20)."""
    workflow = CountingTwoSteps.create(hero=user)
    if state == "finished":
        speedrun_workflow(workflow)
    with pytest.raises(InvalidStateError, match=f"^Cannot resume a {state} workflow$"):
        workflow.resume()


def test_full_pause_resume_cycle_completes(user):
    """A workflow paused between steps and resumed runs to completion (R-EXT-20..23)."""
    workflow = CountingTwoSteps.create(hero=user)
    perform_next_step(workflow)
    workflow.pause()
    workflow.resume()
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 11


def test_overdue_step_runs_right_after_resume(user, geneva_jobs):
    """After resume the overdue execution runs at once through its job (R-EXT-21)."""
    with clock.frozen(T0) as frozen:
        workflow = PauseResumeTwoStep.create(hero=user)
        perform_next_step(workflow)
        workflow.pause()
        frozen.advance(timedelta(hours=4))
        geneva_jobs.clear()
        workflow.resume()
        ran = geneva_jobs.drain(respect_eta=True)
    assert ran == 1
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 11


def test_resume_of_a_removed_step_raises_and_stays_paused(user, geneva_jobs):
    """resume() of an undefined next step raises StepNotDefinedError and keeps paused
    (R-EXT-24).
    """
    with clock.frozen(T0):
        workflow = PauseResumeFailing.create(hero=user)
        with pytest.raises(RuntimeError):
            perform_next_step(workflow)
    update_workflow(workflow.id, next_step_name="deleted_step")
    db.session.refresh(workflow)
    before = execution_rows(workflow.id)
    geneva_jobs.clear()
    with pytest.raises(StepNotDefinedError, match="deleted_step") as raised:
        workflow.resume()
    assert "flaky, tail" in str(raised.value)
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["transitioned_at"]) == ("paused", T0)
    assert execution_rows(workflow.id) == before
    assert geneva_jobs.enqueued == []


def test_resume_returns_the_execution_that_will_run(user):
    """resume() returns the reused or new execution (R-EXT-25)."""
    workflow = CountingTwoSteps.create(hero=user)
    workflow.pause()
    execution = workflow.resume()
    assert execution.id == workflow.current_execution.id


# -- operator actions (R-EXT-27, R-PDR-05) ---------------------------------------------


def test_operator_actions_are_recorded(user):
    """External operations record actor, via, states and execution (R-EXT-27,
    R-PDR-05).
    """
    with clock.frozen(T0):
        workflow = CountingTwoSteps.create(hero=user)
        first_id = workflow.current_execution.id
        workflow.pause(actor="alice", via="admin")
        resumed = workflow.resume(actor="bob", via="cli")
        workflow.cancel()
    actions = workflow_row(workflow.id)["metadata"]["operator_actions"]
    assert actions == [
        {
            "action": "pause",
            "at": T0.isoformat(),
            "actor": "alice",
            "via": "admin",
            "from_state": "ready",
            "to_state": "paused",
            "execution_id": None,
        },
        {
            "action": "resume",
            "at": T0.isoformat(),
            "actor": "bob",
            "via": "cli",
            "from_state": "paused",
            "to_state": "ready",
            "execution_id": first_id,
        },
        {
            "action": "cancel",
            "at": T0.isoformat(),
            "actor": None,
            "via": "api",
            "from_state": "ready",
            "to_state": "canceled",
            "execution_id": resumed.id,
        },
    ]


def test_invalid_via_is_rejected(user):
    """via must be api, admin or cli (R-EXT-27)."""
    workflow = CountingTwoSteps.create(hero=user)
    with pytest.raises(ValueError, match="via must be one of"):
        workflow.pause(via="telepathy")
    assert workflow_row(workflow.id)["state"] == "ready"


@pytest.mark.parametrize("actor", [object(), 42, b"alice", "al\x00ice"])
@pytest.mark.parametrize(
    "operation",
    [
        lambda workflow, actor: workflow.pause(actor=actor),
        lambda workflow, actor: workflow.cancel(actor=actor),
        lambda workflow, actor: workflow.skip(actor=actor),
        lambda workflow, actor: workflow.run_now(actor=actor),
    ],
    ids=["pause", "cancel", "skip", "run_now"],
)
def test_an_actor_that_is_not_a_str_is_refused_before_anything_changes(
    user, operation, actor
):
    """The actor is recorded as a JSON str (R-PDR-05, R-EXT-27): another value was
    refused only by the JSON encoder inside the UPDATE (a raw StatementError), a NUL
    by PostgreSQL's jsonb. It is now a ValueError naming it, before any lock.
    """
    workflow = PauseResumeTwoStep.create(hero=user)
    before = workflow_row(workflow.id)
    with pytest.raises(ValueError, match="actor must be None or a str") as raised:
        operation(workflow, actor)
    assert type(actor).__name__ in str(raised.value)
    db.session.rollback()
    assert workflow_row(workflow.id) == before


def test_an_actor_that_is_not_a_str_is_refused_by_resume(user):
    """resume() and resume_at() check the actor too (R-PDR-05, R-EXT-27)."""
    workflow = PauseResumeTwoStep.create(hero=user)
    workflow.pause(actor="alice")
    before = workflow_row(workflow.id)
    with pytest.raises(ValueError, match="actor must be None or a str"):
        workflow.resume(actor=7)
    with pytest.raises(ValueError, match="actor must be None or a str"):
        workflow.resume_at("first", actor=7)
    with pytest.raises(ValueError, match="actor must be None or a str"):
        workflow.recover(actor=7)
    db.session.rollback()
    assert workflow_row(workflow.id) == before


def test_operator_actions_keep_the_latest_200(user):
    """The operator_actions list is capped at the latest 200 entries (R-PDR-05)."""
    workflow = CountingTwoSteps.create(hero=user)
    workflow.write_metadata(
        "operator_actions", [{"action": f"old-{i}"} for i in range(200)]
    )
    db.session.commit()
    workflow.pause()
    actions = workflow_row(workflow.id)["metadata"]["operator_actions"]
    assert len(actions) == 200
    assert actions[0] == {"action": "old-1"}
    assert actions[-1]["action"] == "pause"


def test_preserved_execution_survives_manual_update(user):
    """A pause does not touch an execution's job_id or scheduled_for (R-EXT-01)."""
    workflow = PauseResumeDelayedFirst.create(hero=user)
    execution_id = workflow.current_execution.id
    update_execution(execution_id, job_id="job-123")
    workflow.pause()
    row = execution_row(execution_id)
    assert (row["job_id"], row["state"]) == ("job-123", "scheduled")
