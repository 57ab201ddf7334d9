"""The executor's three phases (SPEC §7), hooks and logging (R-LOG)."""

from __future__ import annotations

import contextlib
import logging
import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import HeroTypeNotFoundError
from flask_geneva import StepNotDefinedError
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.tagged_logging import TaggedLoggerAdapter
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

T0 = datetime(2030, 3, 1, 9, 0, tzinfo=UTC)


class Boom(Exception):
    """A step failure."""


def _current_id(workflow):
    return workflow.current_execution.id


class ExecutorTwoSteps(geneva.Workflow):
    observed = []

    @step
    def first(self):
        ExecutorTwoSteps.observed.append((self.state, self.current_step_name))
        self.hero.counter += 1

    @step
    def second(self):
        self.hero.counter += 10


class ExecutorSkipIf(geneva.Workflow):
    @step(skip_if=lambda wf: wf.hero.archived)
    def maybe(self):
        self.hero.counter += 1

    @step
    def after(self):
        self.hero.counter += 100


class ExecutorCancelIf(geneva.Workflow):
    cancel_conditions = [lambda wf: wf.hero.blocked]

    @step
    def work(self):
        self.hero.counter += 1


class ExecutorHeroless(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def work(self):
        pass


class ExecutorFlowControl(geneva.Workflow):
    @step
    def act(self):
        action = self.hero.email.split("@")[0]
        getattr(self, action)()

    @step
    def tail(self):
        pass


class ExecutorFailing(geneva.Workflow):
    @step(on_exception="pause")
    def pausing(self):
        self.hero.counter += 1
        raise Boom("pause me")


class ExecutorFailingSkip(geneva.Workflow):
    @step(on_exception="skip")
    def skipping(self):
        raise Boom("skip me")

    @step
    def tail(self):
        pass


class ExecutorFailingCancel(geneva.Workflow):
    @step(on_exception="cancel")
    def canceling(self):
        raise Boom("cancel me")


class ExecutorFailingReattempt(geneva.Workflow):
    @step(on_exception="reattempt")
    def retrying(self):
        raise Boom("again")


class ExecutorHooks(geneva.Workflow):
    calls = []
    fail_in = None

    def before_step_execution(self, execution):
        ExecutorHooks.calls.append(f"before:{execution.step_name}")
        if ExecutorHooks.fail_in == "before":
            raise Boom("before hook")

    @contextlib.contextmanager
    def _around(self, execution):
        ExecutorHooks.calls.append(f"around-enter:{execution.id}")
        if ExecutorHooks.fail_in == "around":
            raise Boom("around hook")
        yield
        ExecutorHooks.calls.append("around-exit")

    def around_step_execution(self, execution):
        return self._around(execution)

    def after_step_execution(self, execution):
        ExecutorHooks.calls.append(f"after:{execution.step_name}")
        if ExecutorHooks.fail_in == "after":
            raise Boom("after hook")

    @step
    def body(self):
        ExecutorHooks.calls.append("body")
        self.hero.counter += 1

    @step
    def tail(self):
        pass


class _ObservingContext:
    """An around_step_execution context that records what its exit was given."""

    def __init__(self, seen):
        self.seen = seen

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.seen.append(exc_info)
        return False


class ExecutorAroundObserver(geneva.Workflow):
    """Its body does what the hero's email names: return, raise or pause."""

    exits = []

    def around_step_execution(self, execution):
        return _ObservingContext(ExecutorAroundObserver.exits)

    @step(on_exception="pause")
    def work(self):
        action = self.hero.email.split("@")[0]
        if action == "raise":
            raise Boom("seen by the executor only")
        if action != "return":
            getattr(self, action)()


class ExecutorExternal(geneva.Workflow):
    """Its body changes its own rows through another connection."""

    change = {}

    @step
    def work(self):
        change = ExecutorExternal.change
        if "execution" in change:
            update_execution(_current_id_from_rows(self.id), **change["execution"])
        if "workflow" in change:
            update_workflow(self.id, **change["workflow"])
        if change.get("raise"):
            raise Boom("raised after the external change")

    @step
    def tail(self):
        pass


def _current_id_from_rows(workflow_id):
    return next(
        row["id"]
        for row in execution_rows(workflow_id)
        if row["state"] == "in_progress"
    )


class ExecutorInterrupted(geneva.Workflow):
    @step
    def work(self):
        raise KeyboardInterrupt


class ExecutorLogging(geneva.Workflow):
    loggers = []

    def before_step_execution(self, execution):
        ExecutorLogging.loggers.append((self.logger, execution.logger))

    @step
    def talk(self):
        self.logger.info("hello from the step")


class ExecutorLoggingHeroless(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def talk(self):
        self.logger.info("hello from the step")


class ExecutorWriteThenPause(geneva.Workflow):
    @step
    def work(self):
        self.hero.counter += 5
        self.pause()


@pytest.fixture
def reports(app):
    """Collect error reporter calls."""
    calls = []

    def reporter(error, *, handled, context, source):
        calls.append((error, {"handled": handled, "source": source, **context}))

    app.config["GENEVA_ERROR_REPORTER"] = reporter
    geneva.reload_settings(app)
    return calls


# -- success path (R-EXE-17, R-EXE-44, R-EXE-46) ---------------------------------------


def test_success_completes_and_schedules_the_next_step(user):
    """A returning body completes with success and schedules the next step (R-EXE-44,
    R-EXE-46).
    """
    ExecutorTwoSteps.observed.clear()
    with clock.frozen(T0):
        workflow = ExecutorTwoSteps.create(hero=user)
        first = perform_next_step(workflow)
    assert ExecutorTwoSteps.observed == [("performing", "first")]
    row = execution_row(first.id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    assert row["started_at"] == T0
    assert row["completed_at"] == row["finished_at"] == T0
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"], wf["next_step_name"]) == (
        "ready",
        None,
        "second",
    )
    assert [e["state"] for e in execution_rows(workflow.id)] == [
        "completed",
        "scheduled",
    ]
    assert hero_counter(user.id) == 1


def test_completed_execution_is_not_run_again(user, geneva_jobs):
    """A duplicate delivery of a completed execution changes nothing (R-EXE-11)."""
    workflow = ExecutorTwoSteps.create(hero=user)
    first_id = _current_id(workflow)
    Executor.execute(first_id)
    before = execution_rows(workflow.id)
    geneva_jobs.clear()
    Executor.execute(first_id)
    assert execution_rows(workflow.id) == before
    assert hero_counter(user.id) == 1
    assert geneva_jobs.enqueued == []


def test_in_progress_execution_is_not_run_twice(user):
    """A delivery for an in-progress execution does nothing (R-EXE-11)."""
    workflow = ExecutorTwoSteps.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, state="in_progress")
    before = execution_rows(workflow.id)
    Executor.execute(execution_id)
    assert execution_rows(workflow.id) == before
    assert hero_counter(user.id) == 0


def test_missing_execution_is_a_no_op(app, caplog):
    """An unknown execution id logs a warning, writes nothing and returns (R-EXE-11, R-JOB-20)."""
    caplog.set_level("WARNING", logger="flask_geneva")
    assert Executor.execute(987654) is None
    assert any("987654" in r.getMessage() for r in caplog.records)
    assert db.session.scalar(sa.select(sa.func.count(geneva.StepExecution.id))) == 0


@pytest.mark.parametrize("state", ["paused", "finished", "canceled"])
def test_execution_of_a_non_runnable_workflow_is_canceled(user, state):
    """A non-ready/performing workflow cancels the execution and stays unchanged
    (R-EXE-12).
    """
    workflow = ExecutorTwoSteps.create(hero=user)
    execution_id = _current_id(workflow)
    update_workflow(workflow.id, state=state, transitioned_at=T0)
    with clock.frozen(T0 + timedelta(hours=1)):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert row["canceled_at"] == row["finished_at"] == T0 + timedelta(hours=1)
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["transitioned_at"]) == (state, T0)
    assert hero_counter(user.id) == 0


