"""Instrumentation signals: payloads, outcomes, order and isolation (SPEC §12.1)."""

from __future__ import annotations

import logging
from datetime import UTC
from datetime import timedelta

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import Executor
from flask_geneva import cancel_if
from flask_geneva import resumable_step
from flask_geneva import signals
from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


class Boom(Exception):
    """A step failure."""


class SignalsAction(geneva.Workflow):
    """Its step calls the flow-control method named by ``action``."""

    action = "cancel"

    @step
    def act(self):
        getattr(self, SignalsAction.action)()

    @step
    def tail(self):
        pass


class SignalsFailing(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("pause"))
    def work(self):
        raise Boom("step failed")


class SignalsConditions(geneva.Workflow):
    mode = "pass"

    @cancel_if
    def check(self):
        if SignalsConditions.mode == "raise":
            raise Boom("condition failed")
        return SignalsConditions.mode == "cancel"

    @step(skip_if=lambda wf: SignalsConditions.mode == "skip")
    def work(self):
        pass

    @step
    def tail(self):
        pass


class SignalsResumable(geneva.Workflow):
    mode = "skip_to"

    @resumable_step
    def walk(self, it):
        if SignalsResumable.mode == "skip_to":
            it.skip_to(5, wait=timedelta(seconds=30))
        elif SignalsResumable.mode == "suspend":
            self.suspend(wait=timedelta(seconds=5))
        for _ in it.iterate_over(range(2)):
            pass

    @step
    def tail(self):
        pass


class SignalsExternalPause(geneva.Workflow):
    @step
    def work(self):
        update_workflow(self.id, state="paused")
        raise Boom("dropped")


class Events:
    """Receiver recording (signal name, sender, payload)."""

    def __init__(self):
        self.items = []

    def receiver(self, name):
        def receive(sender, payload):
            self.items.append((name, sender, payload))

        return receive

    def names(self):
        return [name for name, _, _ in self.items]

    def payload(self, name):
        return next(payload for n, _, payload in self.items if n == name)


@pytest.fixture
def events(app):
    recorder = Events()
    receivers = {
        signal: recorder.receiver(name)
        for name, signal in (
            ("precondition", signals.precondition),
            ("step", signals.step),
            ("finalize", signals.finalize),
        )
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    yield recorder
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


def _execute(workflow, *, run_early=False):
    execution_id = workflow.current_execution.id
    db.session.commit()
    Executor.execute(execution_id, run_early=run_early)
    return execution_id


def test_signal_names_and_sender(app, user, events):
    """Signals are named <event>.geneva_drive and sent by the workflow class (SPEC §12.1)."""
    assert (signals.precondition.name, signals.step.name, signals.finalize.name) == (
        "precondition.geneva_drive",
        "step.geneva_drive",
        "finalize.geneva_drive",
    )
    SignalsAction.action = "finish"
    workflow = SignalsAction.create(hero=user)
    _execute(workflow)
    assert {sender for _, sender, _ in events.items} == {SignalsAction}


def test_common_payload_and_timing(user, events):
    """Every payload has ids, class, step name and aware UTC timing with duration >= 0 (R-SIG-01)."""
    SignalsAction.action = "finish"
    workflow = SignalsAction.create(hero=user)
    execution_id = _execute(workflow)
    assert events.names() == ["precondition", "step", "finalize"]
    for _, _, payload in events.items:
        assert payload["execution_id"] == execution_id
        assert payload["workflow_id"] == workflow.id
        assert payload["workflow_class"] == "SignalsAction"
        assert payload["step_name"] == "act"
        assert "resumable" not in payload
        assert payload["started_at"].tzinfo is not None
        assert payload["started_at"].utcoffset() == UTC.utcoffset(None)
        assert payload["started_at"] <= payload["finished_at"]
        assert payload["duration"] >= 0


@pytest.mark.parametrize(
    ("action", "outcome", "workflow_state", "step_state"),
    [
        ("cancel", "cancel", "canceled", "canceled"),
        ("pause", "pause", "paused", "canceled"),
        ("skip", "skip", "ready", "skipped"),
        ("reattempt", "reattempt", "ready", "completed"),
        ("finish", "finished", "finished", "completed"),
    ],
)
def test_step_outcome_for_flow_control(
    user, events, action, outcome, workflow_state, step_state
):
    """The step outcome names the flow-control action; finalize has the stored states (R-SIG-03/04/05)."""
    SignalsAction.action = action
    workflow = SignalsAction.create(hero=user)
    execution_id = _execute(workflow)
    assert events.names() == ["precondition", "step", "finalize"]
    assert events.payload("precondition")["outcome"] == "passed"
    assert events.payload("step")["outcome"] == outcome
    assert "exception" not in events.payload("step")
    finalize = events.payload("finalize")
    assert (finalize["workflow_state"], finalize["step_state"]) == (
        workflow_state,
        step_state,
    )
    assert finalize["step_state"] == execution_row(execution_id)["state"]
    assert finalize["workflow_state"] == workflow_row(workflow.id)["state"]
    assert "exception" not in finalize


def test_step_exception_payloads(user, events):
    """A body exception is in the step and finalize payloads with the paused states (R-SIG-03/04)."""
    workflow = SignalsFailing.create(hero=user)
    with pytest.raises(Boom) as caught:
        _execute(workflow)
    assert events.names() == ["precondition", "step", "finalize"]
    assert events.payload("step")["outcome"] == "exception"
    assert events.payload("step")["exception"] is caught.value
    finalize = events.payload("finalize")
    assert finalize["exception"] is caught.value
    assert (finalize["workflow_state"], finalize["step_state"]) == ("paused", "failed")


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [("cancel", "canceled"), ("skip", "skipped"), ("raise", "exception")],
)
def test_only_precondition_when_conditions_end_execution(user, events, mode, outcome):
    """Conditions that end the execution emit only the precondition signal (R-SIG-02, R-SIG-05)."""
    SignalsConditions.mode = mode
    workflow = SignalsConditions.create(hero=user)
    if mode == "raise":
        with pytest.raises(Boom) as caught:
            _execute(workflow)
    else:
        _execute(workflow)
    assert events.names() == ["precondition"]
    payload = events.payload("precondition")
    assert payload["outcome"] == outcome
    if mode == "raise":
        assert payload["exception"] is caught.value
    else:
        assert "exception" not in payload


