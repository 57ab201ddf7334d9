"""Error reporting, policy decision records and instrumentation signals (SPEC §9.6, §12, §19)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import ExceptionPolicy
from flask_geneva import current_error_context
from flask_geneva import on_exception
from flask_geneva import signals
from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva


class Flaky(Exception):
    """Raised by the test steps."""


class ReportingAlways(geneva.Workflow):
    @step
    def boom(self):
        raise Flaky("always reported")


class ReportingModes(geneva.Workflow):
    @step(
        on_exception=ExceptionPolicy(
            "reattempt",
            max_reattempts=1,
            terminal_action="cancel",
            report="terminal_only",
        )
    )
    def boom(self):
        raise Flaky("terminal only")


class ReportingNever(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("pause", report="never"))
    def boom(self):
        raise Flaky("never reported")


class ReportingClassSpecific(geneva.Workflow):
    exception_policies = [on_exception(KeyError, action="skip")]

    @on_exception(Flaky)
    def handle_flaky(self, error):
        self.reattempt(wait=30)

    @step
    def boom(self):
        raise Flaky("handled by the imperative handler")

    @step
    def after(self):
        pass


class SignalsTwoSteps(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(skip_if=True)
    def second(self):
        pass


class Recorder:
    def __init__(self, app):
        self.app = app
        self.calls = []

    def __call__(self, error, *, handled, context, source):
        # Look at the stored rows from a separate connection: the report must come
        # after the state commit (R-REP-02).
        with db.engine.connect() as connection:
            state = connection.scalar(
                sa.select(geneva.Workflow.state).where(
                    geneva.Workflow.id == context["geneva_drive"]["workflow_id"]
                )
            )
        self.calls.append(
            {
                "error": error,
                "handled": handled,
                "context": context,
                "source": source,
                "state": state,
            }
        )


@pytest.fixture
def recorder(app):
    reporter = Recorder(app)
    app.config["GENEVA_ERROR_REPORTER"] = reporter
    geneva.reload_settings(app)
    return reporter


def _decision(execution):
    db.session.refresh(execution)
    return execution.read_metadata("policy_decision")


def test_default_policy_reports_after_commit_and_reraises(user, recorder, geneva_jobs):
    """The default pause policy reports once, after the commit, then re-raises (R-REP-01/02/04, R-REP-10)."""
    workflow = ReportingAlways.create(hero=user)
    execution = workflow.current_execution
    with pytest.raises(Flaky, match="always reported"):
        perform_next_step(workflow)
    assert len(recorder.calls) == 1
    call = recorder.calls[0]
    assert call["state"] == "paused"
    assert call["handled"] is True
    assert call["source"] == "flask_geneva"
    assert call["context"]["geneva_drive"] == {
        "workflow_id": workflow.id,
        "workflow_class": "ReportingAlways",
        "step_execution_id": execution.id,
        "step_name": "boom",
        "hero_type": "User",
        "hero_id": user.id,
    }
    decision = _decision(execution)
    assert decision["source"] == "default"
    assert decision["action"] == "pause"
    assert decision["reported"] is True
    assert decision["terminal"] is False


def test_terminal_only_reports_only_the_terminal_failure(user, recorder, geneva_jobs):
    """report='terminal_only' skips reattempts and reports the terminal action (R-REP-01, R-PDR-01)."""
    workflow = ReportingModes.create(hero=user)
    first = workflow.current_execution
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    assert recorder.calls == []
    assert _decision(first)["action"] == "reattempt"
    assert _decision(first)["reported"] is False
    second = workflow.current_execution
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    assert len(recorder.calls) == 1
    assert recorder.calls[0]["state"] == "canceled"
    decision = _decision(second)
    assert decision == {
        "source": "step",
        "index": None,
        "matched_by": None,
        "action": "cancel",
        "wait_seconds": None,
        "terminal": True,
        "consecutive_reattempts": 1,
        "max_reattempts": 1,
        "report": "terminal_only",
        "reported": True,
        "handler": None,
    }


def test_never_suppresses_the_reporter_but_still_reraises(user, recorder, geneva_jobs):
    """report='never' calls no reporter; the exception still escapes (R-REP-01/04)."""
    workflow = ReportingNever.create(hero=user)
    execution = workflow.current_execution
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    assert recorder.calls == []
    assert _decision(execution)["reported"] is False


def test_imperative_handler_decision_is_recorded(user, recorder, geneva_jobs):
    """An imperative class handler's reattempt is recorded with its name and wait (R-PDR-01, R-POL-11/13)."""
    workflow = ReportingClassSpecific.create(hero=user)
    execution = workflow.current_execution
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    decision = _decision(execution)
    assert decision["source"] == "class_specific"
    assert decision["action"] == "reattempt"
    assert decision["wait_seconds"] == 30.0
    assert decision["handler"] == "handle_flaky"
    assert execution.reattempt_reason == "exception_policy"
    assert execution.outcome == "reattempted"