# -- preconditions (R-EXE-13, R-EXE-20..22) --------------------------------------------


def test_skip_if_is_evaluated_at_execution_time(user):
    """skip_if is read when the step runs, not when it is scheduled; a skip ends the
    execution before the body (R-EXE-16, R-EXE-21, R-CND-03).
    """
    workflow = ExecutorSkipIf.create(hero=user)
    user.archived = True
    db.session.commit()
    skipped = perform_next_step(workflow)
    row = execution_row(skipped.id)
    assert (row["state"], row["outcome"]) == ("skipped", "skipped")
    assert row["skipped_at"] == row["finished_at"]
    assert workflow_row(workflow.id)["next_step_name"] == "after"
    speedrun_workflow(workflow)
    assert hero_counter(user.id) == 100
    assert workflow_row(workflow.id)["state"] == "finished"


def test_cancel_condition_cancels_the_workflow(user):
    """A truthy cancel condition cancels execution and workflow; the body does not run
    (R-EXE-16, R-EXE-20).
    """
    workflow = ExecutorCancelIf.create(hero=user)
    user.blocked = True
    db.session.commit()
    execution = perform_next_step(workflow)
    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert workflow_row(workflow.id)["transitioned_at"] is not None
    assert hero_counter(user.id) == 0


def test_deleted_hero_cancels_the_workflow(user):
    """A missing hero cancels execution and workflow without raising (R-EXE-13)."""
    workflow = ExecutorTwoSteps.create(hero=user)
    db.session.delete(user)
    db.session.commit()
    execution = perform_next_step(workflow)
    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("canceled", "canceled")
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_may_proceed_without_hero_runs_the_step(app):
    """may_proceed_without_hero lets a hero-less workflow run (R-HERO-05)."""
    workflow = ExecutorHeroless.create(hero=None)
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert execution_rows(workflow.id)[0]["outcome"] == "success"


