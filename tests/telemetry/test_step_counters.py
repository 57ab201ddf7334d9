"""Counters and histograms per workflow class and step (SPEC §28.2, R-OMET-*)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import Executor
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import execution_row
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row
from tests.telemetry.recording import RecordingHook

T0 = datetime(2030, 3, 1, 9, 0, tzinfo=UTC)
STEPS = "geneva_drive.step_executions"


class Boom(Exception):
    """A step failure."""


class MetricFlow(geneva.Workflow):
    cancel_conditions = [lambda wf: wf.hero.blocked]

    @step(skip_if=lambda wf: wf.hero.archived)
    def act(self):
        action = self.hero.email.split("@")[0]
        if action == "reattempt" and self.hero.counter == 0:
            self.hero.counter += 1
            self.reattempt()
        if action in ("cancel", "pause", "skip", "finish"):
            getattr(self, action)()
        if action == "boom":
            raise Boom("pause me")

    @step
    def tail(self):
        pass


class MetricSkipPolicy(geneva.Workflow):
    @step(on_exception="skip")
    def fragile(self):
        raise Boom("skip me")

    @step
    def tail(self):
        pass


@pytest.fixture
def hook():
    return RecordingHook()


@pytest.fixture
def app_config(hook):
    return {"GENEVA_METRICS": hook}


def _steps(**tags):
    return {"workflow": "MetricFlow", **tags}


def test_a_completed_workflow_counts_its_steps_creation_and_end(app, hook):
    """Each step that completes counts once with its class, step, outcome and
    transition; creation and the end count per class; durations are observed per
    class and step (R-OMET-10, R-OMET-11, R-OMET-12).
    """
    with clock.frozen(T0):
        workflow = MetricFlow.create(hero=make_user("run@example.com"))
        speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hook.counts(STEPS) == {
        tuple(
            sorted(_steps(step="act", outcome="success", transition="complete").items())
        ): 1,
        tuple(
            sorted(
                _steps(step="tail", outcome="success", transition="complete").items()
            )
        ): 1,
    }
    assert hook.count("geneva_drive.workflows_created", workflow="MetricFlow") == 1
    assert (
        hook.count(
            "geneva_drive.workflows_ended", workflow="MetricFlow", state="finished"
        )
        == 1
    )
    durations = [
        (name, value, tags["step"])
        for name, value, tags in hook.observations
        if tags["workflow"] == "MetricFlow"
    ]
    assert durations == [
        ("geneva_drive.step_duration_seconds", 0.0, "act"),
        ("geneva_drive.step_duration_seconds", 0.0, "tail"),
    ]
    assert all(set(tags) == {"workflow", "step"} for _, _, tags in hook.observations)


class MetricSlowStep(geneva.Workflow):
    frozen = None

    @step
    def slow(self):
        MetricSlowStep.frozen.advance(timedelta(seconds=7))


def test_the_duration_is_the_time_from_claim_to_end(app, hook):
    """The observed duration is the execution's finished_at - started_at by geneva's
    clock (R-OMET-11).
    """
    with clock.frozen(T0) as frozen:
        MetricSlowStep.frozen = frozen
        workflow = MetricSlowStep.create(hero=make_user("slow@example.com"))
        perform_next_step(workflow)
    assert [value for _, value, _ in hook.observations] == [7.0]


@pytest.mark.parametrize(
    ("action", "outcome", "transition", "workflow_metric"),
    [
        ("reattempt", "reattempted", "reattempt", None),
        ("cancel", "canceled", "cancel_signal", ("workflows_ended", "canceled")),
        ("pause", "canceled", "pause_signal", ("workflows_paused", "pause_signal")),
        ("skip", "skipped", "skip", None),
        ("finish", "success", "finish", ("workflows_ended", "finished")),
        ("boom", "failed", "fail_and_pause", ("workflows_paused", "fail_and_pause")),
    ],
)
def test_each_body_outcome_is_counted_with_its_transition(
    app, hook, action, outcome, transition, workflow_metric
):
    """Flow control and the default exception policy count the execution with its
    stored outcome and transition, and the workflow's end or pause (R-OMET-10, R-OMET-12).
    """
    workflow = MetricFlow.create(hero=make_user(f"{action}@example.com"))
    execution_id = workflow.current_execution.id
    if action == "boom":
        with pytest.raises(Boom):
            Executor.execute(execution_id)
    else:
        perform_next_step(workflow)
    row = execution_row(execution_id)
    assert row["outcome"] == outcome
    assert (
        hook.count(STEPS, **_steps(step="act", outcome=outcome, transition=transition))
        == 1
    )
    assert sum(hook.counts(STEPS).values()) == 1
    if workflow_metric is not None:
        name, value = workflow_metric
        key = "state" if name == "workflows_ended" else "transition"
        assert (
            hook.count(f"geneva_drive.{name}", workflow="MetricFlow", **{key: value})
            == 1
        )


def test_conditions_and_a_missing_hero_are_counted_though_no_body_ran(app, hook):
    """skip_if, a cancel condition and a deleted hero end executions without a body:
    each is counted by its transition; no duration is observed (R-OMET-10, R-OMET-11).
    """
    skipped = MetricFlow.create(hero=make_user("skipped@example.com"))
    skipped.hero.archived = True
    blocked = MetricFlow.create(hero=make_user("blocked@example.com"))
    blocked.hero.blocked = True
    gone_hero = make_user("gone@example.com")
    gone = MetricFlow.create(hero=gone_hero)
    db.session.commit()
    db.session.delete(gone_hero)
    db.session.commit()
    for workflow in (skipped, blocked, gone):
        perform_next_step(workflow)
    assert workflow_row(gone.id)["state"] == "canceled"
    assert (
        hook.count(
            STEPS,
            **_steps(step="act", outcome="skipped", transition="skip_before_step"),
        )
        == 1
    )
    assert (
        hook.count(
            STEPS,
            **_steps(step="act", outcome="canceled", transition="cancel_before_step"),
        )
        == 1
    )
    assert (
        hook.count(
            STEPS,
            **_steps(
                step="act", outcome="canceled", transition="cancel_for_missing_hero"
            ),
        )
        == 1
    )
    assert (
        hook.count(
            "geneva_drive.workflows_ended", workflow="MetricFlow", state="canceled"
        )
        == 2
    )
    assert hook.observations == []


def test_an_exception_policy_skip_is_counted(app, hook):
    """An exception policy's skip counts the failed step with outcome skipped (R-OMET-10)."""
    workflow = MetricSkipPolicy.create(hero=make_user("policy@example.com"))
    with pytest.raises(Boom):
        perform_next_step(workflow)
    counted = hook.counts(STEPS)
    assert list(counted.values()) == [1]
    tags = dict(next(iter(counted)))
    assert tags["workflow"] == "MetricSkipPolicy"
    assert (tags["step"], tags["outcome"]) == ("fragile", "skipped")