def test_a_raising_reporter_is_recorded_and_does_not_break(app, user, geneva_jobs):
    """A reporter that raises is swallowed; the decision stores report_error (R-REP-03, R-PDR-02)."""

    def broken(error, **kwargs):
        raise RuntimeError("tracker down")

    app.config["GENEVA_ERROR_REPORTER"] = broken
    geneva.reload_settings(app)
    workflow = ReportingAlways.create(hero=user)
    execution = workflow.current_execution
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    decision = _decision(execution)
    assert decision["reported"] is True
    assert decision["report_error"] == "RuntimeError: tracker down"
    db.session.refresh(workflow)
    assert workflow.state == "paused"


def test_error_context_is_empty_outside_executor_calls(app):
    """current_error_context() is {} when no executor call is running (R-REP-10)."""
    assert current_error_context() == {}


def test_signals_fire_in_order_with_payloads(user, geneva_jobs):
    """precondition → step → finalize, with ids, outcome and durations (R-SIG-01..05)."""
    events = []

    def listen(name):
        def receiver(sender, payload):
            events.append((name, sender, payload))

        return receiver

    receivers = [listen("precondition"), listen("step"), listen("finalize")]
    signals.precondition.connect(receivers[0], sender=SignalsTwoSteps)
    signals.step.connect(receivers[1], sender=SignalsTwoSteps)
    signals.finalize.connect(receivers[2], sender=SignalsTwoSteps)
    try:
        workflow = SignalsTwoSteps.create(hero=user)
        first = workflow.current_execution
        perform_next_step(workflow)
        perform_next_step(workflow)  # second: skip_if=True
    finally:
        signals.precondition.disconnect(receivers[0], sender=SignalsTwoSteps)
        signals.step.disconnect(receivers[1], sender=SignalsTwoSteps)
        signals.finalize.disconnect(receivers[2], sender=SignalsTwoSteps)

    assert [
        (name, payload["step_name"], payload.get("outcome"))
        for name, _, payload in events
    ] == [
        ("precondition", "first", "passed"),
        ("step", "first", "completed"),
        ("finalize", "first", None),
        ("precondition", "second", "skipped"),
    ]
    assert all(sender is SignalsTwoSteps for _, sender, _ in events)
    precondition = events[0][2]
    assert precondition["execution_id"] == first.id
    assert precondition["workflow_id"] == workflow.id
    assert precondition["workflow_class"] == "SignalsTwoSteps"
    assert "resumable" not in precondition
    assert all(payload["duration"] >= 0 for _, _, payload in events)
    finalize = events[2][2]
    assert finalize["workflow_state"] == "ready"
    assert finalize["step_state"] == "completed"


def test_a_raising_signal_receiver_cannot_break_execution(user, geneva_jobs):
    """Receiver exceptions are logged and swallowed (R-SIG-06)."""

    def broken(sender, payload):
        raise RuntimeError("receiver bug")

    signals.step.connect(broken, sender=SignalsTwoSteps)
    try:
        workflow = SignalsTwoSteps.create(hero=user)
        perform_next_step(workflow)
    finally:
        signals.step.disconnect(broken, sender=SignalsTwoSteps)
    db.session.refresh(workflow)
    assert workflow.state == "ready"
    assert workflow.next_step_name == "second"