# -- in-step flow control (R-EXE-44, R-FC-10..14) --------------------------------------


@pytest.mark.parametrize(
    ("action", "execution_state", "outcome", "workflow_state", "count"),
    [
        ("cancel", "canceled", "canceled", "canceled", 1),
        ("pause", "canceled", "canceled", "paused", 1),
        ("skip", "skipped", "skipped", "ready", 2),
        ("finish", "completed", "success", "finished", 1),
    ],
)
def test_in_step_flow_control(
    user, action, execution_state, outcome, workflow_state, count
):
    """In-step signals set the execution and workflow states of §8.1; finish ends
    ``success`` (R-FC-10..14, R-SE-10).
    """
    user.email = f"{action}@example.com"
    db.session.commit()
    workflow = ExecutorFlowControl.create(hero=user)
    execution = perform_next_step(workflow)
    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == (execution_state, outcome)
    assert workflow_row(workflow.id)["state"] == workflow_state
    assert workflow_row(workflow.id)["current_step_name"] is None
    assert len(execution_rows(workflow.id)) == count


# -- exceptions (R-EXE-45, R-EXE-47, R-EXE-50) -----------------------------------------


def test_exception_with_pause_policy(user):
    """A pause policy fails the execution, records the error, pauses and re-raises
    (R-EXE-45, R-EXE-50).
    """
    workflow = ExecutorFailing.create(hero=user)
    execution_id = _current_id(workflow)
    with clock.frozen(T0), pytest.raises(Boom, match="pause me"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert row["failed_at"] == row["finished_at"] == T0
    assert row["error_message"] == "pause me"
    assert row["error_class_name"] == "tests.engine.executor.test_executor.Boom"
    assert "raise Boom" in row["error_backtrace"]
    assert (
        row["metadata"]["exception"]["class"]
        == "tests.engine.executor.test_executor.Boom"
    )
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"], wf["next_step_name"]) == (
        "paused",
        None,
        "pausing",
    )


