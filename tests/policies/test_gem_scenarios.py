"""Gem scenarios of SPEC §17 not covered elsewhere: class-level integration, policy lists,
precondition exceptions, the safety cap and hook/external-change reporting.
"""

from __future__ import annotations

import contextlib

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import Executor
from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import CONDITION_ERROR_OUTCOMES
from tests.support.workflow import execution_history
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import fail_next_step
from tests.support.workflow import hero_counter
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


class ErrorA(Exception):
    """First kind of failure."""


class ErrorB(Exception):
    """Second kind of failure."""


class Script:
    """What the next step runs do: an exception to raise, "reattempt", or success."""

    plan: list[object] = []

    @classmethod
    def run(cls, workflow):
        item = cls.plan.pop(0) if cls.plan else None
        if item == "reattempt":
            workflow.reattempt()
        if isinstance(item, BaseException):
            raise item
        workflow.hero.counter += 1


@pytest.fixture(autouse=True)
def _reset_script():
    Script.plan = []
    yield
    Script.plan = []


class GemClassBlanket(geneva.Workflow):
    exception_policies = [on_exception("reattempt", max_reattempts=2)]

    @step
    def work(self):
        Script.run(self)


class GemClassOverridden(geneva.Workflow):
    exception_policies = [on_exception("cancel")]

    @step(on_exception=ExceptionPolicy("skip"))
    def work(self):
        Script.run(self)

    @step
    def tail(self):
        pass


class GemClassPolling(geneva.Workflow):
    exception_policies = [on_exception("reattempt", max_reattempts=1)]

    @step
    def poll(self):
        Script.run(self)


class GemList(geneva.Workflow):
    exception_policies = [on_exception("pause")]

    @step(
        on_exception=[
            ExceptionPolicy("reattempt", matching=ErrorA, max_reattempts=10),
            ExceptionPolicy(
                "reattempt", matching=ErrorB, max_reattempts=3, terminal_action="cancel"
            ),
        ]
    )
    def work(self):
        Script.run(self)


class GemListBlanket(geneva.Workflow):
    exception_policies = [on_exception("cancel")]

    @step(
        on_exception=[
            ExceptionPolicy("reattempt", matching=ErrorA),
            ExceptionPolicy("skip"),
        ]
    )
    def work(self):
        Script.run(self)

    @step
    def tail(self):
        pass


class GemSafetyCap(geneva.Workflow):
    exception_policies = [on_exception(ErrorA, action="reattempt")]

    @step
    def work(self):
        raise ErrorA("forever")


def _skip_if_raises(workflow):
    raise ErrorA("skip_if broke")


class GemSkipIfRaises(geneva.Workflow):
    action = "pause"

    @step(
        skip_if=_skip_if_raises,
        on_exception=lambda wf, error: getattr(wf, GemSkipIfRaises.action)(),
    )
    def work(self):
        self.hero.counter += 1

    @step
    def tail(self):
        pass


class GemHooks(geneva.Workflow):
    @contextlib.contextmanager
    def _around(self, execution):
        yield
        raise ErrorB("around exit")

    def around_step_execution(self, execution):
        return self._around(execution)

    @step(on_exception="skip")
    def work(self):
        self.hero.counter += 1

    @step
    def tail(self):
        pass


class GemDropped(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("pause", report="never"))
    def work(self):
        update_workflow(self.id, state="canceled")
        raise ErrorA("nobody re-raises me")


@pytest.fixture
def reports(app):
    calls = []

    def reporter(error, *, handled, context, source):
        calls.append((error, handled, context))

    app.config["GENEVA_ERROR_REPORTER"] = reporter
    geneva.reload_settings(app)
    return calls


# -- class_level_on_exception_integration_test.rb --------------------------------------


def test_class_blanket_reattempts_with_reason_and_max(user):
    """A blanket class policy reattempts with reason exception_policy and stops at its max (R-POL-40, R-POL-13, R-CNT-04)."""
    Script.plan = [ErrorA("1"), ErrorA("2"), ErrorA("3")]
    workflow = GemClassBlanket.create(hero=user)
    for _ in range(3):
        fail_next_step(workflow, ErrorA)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("failed", "failed"),
    ]
    assert [r["metadata"].get("reattempt_reason") for r in rows[:2]] == [
        "exception_policy"
    ] * 2
    assert workflow_row(workflow.id)["state"] == "paused"


def test_step_policy_object_overrides_class_level(user):
    """A step-level ExceptionPolicy wins over a class-level blanket policy (R-POL-40)."""
    Script.plan = [ErrorA("skip, not cancel")]
    workflow = GemClassOverridden.create(hero=user)
    fail_next_step(workflow, ErrorA)
    assert execution_history(workflow.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]
    assert workflow_row(workflow.id)["state"] == "ready"


