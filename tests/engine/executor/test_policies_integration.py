"""Exception policies applied by the executor (R-EXE-23/24, R-EXE-45, R-POL-*,
R-REP-01).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import cancel_if
from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import CONDITION_ERROR_OUTCOMES
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import fail_next_step
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row

T0 = datetime(2030, 10, 1, 3, 0, tzinfo=UTC)


class Transient(Exception):
    """A retryable failure."""


class Fatal(Exception):
    """A non-retryable failure."""


class Plan:
    """Exceptions the next step runs raise, in order; empty → success."""

    errors: list[BaseException] = []

    @classmethod
    def run(cls, workflow):
        if cls.errors:
            raise cls.errors.pop(0)
        workflow.hero.counter += 1


@pytest.fixture
def reports(app):
    """Collect error reporter calls."""
    calls = []

    def reporter(error, *, handled, context, source):
        calls.append((error, handled, source))

    app.config["GENEVA_ERROR_REPORTER"] = reporter
    geneva.reload_settings(app)
    return calls


def _raise(error):
    raise error


class PoliciesReattempt(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=2)
    def work(self):
        Plan.run(self)

    @step
    def tail(self):
        pass


class PoliciesReattemptCancel(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=1, terminal_action="cancel")
    def work(self):
        Plan.run(self)


class PoliciesReattemptWait(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("reattempt", wait=timedelta(seconds=90)))
    def work(self):
        Plan.run(self)


class PoliciesClassLevel(geneva.Workflow):
    exception_policies = [
        on_exception("reattempt", max_reattempts=1),
        on_exception(Fatal, action="cancel"),
        on_exception(Transient, action="reattempt", wait=30, max_reattempts=5),
    ]

    @step
    def work(self):
        Plan.run(self)

    @step(on_exception="skip")
    def overridden(self):
        Plan.run(self)

    @step
    def tail(self):
        pass


class PoliciesHandlers(geneva.Workflow):
    @on_exception(Transient)
    def retry_later(self, error):
        self.reattempt(wait=timedelta(minutes=10))

    @on_exception(KeyError)
    def note_only(self, error):
        self.hero.email = "noted@example.com"

    @on_exception(LookupError)
    def broken_handler(self, error):
        raise RuntimeError("handler crashed")

    @on_exception(Fatal)
    def stop(self, error):
        self.cancel()

    @step
    def work(self):
        Plan.run(self)


class PoliciesStepList(geneva.Workflow):
    exception_policies = [on_exception("pause")]

    @step(
        on_exception=[
            ExceptionPolicy("reattempt", matching=Transient, max_reattempts=3),
            ExceptionPolicy(
                "reattempt", matching=Fatal, max_reattempts=2, terminal_action="cancel"
            ),
            ExceptionPolicy("skip", matching=ValueError),
        ]
    )
    def work(self):
        Plan.run(self)

    @step
    def tail(self):
        pass


class PoliciesStepCallable(geneva.Workflow):
    exception_policies = [on_exception("cancel")]

    @step(on_exception=lambda wf, error: wf.skip())
    def work(self):
        Plan.run(self)

    @step
    def tail(self):
        pass


class PoliciesNoPolicy(geneva.Workflow):
    @step
    def work(self):
        Plan.run(self)


class PoliciesReportNever(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("pause", report="never"))
    def work(self):
        Plan.run(self)


class PoliciesReportTerminal(geneva.Workflow):
    @step(
        on_exception=ExceptionPolicy(
            "reattempt", max_reattempts=1, report="terminal_only"
        )
    )
    def work(self):
        Plan.run(self)


class PoliciesCondition(geneva.Workflow):
    """Its cancel condition raises whatever Plan.errors holds first."""

    action = "pause"

    @cancel_if
    def exploding(self):
        if Plan.errors:
            raise Plan.errors.pop(0)
        return False

    @step(on_exception=lambda wf, error: getattr(wf, PoliciesCondition.action)())
    def work(self):
        self.hero.counter += 1

    @step
    def tail(self):
        self.hero.counter += 10


class PoliciesSkipIfError(geneva.Workflow):
    @step(skip_if=lambda wf: _raise(Fatal("skip_if broke")), on_exception="cancel")
    def work(self):
        self.hero.counter += 1


# -- step-level actions (R-EXE-45, R-EXE-50) -------------------------------------------


def test_reattempt_then_success(user):
    """A reattempt runs the step again; the second attempt succeeds (R-EXE-45)."""
    Plan.errors = [Transient("first attempt")]
    workflow = PoliciesReattempt.create(hero=user)
    fail_next_step(workflow, Transient)
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "scheduled", None),
    ]
    speedrun_workflow(workflow)
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "completed", "success"),
        ("tail", "completed", "success"),
    ]
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 1


def test_terminal_action_cancel(user):
    """terminal_action=cancel cancels when the limit is exceeded (R-POL-10,
    R-CNT-04).
    """
    Plan.errors = [Transient("one"), Transient("two")]
    workflow = PoliciesReattemptCancel.create(hero=user)
    fail_next_step(workflow, Transient)
    fail_next_step(workflow, Transient)
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "failed", "canceled"),
    ]
    assert execution_rows(workflow.id)[-1]["error_message"] == "two"
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_default_terminal_action_pauses(user):
    """The default terminal action is pause (R-DEF-11, R-POL-10)."""
    Plan.errors = [Transient("a"), Transient("b"), Transient("c")]
    workflow = PoliciesReattempt.create(hero=user)
    for _ in range(3):
        fail_next_step(workflow, Transient)
    assert [h[2] for h in execution_history(workflow.id)] == [
        "reattempted",
        "reattempted",
        "failed",
    ]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_policy_wait_delays_the_reattempt(user):
    """A reattempt policy's wait sets the new execution's scheduled_for (R-EXE-45)."""
    Plan.errors = [Transient("wait for it")]
    with clock.frozen(T0):
        workflow = PoliciesReattemptWait.create(hero=user)
        fail_next_step(workflow, Transient)
    assert execution_rows(workflow.id)[-1]["scheduled_for"] == T0 + timedelta(
        seconds=90
    )


# -- class-level policies and precedence (R-POL-40..43) --------------------------------


def test_class_specific_policies_route_by_exception_type(user):
    """Class-level specific policies apply per exception type (R-POL-40)."""
    Plan.errors = [Transient("retry me"), Fatal("stop")]
    with clock.frozen(T0):
        workflow = PoliciesClassLevel.create(hero=user)
        fail_next_step(workflow, Transient)
        rows = execution_rows(workflow.id)
        assert rows[0]["metadata"]["reattempt_reason"] == "exception_policy"
        assert rows[1]["scheduled_for"] == T0 + timedelta(seconds=30)
        fail_next_step(workflow, Fatal)
    assert execution_history(workflow.id) == [
        ("work", "completed", "reattempted"),
        ("work", "failed", "canceled"),
    ]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_class_blanket_policy_respects_its_max(user):
    """A blanket class policy catches other errors and honours max_reattempts
    (R-POL-40).
    """
    Plan.errors = [OSError("disk"), OSError("disk")]
    workflow = PoliciesClassLevel.create(hero=user)
    fail_next_step(workflow, OSError)
    fail_next_step(workflow, OSError)
    assert [h[2] for h in execution_history(workflow.id)] == ["reattempted", "failed"]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_step_level_action_overrides_class_level(user):
    """A step's own on_exception wins over class-level policies (R-POL-40)."""
    Plan.errors = []
    workflow = PoliciesClassLevel.create(hero=user)
    perform_next_step(workflow)  # work succeeds
    Plan.errors = [Fatal("skip instead of cancel")]
    fail_next_step(workflow, Fatal)
    assert execution_history(workflow.id)[-2:] == [
        ("overridden", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]
    assert execution_rows(workflow.id)[-2]["error_message"] == "skip instead of cancel"


def test_step_level_callable_overrides_class_level(user):
    """A step-level callable handler is used before class policies (R-POL-11,
    R-POL-40).
    """
    Plan.errors = [Fatal("handled by the step")]
    workflow = PoliciesStepCallable.create(hero=user)
    fail_next_step(workflow, Fatal)
    assert execution_history(workflow.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]
    assert workflow_row(workflow.id)["state"] == "ready"


def test_imperative_handler_reattempts_with_wait(user):
    """A handler calling reattempt(wait) reattempts with that wait, reason
    exception_policy (R-POL-11, R-POL-13).
    """
    Plan.errors = [Transient("later")]
    with clock.frozen(T0):
        workflow = PoliciesHandlers.create(hero=user)
        fail_next_step(workflow, Transient)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("scheduled", None),
    ]
    assert rows[0]["metadata"]["reattempt_reason"] == "exception_policy"
    assert rows[1]["scheduled_for"] == T0 + timedelta(minutes=10)


