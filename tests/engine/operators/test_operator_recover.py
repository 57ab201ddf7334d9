"""workflow.recover(): an operator recovers one in-progress execution now (R-HK-28).

The executions are left ``in_progress`` as after a worker's SIGKILL
(``make_in_progress``); the clock is frozen so ages are exact.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy import orm

from flask_geneva import GenevaConfigurationError
from flask_geneva import InvalidStateError
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import geneva
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import executions_table
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row


class RecoverTwoSteps(geneva.Workflow):
    @step
    def charge(self):
        self.hero.counter += 100

    @step
    def receipt(self):
        self.hero.counter += 1


class RecoverResumable(geneva.Workflow):
    @resumable_step
    def sweep(self, it):
        for _ in it.iterate_over(range(3)):
            pass


def _stuck(user, *, seconds_ago, cls=RecoverTwoSteps):
    workflow = cls.create(hero=user)
    return workflow, make_in_progress(workflow, T0 - timedelta(seconds=seconds_ago))


def _operator_actions(workflow_id):
    meta = workflow_row(workflow_id)["metadata"] or {}
    return [
        (a["action"], a["from_state"], a["to_state"], a["execution_id"], a["via"])
        for a in meta.get("operator_actions", [])
    ]


def test_recover_refuses_an_execution_within_the_grace(user, geneva_jobs):
    """Without force, an execution younger than GENEVA_RECOVER_GRACE (60 s) is refused
    with its age, and nothing changes (R-HK-28).
    """
    with clock.frozen(T0):
        workflow, execution_id = _stuck(user, seconds_ago=10)
        with pytest.raises(
            InvalidStateError,
            match=(
                rf"^Cannot recover step execution {execution_id} of workflow "
                rf"{workflow.id}: it started 10 s ago, less than "
                r"GENEVA_RECOVER_GRACE \(60 s\), so its worker may still be running"
            ),
        ):
            workflow.recover()
    assert execution_history(workflow.id) == [("charge", "in_progress", None)]
    assert workflow_row(workflow.id)["state"] == "performing"
    assert _operator_actions(workflow.id) == []


def test_forced_recover_reattempts_the_step_now(user, geneva_jobs):
    """With force the execution is completed/recovered and the step scheduled again
    at once and published; the action is recorded (R-HK-28, R-HK-24, R-PDR-05).
    """
    with clock.frozen(T0):
        workflow, execution_id = _stuck(user, seconds_ago=10)
        geneva_jobs.clear()
        recovered = workflow.recover(force=True, actor="ops")
    assert recovered.id == execution_id
    assert execution_history(workflow.id) == [
        ("charge", "completed", "recovered"),
        ("charge", "scheduled", None),
    ]
    retry = execution_rows(workflow.id)[1]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [retry["id"]]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"], wf["next_step_name"]) == (
        "ready",
        None,
        "charge",
    )
    assert _operator_actions(workflow.id) == [
        ("recover_forced", "performing", "ready", execution_id, "api")
    ]


def test_recover_after_the_grace_needs_no_force(user, geneva_jobs):
    """An execution older than the grace (still far below the stuck threshold) is
    recovered without force (R-HK-28).
    """
    with clock.frozen(T0):
        workflow, execution_id = _stuck(user, seconds_ago=61)
        workflow.recover(execution_id)
    assert execution_history(workflow.id)[0] == ("charge", "completed", "recovered")
    assert _operator_actions(workflow.id)[0][0] == "recover"


def test_recover_honours_the_grace_setting(app, user, geneva_jobs):
    """GENEVA_RECOVER_GRACE sets the refusal window; a bad value is a configuration
    error naming the key (R-HK-28, R-CFG-01).
    """
    app.config["GENEVA_RECOVER_GRACE"] = timedelta(seconds=5)
    geneva.reload_settings(app)
    with clock.frozen(T0):
        workflow, _ = _stuck(user, seconds_ago=10)
        workflow.recover()
    assert execution_history(workflow.id)[0][2] == "recovered"
    app.config["GENEVA_RECOVER_GRACE"] = "soon"
    with pytest.raises(GenevaConfigurationError, match="GENEVA_RECOVER_GRACE"):
        geneva.reload_settings(app)
    app.config["GENEVA_RECOVER_GRACE"] = timedelta(seconds=5)


def test_recover_with_the_cancel_action_cancels_the_workflow(app, user, geneva_jobs):
    """With GENEVA_STUCK_RECOVERY_ACTION = "cancel" the execution is canceled/recovered
    and the workflow canceled (R-HK-28, R-HK-25).
    """
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    with clock.frozen(T0):
        workflow, _ = _stuck(user, seconds_ago=120)
        workflow.recover()
    assert execution_history(workflow.id) == [("charge", "canceled", "recovered")]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_recover_of_a_canceled_workflow_ends_its_execution(user, geneva_jobs):
    """cancel() leaves a dead worker's execution in_progress; recover() then sets it
    canceled/recovered and schedules nothing (R-HK-28, R-HK-27).
    """
    with clock.frozen(T0):
        workflow, execution_id = _stuck(user, seconds_ago=120)
        workflow.cancel()
        assert execution_history(workflow.id) == [("charge", "in_progress", None)]
        workflow.recover()
    assert execution_history(workflow.id) == [("charge", "canceled", "recovered")]
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert _operator_actions(workflow.id)[-1] == (
        "recover",
        "canceled",
        "canceled",
        execution_id,
        "api",
    )


def test_recover_of_a_paused_workflow_schedules_nothing_until_resume(user, geneva_jobs):
    """On a paused workflow the execution is completed/recovered and nothing is
    scheduled; resume() then retries the step (R-HK-28, R-HK-27, R-EXT-23).
    """
    with clock.frozen(T0):
        workflow, _ = _stuck(user, seconds_ago=120)
        workflow.pause()
        workflow.recover()
        assert execution_history(workflow.id) == [("charge", "completed", "recovered")]
        assert workflow_row(workflow.id)["state"] == "paused"
        assert workflow.resume().step_name == "charge"
    assert execution_history(workflow.id)[1] == ("charge", "scheduled", None)


def test_recover_of_a_resumable_step_keeps_its_cursor(user, geneva_jobs):
    """A recovered resumable execution is continued by a successor with its stored
    cursor (R-HK-28, R-HK-24).
    """
    with clock.frozen(T0):
        workflow, execution_id = _stuck(user, seconds_ago=120, cls=RecoverResumable)
        update_execution(execution_id, cursor=2)
        workflow.recover()
    first, successor = execution_rows(workflow.id)
    assert (first["state"], first["outcome"]) == ("completed", "recovered")
    assert (successor["continues_from_id"], successor["cursor"]) == (execution_id, 2)


def test_recover_refuses_when_nothing_or_another_execution_runs(user, geneva_jobs):
    """recover() refuses a workflow with nothing in progress, and an execution id that
    is not the in-progress one (R-HK-28).
    """
    workflow = RecoverTwoSteps.create(hero=user)
    with pytest.raises(
        InvalidStateError,
        match=rf"^Cannot recover workflow {workflow.id}: it has no step execution in",
    ):
        workflow.recover(force=True)
    with clock.frozen(T0):
        execution_id = make_in_progress(workflow, T0 - timedelta(minutes=5))
        with pytest.raises(
            InvalidStateError,
            match=rf"^Cannot recover step execution {execution_id + 1}: it is not",
        ):
            workflow.recover(execution_id + 1, force=True)
    assert execution_history(workflow.id) == [("charge", "in_progress", None)]


def test_cli_recover_never_recovers_the_execution_that_started_meanwhile(
    app, user, geneva_jobs
):
    """`flask geneva recover ID ID --force` recovers only the execution that was in
    progress when the command started: after the recovery a worker claims the
    rescheduled step at once, and the repeated id is processed once (noted), never
    ending that live execution, whose body would then run twice (R-HK-28, R-CLI-02).
    """
    workflow, stuck_id = _stuck(user, seconds_ago=3600)
    claimed: list = []

    def worker_claims_the_next_execution(session):
        if claimed:
            return
        # As a worker process would: its own connection, after the CLI's commit.
        table = executions_table()
        with geneva.db.engine.begin() as connection:
            next_id = connection.scalar(
                sa.select(table.c.id)
                .where(table.c.workflow_id == workflow.id)
                .where(table.c.state == "scheduled")
            )
            if next_id is not None:
                claimed.append(next_id)
                connection.execute(
                    sa.update(table)
                    .where(table.c.id == next_id)
                    .values(state="in_progress", started_at=T0)
                )

    sa_event.listen(orm.Session, "after_commit", worker_claims_the_next_execution)
    try:
        result = app.test_cli_runner().invoke(
            args=["geneva", "recover", "--force", str(workflow.id), str(workflow.id)]
        )
    finally:
        sa_event.remove(orm.Session, "after_commit", worker_claims_the_next_execution)
    assert len(claimed) == 1
    assert result.exit_code == 0, result.output
    assert result.output.count(f"workflow {workflow.id}: recover done") == 1
    assert f"workflow {workflow.id}: given more than once, processed once" in (
        result.output
    )
    assert "recover refused" not in result.output
    states = {r["id"]: (r["state"], r["outcome"]) for r in execution_rows(workflow.id)}
    assert states[stuck_id] == ("completed", "recovered")
    assert states[claimed[0]] == ("in_progress", None)


@pytest.mark.parametrize("execution_id", ["abc", -1, 0, 1.5, True, "9" * 30])
def test_recover_names_an_execution_id_that_is_no_id(user, execution_id):
    """recover(execution_id=...) with a value that is no execution id raises
    ValueError naming it and what is accepted; nothing changes (R-HK-28).
    """
    workflow, _stuck_id = _stuck(user, seconds_ago=3600)
    with pytest.raises(ValueError, match=r"execution_id must be an integer from 1"):
        workflow.recover(execution_id=execution_id)
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]


def test_recover_refuses_a_force_that_is_not_a_bool(user):
    """force="yes" is refused rather than taken as true (R-HK-28)."""
    workflow, _stuck_id = _stuck(user, seconds_ago=3600)
    with pytest.raises(TypeError, match=r"force must be True or False, got 'yes'"):
        workflow.recover(force="yes")
    assert [r["state"] for r in execution_rows(workflow.id)] == ["in_progress"]