def test_exception_rolls_back_the_body_writes(user):
    """After a captured exception the body's uncommitted writes are discarded
    (R-EXE-38).
    """
    workflow = ExecutorFailing.create(hero=user)
    with pytest.raises(Boom):
        perform_next_step(workflow)
    assert hero_counter(user.id) == 0


def test_body_writes_are_committed_on_success_and_flow_control(user):
    """A returning body's writes and a signalling body's writes persist (R-EXE-38)."""
    workflow = ExecutorTwoSteps.create(hero=user)
    perform_next_step(workflow)
    assert hero_counter(user.id) == 1
    other = ExecutorWriteThenPause.create(hero=user)
    perform_next_step(other)
    assert workflow_row(other.id)["state"] == "paused"
    assert hero_counter(user.id) == 6


def test_exception_with_skip_policy(user):
    """A skip policy skips (error kept), schedules the next step and re-raises
    (R-EXE-45, R-EXE-50).
    """
    workflow = ExecutorFailingSkip.create(hero=user)
    execution_id = _current_id(workflow)
    with pytest.raises(Boom, match="skip me"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("skipped", "skipped")
    assert row["skipped_at"] == row["finished_at"]
    assert row["error_message"] == "skip me"
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("ready", "tail")
    assert execution_rows(workflow.id)[-1]["state"] == "scheduled"


def test_exception_with_cancel_policy(user):
    """A cancel policy fails the execution with outcome canceled and cancels
    (R-EXE-45).
    """
    workflow = ExecutorFailingCancel.create(hero=user)
    execution_id = _current_id(workflow)
    with pytest.raises(Boom, match="cancel me"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "canceled")
    assert row["error_message"] == "cancel me"
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_exception_with_reattempt_policy_is_reraised_after_scheduling(user):
    """A reattempt schedules a new execution and still re-raises (R-EXE-45,
    R-EXE-50, R-SE-30).
    """
    workflow = ExecutorFailingReattempt.create(hero=user)
    execution_id = _current_id(workflow)
    with pytest.raises(Boom, match="again"):
        Executor.execute(execution_id)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("scheduled", None),
    ]
    assert rows[0]["error_message"] is None
    assert rows[0]["metadata"]["exception"]["message"] == "again"
    assert rows[0]["metadata"]["reattempt_reason"] == "exception_policy"
    assert workflow_row(workflow.id)["state"] == "ready"


@pytest.mark.parametrize(
    ("workflow_cls", "state"),
    [
        (ExecutorFailing, "failed"),
        (ExecutorFailingSkip, "skipped"),
        (ExecutorFailingCancel, "failed"),
    ],
)
def test_finished_at_equals_the_state_timestamp(user, workflow_cls, state):
    """finished_at equals the terminal state's own timestamp (R-SE-02)."""
    workflow = workflow_cls.create(hero=user)
    with clock.frozen(T0), pytest.raises(Boom):
        perform_next_step(workflow)
    row = execution_rows(workflow.id)[0]
    assert row["state"] == state
    assert row[f"{state}_at"] == row["finished_at"] == T0


def test_unknown_step_name_fails_and_pauses(user, reports):
    """An execution of an undefined step fails, pauses and raises StepNotDefinedError
    (R-EXE-14).
    """
    workflow = ExecutorTwoSteps.create(hero=user)
    execution_id = _current_id(workflow)
    update_execution(execution_id, step_name="removed_step")
    with pytest.raises(StepNotDefinedError) as raised:
        Executor.execute(execution_id)
    assert raised.value.step_execution.id == execution_id
    assert raised.value.workflow.id == workflow.id
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert (
        row["error_message"] == "Step 'removed_step' is not defined in ExecutorTwoSteps"
    )
    assert workflow_row(workflow.id)["state"] == "paused"
    assert reports == []