def test_imperative_handler_cancels(user):
    """A handler calling cancel() cancels the workflow (R-POL-11)."""
    Plan.errors = [Fatal("give up")]
    workflow = PoliciesHandlers.create(hero=user)
    fail_next_step(workflow, Fatal)
    assert execution_history(workflow.id) == [("work", "failed", "canceled")]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_imperative_handler_without_flow_control_pauses(user):
    """A handler returning without flow control pauses (R-POL-11)."""
    Plan.errors = [KeyError("missing")]
    workflow = PoliciesHandlers.create(hero=user)
    fail_next_step(workflow, KeyError)
    assert execution_history(workflow.id) == [("work", "failed", "failed")]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_imperative_handler_exception_pauses_and_reraises_the_step_error(user, reports):
    """A crashing handler pauses; its error is reported, the step's error re-raised
    (R-POL-12).
    """
    Plan.errors = [IndexError("step error")]
    workflow = PoliciesHandlers.create(hero=user)
    with pytest.raises(IndexError, match="step error"):
        perform_next_step(workflow)
    assert execution_history(workflow.id) == [("work", "failed", "failed")]
    assert execution_rows(workflow.id)[0]["error_message"] == "step error"
    assert workflow_row(workflow.id)["state"] == "paused"
    assert "handler crashed" in [str(e) for e, _, _ in reports]