def test_flow_control_reattempts_do_not_count_for_class_policies(user):
    """Polling with reattempt() does not use up a class policy's max of 1 (R-CNT-03, R-FC-16)."""
    Script.plan = ["reattempt", "reattempt", "reattempt", ErrorA("a"), ErrorA("b")]
    workflow = GemClassPolling.create(hero=user)
    for _ in range(3):
        perform_next_step(workflow)
    fail_next_step(workflow, ErrorA)
    assert workflow_row(workflow.id)["state"] == "ready"
    fail_next_step(workflow, ErrorA)
    assert [h[2] for h in execution_history(workflow.id)] == [
        "reattempted",
        "reattempted",
        "reattempted",
        "reattempted",
        "failed",
    ]
    assert workflow_row(workflow.id)["state"] == "paused"


# -- composable_exception_policy_test.rb -----------------------------------------------


@pytest.mark.parametrize(
    ("error_type", "terminal_outcome", "workflow_state"),
    [(ErrorA, "failed", "paused"), (ErrorB, "canceled", "canceled")],
)
def test_list_cap_is_the_minimum_with_the_matched_terminal_action(
    user, error_type, terminal_outcome, workflow_state
):
    """[A max 10, B max 3 cancel]: both get 3 reattempts, then A pauses and B cancels (R-POL-32, R-POL-33)."""
    Script.plan = [error_type(str(n)) for n in range(4)]
    workflow = GemList.create(hero=user)
    for _ in range(4):
        fail_next_step(workflow, error_type)
    assert [h[2] for h in execution_history(workflow.id)] == [
        "reattempted",
        "reattempted",
        "reattempted",
        terminal_outcome,
    ]
    assert workflow_row(workflow.id)["state"] == workflow_state


def test_list_blanket_entry_catches_unmatched_errors(user):
    """A blanket list entry captures what the specific entries miss, before class level (R-POL-30, R-POL-31)."""
    Script.plan = [ErrorB("unmatched")]
    workflow = GemListBlanket.create(hero=user)
    fail_next_step(workflow, ErrorB)
    assert execution_history(workflow.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]


def test_list_unmatched_errors_fall_through_to_class_level(user):
    """An error no list entry captures uses the class-level policy (R-POL-31)."""
    Script.plan = [KeyError("neither A nor B")]
    workflow = GemList.create(hero=user)
    fail_next_step(workflow, KeyError)
    assert execution_history(workflow.id) == [("work", "failed", "failed")]
    decision = execution_rows(workflow.id)[0]["metadata"]["policy_decision"]
    assert (decision["source"], decision["index"]) == ("class_blanket", 0)


# -- the safety cap (R-POL-04) ---------------------------------------------------------


def test_class_level_reattempt_policy_is_capped_at_100(user):
    """A class-level reattempt policy without max_reattempts stops after 100 reattempts (R-POL-04, BTR-11)."""
    workflow = GemSafetyCap.create(hero=user)
    for _ in range(101):
        fail_next_step(workflow, ErrorA)
    rows = execution_rows(workflow.id)
    assert len(rows) == 101
    assert [r["outcome"] for r in rows].count("reattempted") == 100
    assert (rows[-1]["state"], rows[-1]["outcome"]) == ("failed", "failed")
    decision = rows[-1]["metadata"]["policy_decision"]
    assert (decision["terminal"], decision["max_reattempts"]) == (True, 100)
    assert workflow_row(workflow.id)["state"] == "paused"


# -- precondition_exception_test.rb (skip_if) ------------------------------------------


@CONDITION_ERROR_OUTCOMES
def test_skip_if_exception_applies_each_action(user, action, history, workflow_state):
    """A raising skip_if is handled by the step's policy; the body never runs; the error is re-raised (R-EXE-23/24)."""
    GemSkipIfRaises.action = action
    workflow = GemSkipIfRaises.create(hero=user)
    fail_next_step(workflow, ErrorA)
    assert execution_history(workflow.id) == history
    first = execution_rows(workflow.id)[0]
    if action == "reattempt":
        assert first["metadata"]["reattempt_reason"] == "precondition"
    else:
        assert first["error_message"] == "skip_if broke"
    assert workflow_row(workflow.id)["state"] == workflow_state
    assert hero_counter(user.id) == 0


# -- hooks and external changes (R-EXE-37, R-EXE-43) -----------------------------------


def test_around_hook_exit_error_is_a_body_error(user, reports):
    """An exception leaving the around hook's exit is handled by the step policy like a body error (R-EXE-37)."""
    workflow = GemHooks.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.commit()
    with pytest.raises(ErrorB, match="around exit"):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"], row["error_message"]) == (
        "skipped",
        "skipped",
        "around exit",
    )
    assert hero_counter(user.id) == 0
    assert [(str(error), handled) for error, handled, _ in reports] == [
        ("around exit", True)
    ]


def test_dropped_error_is_reported_despite_report_never(user, reports):
    """An error dropped because the workflow changed mid-step is recorded failed/failed, reported (handled, marked dropped) and not re-raised (R-EXE-42 amended, R-EXE-43)."""
    workflow = GemDropped.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.commit()
    Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"], row["error_message"]) == (
        "failed",
        "failed",
        "nobody re-raises me",
    )
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert "policy_decision" not in (execution_row(execution_id)["metadata"] or {})
    assert len(reports) == 1
    error, handled, context = reports[0]
    assert (str(error), handled, context["dropped"]) == (
        "nobody re-raises me",
        True,
        True,
    )
    assert context["geneva_drive"]["step_execution_id"] == execution_id