# -- hooks (R-EXE-33..37, R-EXE-60/61) -------------------------------------------------


def test_hooks_run_in_order_around_the_body(user):
    """before → around(enter) → body → around(exit) → after; around gets the execution
    (R-EXE-33..36).
    """
    ExecutorHooks.calls.clear()
    ExecutorHooks.fail_in = None
    workflow = ExecutorHooks.create(hero=user)
    execution_id = _current_id(workflow)
    Executor.execute(execution_id)
    assert ExecutorHooks.calls == [
        "before:body",
        f"around-enter:{execution_id}",
        "body",
        "around-exit",
        "after:body",
    ]


class ExecutorPlainHooks(geneva.Workflow):
    """Leaves the three hooks at their defaults."""

    @step
    def only(self):
        pass


def test_hooks_set_on_the_class_or_instance_later_still_run(user, monkeypatch):
    """A hook assigned after the class was defined, on the class or on the instance
    the executor runs, is called as a defined one (R-EXE-33, R-EXE-34, R-EXE-36): the
    executor skips only hooks left at their no-op defaults.
    """
    calls = []
    monkeypatch.setattr(
        ExecutorPlainHooks,
        "before_step_execution",
        lambda self, execution: calls.append(f"before:{execution.step_name}"),
        raising=False,
    )
    monkeypatch.setattr(
        ExecutorPlainHooks,
        "around_step_execution",
        lambda self, execution: _ObservingContext(calls),
        raising=False,
    )
    workflow = ExecutorPlainHooks.create(hero=user)
    # The executor runs this very instance (the session's identity map).
    workflow.after_step_execution = lambda execution: calls.append(
        f"after:{execution.step_name}"
    )
    Executor.execute(_current_id(workflow))
    assert calls == ["before:only", (None, None, None), "after:only"]
    assert workflow_row(workflow.id)["state"] == "finished"


def test_hooks_do_not_run_when_preconditions_end_execution(user):
    """Hooks run only when the body runs (R-EXE-60)."""
    ExecutorHooks.calls.clear()
    ExecutorHooks.fail_in = None
    workflow = ExecutorHooks.create(hero=user)
    update_workflow(workflow.id, state="paused")
    Executor.execute(_current_id(workflow))
    assert ExecutorHooks.calls == []


@pytest.mark.parametrize("where", ["before", "around"])
def test_before_and_around_hook_errors_count_as_body_errors(user, reports, where):
    """An exception in before/around hooks is handled like a body exception
    (R-EXE-37).
    """
    ExecutorHooks.calls.clear()
    ExecutorHooks.fail_in = where
    try:
        workflow = ExecutorHooks.create(hero=user)
        execution_id = _current_id(workflow)
        with pytest.raises(Boom, match=f"{where} hook"):
            Executor.execute(execution_id)
    finally:
        ExecutorHooks.fail_in = None
    assert "body" not in ExecutorHooks.calls
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert row["error_message"] == f"{where} hook"
    assert workflow_row(workflow.id)["state"] == "paused"
    assert [str(e) for e, _ in reports] == [f"{where} hook"]
    assert hero_counter(user.id) == 0


def test_after_hook_error_is_reported_but_does_not_change_the_outcome(user, reports):
    """An exception in after_step_execution is reported, not raised; the outcome stands
    (R-EXE-37).
    """
    ExecutorHooks.calls.clear()
    ExecutorHooks.fail_in = "after"
    try:
        workflow = ExecutorHooks.create(hero=user)
        execution_id = _current_id(workflow)
        Executor.execute(execution_id)
    finally:
        ExecutorHooks.fail_in = None
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    assert workflow_row(workflow.id)["next_step_name"] == "tail"
    assert hero_counter(user.id) == 1
    assert [(str(e), info["handled"]) for e, info in reports] == [("after hook", True)]