# -- step-level lists (R-POL-30..33) ---------------------------------------------------


def test_step_list_routes_errors_and_caps_per_policy(user):
    """A list applies the first capturing policy; the cap is the list minimum (R-POL-30,
    R-POL-32/33).
    """
    Plan.errors = [Transient("t1"), Fatal("f1"), Fatal("f2")]
    workflow = PoliciesStepList.create(hero=user)
    fail_next_step(workflow, Transient)
    fail_next_step(workflow, Fatal)
    fail_next_step(workflow, Fatal)
    assert [h[2] for h in execution_history(workflow.id)] == [
        "reattempted",
        "reattempted",
        "canceled",
    ]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_step_list_blanket_entry_and_fall_through(user):
    """Matching entries apply; an unmatched error falls through to class level
    (R-POL-30/31).
    """
    Plan.errors = [ValueError("skip it"), OSError("nobody matches")]
    workflow = PoliciesStepList.create(hero=user)
    fail_next_step(workflow, ValueError)
    assert execution_history(workflow.id)[0] == ("work", "skipped", "skipped")
    other = PoliciesStepList.create(hero=user, allow_multiple=True)
    fail_next_step(other, OSError)
    assert execution_history(other.id) == [("work", "failed", "failed")]
    assert workflow_row(other.id)["state"] == "paused"


# -- reporting (R-REP-01) --------------------------------------------------------------


def test_report_never_suppresses_the_reporter(user, reports):
    """report="never" keeps the error from the reporter but still re-raises it
    (R-REP-01, R-REP-04).
    """
    Plan.errors = [Fatal("quiet")]
    workflow = PoliciesReportNever.create(hero=user)
    fail_next_step(workflow, Fatal)
    assert reports == []
    assert workflow_row(workflow.id)["state"] == "paused"


def test_report_terminal_only(user, reports):
    """report="terminal_only" reports only the terminal failure (R-REP-01)."""
    Plan.errors = [Transient("first"), Transient("second")]
    workflow = PoliciesReportTerminal.create(hero=user)
    fail_next_step(workflow, Transient)
    assert reports == []
    fail_next_step(workflow, Transient)
    assert [(str(e), handled, source) for e, handled, source in reports] == [
        ("second", True, "flask_geneva")
    ]


def test_default_policy_reports(user, reports):
    """The default pause policy reports the error (R-REP-01)."""
    Plan.errors = [Fatal("loud")]
    workflow = PoliciesNoPolicy.create(hero=user)
    fail_next_step(workflow, Fatal)
    assert [(str(e), handled) for e, handled, _ in reports] == [("loud", True)]
    assert workflow_row(workflow.id)["state"] == "paused"


# -- condition exceptions (R-EXE-23/24) ------------------------------------------------


@CONDITION_ERROR_OUTCOMES
def test_condition_exception_applies_the_policy(user, action, history, workflow_state):
    """A raising cancel condition is handled by the step's policy; the body never runs;
    the error is re-raised (R-EXE-23, R-EXE-24, R-SE-30).
    """
    PoliciesCondition.action = action
    Plan.errors = [Fatal("condition broke")]
    workflow = PoliciesCondition.create(hero=user)
    fail_next_step(workflow, Fatal)
    assert execution_history(workflow.id) == history
    first = execution_rows(workflow.id)[0]
    if action in ("pause", "cancel", "skip"):
        assert first["error_message"] == "condition broke"
    if action == "reattempt":
        assert first["metadata"]["reattempt_reason"] == "precondition"
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["current_step_name"]) == (workflow_state, None)
    assert hero_counter(user.id) == 0


def test_skip_if_exception_with_cancel_policy(user):
    """A raising skip_if with a cancel policy fails/cancels without running the body
    (R-EXE-23).
    """
    workflow = PoliciesSkipIfError.create(hero=user)
    fail_next_step(workflow, Fatal)
    assert execution_history(workflow.id) == [("work", "failed", "canceled")]
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert hero_counter(user.id) == 0
