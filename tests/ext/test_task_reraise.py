"""Which policy-handled exceptions fail the step task (R-EXE-50 amended, GENEVA_TASK_RERAISE).

The default ``"unhandled"`` re-raises only exceptions that end in a pause, a cancel
or a terminal result; a reattempt, skip or finish the policy chose returns
normally. ``"always"`` re-raises every policy-handled exception. The executor
called directly keeps re-raising every one (R-TH-01).
"""

from __future__ import annotations

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


class Handled(Exception):
    """The failure every workflow here raises."""


class ReraiseSkip(geneva.Workflow):
    @step(on_exception="skip")
    def flaky(self):
        raise Handled("skip me")

    @step
    def tail(self):
        pass


class ReraiseCancel(geneva.Workflow):
    @step(on_exception="cancel")
    def doomed(self):
        raise Handled("cancel me")


class ReraiseDefaultPolicy(geneva.Workflow):
    @step
    def unguarded(self):
        raise Handled("no policy: default pause")


class ReraiseFinishHandler(geneva.Workflow):
    @step(on_exception=lambda workflow, error: workflow.finish())
    def last(self):
        raise Handled("finish instead")


def _exploding_condition(workflow):
    raise Handled("condition")


class ReraiseConditionReattempt(geneva.Workflow):
    @step(
        skip_if=_exploding_condition,
        on_exception=ExceptionPolicy("reattempt", max_reattempts=1),
    )
    def guarded(self):
        pass


def _current_id(workflow):
    db.session.refresh(workflow)
    execution_id = workflow.current_execution.id
    db.session.commit()
    return execution_id


def _task(workflow):
    """Run the current execution through the task function; None or the error."""
    execution_id = _current_id(workflow)
    try:
        perform_step_execution(execution_id)
    except Handled as error:
        return error
    finally:
        db.session.rollback()
    return None


@pytest.mark.parametrize(
    ("workflow_cls", "raised", "state"),
    [
        (ReraiseSkip, False, "ready"),
        (ReraiseFinishHandler, False, "finished"),
        (ReraiseCancel, True, "canceled"),
        (ReraiseDefaultPolicy, True, "paused"),
    ],
)
def test_default_reraises_only_unhandled_outcomes(user, workflow_cls, raised, state):
    """By default skip and finish return normally; cancel and the default pause fail the task (R-EXE-50 amended)."""
    workflow = workflow_cls.create(hero=user)
    error = _task(workflow)
    assert (error is not None) is raised
    assert workflow_row(workflow.id)["state"] == state


@pytest.mark.parametrize(
    "workflow_cls", [ReraiseSkip, ReraiseFinishHandler, ReraiseCancel]
)
def test_always_reraises_every_handled_exception(app, user, workflow_cls):
    """GENEVA_TASK_RERAISE='always' fails the task whatever the action (R-EXE-50 amended)."""
    app.config["GENEVA_TASK_RERAISE"] = "always"
    geneva.reload_settings(app)
    workflow = workflow_cls.create(hero=user)
    assert isinstance(_task(workflow), Handled)


def test_condition_exception_with_reattempt_follows_the_setting(app, user):
    """A condition exception whose policy reattempts returns normally by default; its terminal pause and 'always' raise (R-EXE-24, R-EXE-50 amended)."""
    workflow = ReraiseConditionReattempt.create(hero=user)
    assert _task(workflow) is None
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("scheduled", None),
    ]
    assert isinstance(_task(workflow), Handled)
    assert workflow_row(workflow.id)["state"] == "paused"

    other = ReraiseConditionReattempt.create(hero=user, allow_multiple=True)
    app.config["GENEVA_TASK_RERAISE"] = "always"
    geneva.reload_settings(app)
    assert isinstance(_task(other), Handled)


def test_executor_called_directly_reraises_every_handled_exception(user):
    """Executor.execute re-raises a skipped step's exception unless told otherwise (R-EXE-50, R-TH-01)."""
    workflow = ReraiseSkip.create(hero=user)
    with pytest.raises(Handled, match="skip me"):
        Executor.execute(_current_id(workflow))
    other = ReraiseSkip.create(hero=user, allow_multiple=True)
    Executor.execute(_current_id(other), reraise="unhandled")
    assert workflow_row(other.id)["next_step_name"] == "tail"


def test_executor_rejects_an_unknown_reraise_mode(user):
    """A bad reraise argument names the value and the allowed ones."""
    workflow = ReraiseSkip.create(hero=user)
    with pytest.raises(ValueError, match="'unhandled', 'always', got 'sometimes'"):
        Executor.execute(_current_id(workflow), reraise="sometimes")


@pytest.mark.parametrize(
    ("action", "terminal", "handled"),
    [
        ("reattempt", False, True),
        ("skip", False, True),
        ("finish", False, True),
        ("pause", False, False),
        ("cancel", False, False),
        ("skip", True, False),
        ("cancel", True, False),
        ("pause", True, False),
    ],
)
def test_handled_results_and_their_log_level(action, terminal, handled):
    """Reattempt, skip and finish are handled unless terminal; handled ones log at WARNING (R-EXE-50, R-LOG-06 amended)."""
    import logging

    from flask_geneva.policies import task_failures
    from flask_geneva.policies.resolution import PolicyResult

    result = PolicyResult(action=action, wait=None, terminal=terminal, report="always")
    assert task_failures.is_handled(result) is handled
    assert task_failures.should_reraise("unhandled", result) is not handled
    assert task_failures.should_reraise("always", result) is True
    assert task_failures.should_reraise("unhandled", None) is True
    assert task_failures.log_level(result) == (
        logging.WARNING if handled else logging.ERROR
    )


def test_an_unrecorded_exception_is_logged_before_the_error_that_stopped_it(caplog):
    """When the outcome transaction fails, the step's exception is still logged at ERROR (R-LOG-06)."""
    import logging

    from flask_geneva.policies import task_failures

    caplog.set_level(logging.ERROR, logger="tests.reraise")
    task_failures.log_unrecorded(
        logging.getLogger("tests.reraise"), Handled("lost?"), "encountered"
    )
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "encountered Handled: lost?; recording the outcome failed")
    ]