def test_no_signals_for_early_exits(user, events):
    """Duplicate jobs, non-runnable workflows and undefined steps emit no signal (R-SIG-02)."""
    SignalsAction.action = "finish"
    workflow = SignalsAction.create(hero=user)
    execution_id = _execute(workflow)
    events.items.clear()
    Executor.execute(execution_id)  # duplicate delivery (R-EXE-11)
    paused = SignalsAction.create(hero=user, allow_multiple=True)
    update_workflow(paused.id, state="paused")
    _execute(paused)  # R-EXE-12
    assert events.items == []


def test_resumable_interrupt_payloads(user, events):
    """Resumable payloads carry resumable=True; an interruption reports its wait (R-SIG-01/03, R-RES-02)."""
    SignalsResumable.mode = "skip_to"
    workflow = SignalsResumable.create(hero=user)
    _execute(workflow)
    assert events.names() == ["precondition", "step", "finalize"]
    assert all(payload["resumable"] is True for _, _, payload in events.items)
    step_payload = events.payload("step")
    assert step_payload["outcome"] == "interrupted"
    assert step_payload["wait"] == timedelta(seconds=30)
    finalize = events.payload("finalize")
    assert (finalize["workflow_state"], finalize["step_state"]) == (
        "ready",
        "completed",
    )


def test_resumable_suspend_and_completion(user, events):
    """suspend() is reported as outcome suspend, a finished iteration as completed (R-SIG-03)."""
    SignalsResumable.mode = "suspend"
    workflow = SignalsResumable.create(hero=user)
    _execute(workflow)
    assert events.payload("step")["outcome"] == "suspend"
    assert "wait" not in events.payload("step")
    events.items.clear()
    SignalsResumable.mode = "run"
    db.session.refresh(workflow)
    # The successor is due 5 s after the suspend: run it now, as a test helper
    # would (R-EXE-18 leaves an early delivery for its time).
    _execute(workflow, run_early=True)
    assert [(n, p.get("outcome")) for n, _, p in events.items] == [
        ("precondition", "passed"),
        ("step", "completed"),
        ("finalize", None),
    ]


def test_finalize_without_exception_when_the_error_is_dropped(user, events):
    """When the workflow changed externally the error is not re-raised and finalize has no exception; the execution is recorded failed (R-SIG-04, R-EXE-42 amended, R-EXE-43)."""
    workflow = SignalsExternalPause.create(hero=user)
    _execute(workflow)
    assert events.payload("step")["outcome"] == "exception"
    finalize = events.payload("finalize")
    assert "exception" not in finalize
    assert (finalize["workflow_state"], finalize["step_state"]) == (
        "paused",
        "failed",
    )


@pytest.mark.parametrize("signal_name", ["precondition", "step", "finalize"])
def test_raising_receivers_are_logged_and_ignored(user, caplog, signal_name):
    """A receiver that raises is logged; the workflow state is as without it (R-SIG-06)."""

    def broken(sender, payload):
        raise RuntimeError(f"{signal_name} receiver bug")

    signal = getattr(signals, signal_name)
    signal.connect(broken)
    try:
        SignalsAction.action = "skip"
        workflow = SignalsAction.create(hero=user)
        with caplog.at_level(logging.WARNING, logger="flask_geneva"):
            execution_id = _execute(workflow)
    finally:
        signal.disconnect(broken)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("skipped", "skipped")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("ready", "tail")
    assert any(f"{signal_name} receiver bug" in message for message in caplog.messages)