@pytest.mark.parametrize(
    ("action", "state", "outcome"),
    [
        ("return", "completed", "success"),
        ("raise", "failed", "failed"),
        ("pause", "canceled", "canceled"),
        ("skip", "skipped", "skipped"),
    ],
)
def test_around_hook_does_not_observe_body_exceptions_or_signals(
    user, action, state, outcome
):
    """The around context exits cleanly whatever the body did: exceptions and
    signals are captured inside it (R-EXE-61).
    """
    ExecutorAroundObserver.exits.clear()
    user.email = f"{action}@example.com"
    db.session.commit()
    workflow = ExecutorAroundObserver.create(hero=user)
    execution_id = _current_id(workflow)
    with contextlib.suppress(Boom):
        Executor.execute(execution_id)
    assert ExecutorAroundObserver.exits == [(None, None, None)]
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == (state, outcome)


# -- BaseException (R-EXE-35) ----------------------------------------------------------


def test_non_signal_base_exception_leaves_the_rows_in_progress(user):
    """KeyboardInterrupt propagates and leaves in_progress/performing for housekeeping
    (R-EXE-35).
    """
    workflow = ExecutorInterrupted.create(hero=user)
    execution_id = _current_id(workflow)
    with pytest.raises(KeyboardInterrupt):
        Executor.execute(execution_id)
    db.session.rollback()
    assert execution_row(execution_id)["state"] == "in_progress"
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == ("performing", "work")


# -- unknown hero class (R-EXE-30/31) --------------------------------------------------


class ExecutorHeroGoneSkip(geneva.Workflow):
    @step(on_exception="skip")
    def work(self):
        pass

    @step
    def tail(self):
        pass


class ExecutorHeroGoneCancel(geneva.Workflow):
    @step(on_exception="cancel")
    def work(self):
        pass


class ExecutorHeroGoneReattempt(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=2)
    def work(self):
        pass


def test_unknown_hero_class_fails_and_pauses(user, reports):
    """A hero type that resolves to no class fails the execution and pauses
    (R-EXE-30, R-EXE-31, R-HERO-03).
    """
    workflow = ExecutorTwoSteps.create(hero=user)
    execution_id = _current_id(workflow)
    update_workflow(workflow.id, hero_type="VanishedModel")
    with pytest.raises(HeroTypeNotFoundError, match="VanishedModel"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert "VanishedModel" in row["error_message"]
    assert row["error_class_name"] == "flask_geneva.exceptions.HeroTypeNotFoundError"
    assert "HeroTypeNotFoundError" in row["error_backtrace"]
    assert workflow_row(workflow.id)["state"] == "paused"
    assert [type(e) for e, _ in reports] == [HeroTypeNotFoundError]


def test_unknown_hero_class_with_skip_policy(user):
    """A skip policy skips to the next step; the execution stays failed
    (R-EXE-30, R-EXE-31).
    """
    workflow = ExecutorHeroGoneSkip.create(hero=user)
    execution_id = _current_id(workflow)
    update_workflow(workflow.id, hero_type="VanishedModel")
    with pytest.raises(HeroTypeNotFoundError):
        Executor.execute(execution_id)
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("work", "failed", "failed"),
        ("tail", "scheduled", None),
    ]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("ready", "tail")