def test_recovery_of_a_dead_worker_is_counted_without_a_duration(app, hook):
    """Housekeeping's recovery of a stuck execution counts it with its recover_*
    transition; the run's end is unknown, so no duration is observed (R-OMET-10/11).
    """
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflow = MetricFlow.create(hero=make_user("stuck@example.com"))
        make_in_progress(workflow, T0)
        frozen.advance(timedelta(hours=2))
        run_housekeeping()
    counted = {
        dict(key)["transition"]: value for key, value in hook.counts(STEPS).items()
    }
    assert counted == {"recover_cancel": 1}
    assert hook.observations == []


def test_operator_actions_are_counted_per_class_action_and_via(app, hook):
    """pause, resume and cancel from outside a step count per class, action and via;
    the cancel ends the workflow and cancels its scheduled execution (R-OMET-13).
    """
    workflow = MetricFlow.create(hero=make_user("operated@example.com"))
    workflow.pause(via="admin")
    workflow.resume()
    workflow.cancel(via="cli")
    actions = "geneva_drive.operator_actions"
    assert hook.count(actions, workflow="MetricFlow", action="pause", via="admin") == 1
    assert hook.count(actions, workflow="MetricFlow", action="resume", via="api") == 1
    assert hook.count(actions, workflow="MetricFlow", action="cancel", via="cli") == 1
    assert (
        hook.count(
            "geneva_drive.workflows_paused",
            workflow="MetricFlow",
            transition="operator_pause",
        )
        == 1
    )
    assert (
        hook.count(
            "geneva_drive.workflows_ended", workflow="MetricFlow", state="canceled"
        )
        == 1
    )


def test_a_rolled_back_transition_counts_nothing(app, hook):
    """Facts are sent when the root transaction commits; a rollback drops them
    (R-OMET-03).
    """
    workflow = MetricFlow.create(hero=make_user("rollback@example.com"))
    hook.increments.clear()
    from flask_geneva.engine.transitions import table as transitions

    execution = workflow.current_execution
    transitions.apply(transitions.MARK_SKIPPED, clock.now(), execution=execution)
    db.session.flush()
    db.session.rollback()
    assert hook.increments == []
    transitions.apply(transitions.MARK_SKIPPED, clock.now(), execution=execution)
    db.session.commit()
    assert (
        hook.count(
            STEPS, **_steps(step="act", outcome="skipped", transition="mark_skipped")
        )
        == 1
    )


def test_cardinality_does_not_grow_with_workflows_or_heroes(app, hook):
    """Twenty workflows of twenty heroes make the same tag sets as one; no tag value
    is an id (R-OMET-04).
    """
    ids = set()
    for number in range(20):
        workflow = MetricFlow.create(hero=make_user(f"run{number}@example.com"))
        speedrun_workflow(workflow)
        ids |= {str(workflow.id), str(workflow.hero_id)}
        ids |= {str(row.id) for row in workflow.execution_history}
    series = {
        (name, tuple(sorted(tags.items())))
        for name, _, tags in hook.increments + hook.observations
    }
    assert len(series) == 6  # two steps, two durations, created, ended
    assert hook.count("geneva_drive.workflows_created", workflow="MetricFlow") == 20
    assert hook.tag_values().isdisjoint(ids)
    assert hook.tag_values() <= {
        "MetricFlow",
        "act",
        "tail",
        "success",
        "complete",
        "finished",
    }


def _raising_condition(workflow):
    raise Boom("condition broke")


class MetricBrokenCondition(geneva.Workflow):
    @step(skip_if=_raising_condition)
    def guarded(self):
        pass


def test_a_condition_that_raises_is_counted_with_its_policy(app, hook):
    """A skip_if that raises goes to the exception policy (the default pause): counted
    once as failed by fail_and_pause, and the workflow's pause (R-OMET-10, R-OMET-12).
    """
    workflow = MetricBrokenCondition.create(hero=make_user("broken@example.com"))
    with pytest.raises(Exception, match="condition broke"):
        perform_next_step(workflow)
    counted = {
        tuple(sorted(dict(key).items())): value
        for key, value in hook.counts(STEPS).items()
    }
    assert counted == {
        tuple(
            sorted(
                {
                    "workflow": "MetricBrokenCondition",
                    "step": "guarded",
                    "outcome": "failed",
                    "transition": "fail_and_pause",
                }.items()
            )
        ): 1
    }
    assert (
        hook.count(
            "geneva_drive.workflows_paused",
            workflow="MetricBrokenCondition",
            transition="fail_and_pause",
        )
        == 1
    )