def test_unknown_hero_class_with_cancel_policy(user):
    """A cancel policy cancels the workflow; the execution stays failed
    (R-EXE-30, R-EXE-31).
    """
    workflow = ExecutorHeroGoneCancel.create(hero=user)
    execution_id = _current_id(workflow)
    update_workflow(workflow.id, hero_type="VanishedModel")
    with pytest.raises(HeroTypeNotFoundError):
        Executor.execute(execution_id)
    assert (
        execution_row(execution_id)["state"],
        execution_row(execution_id)["outcome"],
    ) == (
        "failed",
        "failed",
    )
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_prepare_reattempts_are_counted(user):
    """Prepare-phase reattempts are recorded and capped by max_reattempts; each
    execution stays failed/failed (R-EXE-31, R-EXE-32, R-CNT-06, R-SE-30).
    """
    workflow = ExecutorHeroGoneReattempt.create(hero=user)
    update_workflow(workflow.id, hero_type="VanishedModel")
    for _ in range(3):
        with pytest.raises(HeroTypeNotFoundError):
            perform_next_step(workflow)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [("failed", "failed")] * 3
    assert [r["metadata"].get("reattempt_reason") for r in rows] == [
        "prepare",
        "prepare",
        None,
    ]
    assert workflow_row(workflow.id)["state"] == "paused"


# -- external changes during the step (R-EXE-41..43) -----------------------------------


@pytest.mark.parametrize("raise_error", [False, True])
def test_execution_changed_externally_during_the_step(user, reports, raise_error):
    """If the execution left in_progress meanwhile, finalize changes nothing and drops
    the error (R-EXE-41, R-EXE-43).
    """
    ExecutorExternal.change = {
        "execution": {"state": "completed", "outcome": "recovered"},
        "raise": raise_error,
    }
    workflow = ExecutorExternal.create(hero=user)
    execution_id = _current_id(workflow)
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "recovered")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == ("performing", "work")
    assert len(execution_rows(workflow.id)) == 1
    if raise_error:
        assert [(str(e), info["handled"]) for e, info in reports] == [
            ("raised after the external change", True)
        ]
    else:
        assert reports == []


@pytest.mark.parametrize("new_state", ["paused", "canceled", "finished"])
@pytest.mark.parametrize("raise_error", [False, True])
def test_workflow_changed_externally_during_the_step(
    user, reports, new_state, raise_error
):
    """If the workflow left performing meanwhile, the execution records what the body
    did (completed/success, or failed/failed with the error reported and not
    re-raised) and the operator's state stays; only a paused workflow gets its next
    step preserved, unpublished (R-EXE-42 amended, R-EXE-43).
    """
    ExecutorExternal.change = {"workflow": {"state": new_state}, "raise": raise_error}
    workflow = ExecutorExternal.create(hero=user)
    execution_id = _current_id(workflow)
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    if raise_error:
        assert (row["state"], row["outcome"]) == ("failed", "failed")
        assert row["error_message"] == "raised after the external change"
        assert row["failed_at"] == row["finished_at"]
    else:
        assert (row["state"], row["outcome"]) == ("completed", "success")
        assert row["completed_at"] == row["finished_at"]
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == (new_state, None)
    rows = execution_rows(workflow.id)
    if new_state == "paused" and not raise_error:
        assert [(r["step_name"], r["state"], r["job_id"]) for r in rows[1:]] == [
            ("tail", "scheduled", "geneva:deferred")
        ]
        assert wf["next_step_name"] == "tail"
    else:
        assert len(rows) == 1
        assert wf["next_step_name"] == "work"
    assert len(reports) == (1 if raise_error else 0)


# -- logging (R-LOG-01..05, R-EXE-01) --------------------------------------------------


def test_injected_logger_tags_prefix_step_log_lines(user, caplog):
    """Step log lines carry the job, workflow and execution tags in order
    (R-LOG-01..03).
    """
    workflow = ExecutorLogging.create(hero=user)
    execution_id = _current_id(workflow)
    base = TaggedLoggerAdapter(logging.getLogger("tests.job"), ("job_id=abc",))
    with caplog.at_level(logging.INFO):
        Executor.execute(execution_id, logger=base)
    expected = (
        f"[job_id=abc] [ExecutorLogging id={workflow.id} hero_type=User "
        f"hero_id={user.id}] [execution_id={execution_id} step_name=talk] "
        "hello from the step"
    )
    assert expected in caplog.messages
    record = next(r for r in caplog.records if r.getMessage() == expected)
    assert record.name == "tests.job"


def test_default_logger_is_flask_geneva(app, caplog):
    """Without an injected logger the flask_geneva logger is used; no hero tags when
    hero-less (R-LOG-01, R-LOG-04).
    """
    workflow = ExecutorLoggingHeroless.create(hero=None)
    execution_id = _current_id(workflow)
    with caplog.at_level(logging.INFO, logger="flask_geneva"):
        Executor.execute(execution_id)
    expected = (
        f"[ExecutorLoggingHeroless id={workflow.id}] "
        f"[execution_id={execution_id} step_name=talk] hello from the step"
    )
    record = next(r for r in caplog.records if r.getMessage() == expected)
    assert record.name == "flask_geneva"


@pytest.mark.parametrize(
    ("workflow_cls", "email", "classification"),
    [
        (ExecutorLogging, "hero@example.com", "completed"),
        (ExecutorFailing, "hero@example.com", "exception"),
        (ExecutorFlowControl, "pause@example.com", "pause"),
        (ExecutorFlowControl, "finish@example.com", "finished"),
    ],
)
def test_finished_step_logs_its_outcome(
    user, caplog, workflow_cls, email, classification
):
    """The run logs "Finished step with outcome <classification>" with the step's
    tags (R-EXE-39).
    """
    user.email = email
    db.session.commit()
    workflow = workflow_cls.create(hero=user)
    execution_id = _current_id(workflow)
    with (
        caplog.at_level(logging.INFO, logger="flask_geneva"),
        contextlib.suppress(Boom),
    ):
        Executor.execute(execution_id)
    finished = [m for m in caplog.messages if "Finished step with outcome" in m]
    assert len(finished) == 1, caplog.messages
    assert re.fullmatch(
        rf"\[{workflow_cls.__name__} id=\S+ hero_type=User hero_id=\S+\] "
        rf"\[execution_id={execution_id} step_name=\w+\] "
        rf"Finished step with outcome {classification} in \d+\.\d{{3}}s",
        finished[0],
    ), finished[0]


def test_workflow_logger_is_the_execution_logger_during_a_step(user):
    """During a step self.logger is execution.logger; afterwards only the workflow tag
    remains (R-LOG-05, R-EXE-01, R-WF-30).
    """
    ExecutorLogging.loggers.clear()
    workflow = ExecutorLogging.create(hero=user)
    execution_id = _current_id(workflow)
    Executor.execute(execution_id)
    workflow_logger, execution_logger = ExecutorLogging.loggers[0]
    assert workflow_logger is execution_logger
    assert workflow_logger.tags[-1] == f"execution_id={execution_id} step_name=talk"
    assert workflow.logger.tags == (
        f"ExecutorLogging id={workflow.id} hero_type=User hero_id={user.id}",
    )


def test_an_error_after_a_precondition_skip_fails_the_scheduled_execution(
    user, monkeypatch
):
    """An error while applying a skip_if skip is a Phase 1 error (R-EXE-30).

    The skip was half-applied in memory only; the execution read under the lock is
    still ``scheduled``, so it ends failed/``failed`` and the default policy pauses
    the workflow, instead of the half-applied skip refusing the failure.
    """
    from flask_geneva.engine import scheduling

    workflow = ExecutorSkipIf.create(hero=user)
    user.archived = True
    db.session.commit()
    execution_id = _current_id(workflow)

    def broken(*args, **kwargs):
        raise RuntimeError("scheduling broke")

    monkeypatch.setattr(scheduling, "schedule_next_step", broken)
    with contextlib.suppress(RuntimeError):
        perform_next_step(workflow)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert "scheduling broke" in row["error_message"]
    assert workflow_row(workflow.id)["state"] == "paused"
