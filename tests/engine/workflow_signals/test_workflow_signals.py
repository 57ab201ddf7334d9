"""Workflow signals: steps that wait for external events (SPEC §23, issue 18).

A workflow signal is an event sent to one workflow (``workflow.signal(...)``);
not the blinker instrumentation signals of ``flask_geneva.signals``.
"""

from __future__ import annotations

from datetime import date
from datetime import timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

from flask_geneva import ExceptionPolicy
from flask_geneva import InvalidStateError
from flask_geneva import SignalBufferFullError
from flask_geneva import SignalMatcher
from flask_geneva import SignalPayloadTooLargeError
from flask_geneva import SignalWaitTimeout
from flask_geneva import WorkflowNotFoundError
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import WaitingForSignal
from flask_geneva.testing import assert_waiting_for_signal
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_current_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import hero_counter
from tests.support.workflow import make_user
from tests.support.workflow import signal_rows
from tests.support.workflow import workflow_row

#: What the bodies saw as self.received_signal: (step, name, payload).
SEEN: list[tuple[str, str, object]] = []


def _see(workflow, step_name):
    received = workflow.received_signal
    SEEN.append((step_name, received.name, received.payload))


class SigPayment(geneva.Workflow):
    @step
    def order(self):
        self.hero.counter += 1

    @step(wait_for="payment_confirmed")
    def ship(self):
        _see(self, "ship")
        self.hero.counter += 10


class SigMatched(geneva.Workflow):
    @step(
        wait_for=SignalMatcher(
            "approval", where=lambda self, payload: payload["amount"] >= 100
        )
    )
    def approve(self):
        _see(self, "approve")


class _AnyNamed:
    def __init__(self, *names):
        self.names = names

    def matches(self, signal):
        return signal.name in self.names

    def __repr__(self):
        return f"_AnyNamed{self.names!r}"


class SigCustom(geneva.Workflow):
    @step(wait_for=_AnyNamed("a", "b"))
    def either(self):
        _see(self, "either")


class SigFlaky(geneva.Workflow):
    """Reattempts once: the second execution must re-read the same signal."""

    @step(wait_for="go", on_exception="reattempt")
    def use(self):
        _see(self, "use")
        if len(SEEN) < 2:
            raise RuntimeError("first try fails")


class SigPausing(geneva.Workflow):
    @step(wait_for="go")
    def use(self):
        _see(self, "use")
        if len(SEEN) < 2:
            raise RuntimeError("pauses the first time")


def _explode(self, payload):
    raise KeyError("no such field")


class SigBrokenMatcher(geneva.Workflow):
    @step(wait_for=SignalMatcher("go", where=_explode))
    def use(self):
        _see(self, "use")


class SigTimeout(geneva.Workflow):
    @step(wait_for="go", wait_timeout=timedelta(hours=1))
    def use(self):
        pass


class SigTimeoutSkip(geneva.Workflow):
    @step(wait_for="go", wait_timeout=timedelta(hours=1), on_wait_timeout="skip")
    def use(self):
        pass

    @step
    def after(self):
        self.hero.counter += 100


class SigTimeoutCancel(geneva.Workflow):
    @step(wait_for="go", wait_timeout=60, on_wait_timeout="cancel")
    def use(self):
        pass


class SigTimeoutReattempt(geneva.Workflow):
    @step(
        wait_for="go",
        wait_timeout=60,
        on_exception=ExceptionPolicy("reattempt", matching=SignalWaitTimeout),
    )
    def use(self):
        pass


class SigWaitThenSignal(geneva.Workflow):
    @step(wait=timedelta(hours=2), wait_for="go")
    def use(self):
        _see(self, "use")


class SigSkipIf(geneva.Workflow):
    @step(wait_for="go", skip_if=lambda self: self.hero.counter > 0)
    def use(self):
        _see(self, "use")

    @step
    def after(self):
        self.hero.counter += 100


@pytest.fixture(autouse=True)
def _clear_seen():
    SEEN.clear()


def _states(workflow_id):
    return [(row["step_name"], row["state"]) for row in execution_rows(workflow_id)]


# -- step first: park, then the signal wakes it ------------------------------------------


def test_a_step_arriving_first_parks_holding_no_message(user, geneva_jobs):
    """The gate finds no signal: the execution parks in waiting, nothing is published (R-WSIG-10, R-WSIG-16)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    assert _states(workflow.id) == [("order", "completed"), ("ship", "waiting")]
    parked = execution_rows(workflow.id)[-1]
    assert parked["waiting_since"] is not None
    assert parked["wait_deadline"] is None
    assert workflow_row(workflow.id)["state"] == "ready"
    assert geneva_jobs.enqueued == []
    assert_waiting_for_signal(workflow, "payment_confirmed")
    assert workflow.current_execution.state == "waiting"


def test_the_signal_wakes_the_parked_step_in_the_senders_transaction(user, geneva_jobs):
    """The sender claims the signal and wakes the step; published after its commit (R-WSIG-11, R-WSIG-17, R-WSIG-20)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    delivery = workflow.signal("payment_confirmed", {"amount": Decimal("9.90")})
    parked = execution_rows(workflow.id)[-1]
    assert delivery.duplicate is False
    assert delivery.woken == (parked["id"],)
    assert parked["state"] == "scheduled"
    assert parked["signal_id"] == delivery.signal.id
    assert signal_rows(workflow.id)[0]["state"] == "claimed"
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [parked["id"]]

    geneva_jobs.drain()
    assert [("ship", "payment_confirmed", {"amount": Decimal("9.90")})] == SEEN
    assert workflow_row(workflow.id)["state"] == "finished"
    assert hero_counter(user.id) == 11
    row = signal_rows(workflow.id)[0]
    assert (row["state"], row["step_name"]) == ("consumed", "ship")
    assert row["consumed_at"] is not None


def test_a_signal_arriving_first_is_buffered_and_claimed_at_the_gate(user, geneva_jobs):
    """A pending signal is claimed by the step when it reaches its gate (R-WSIG-13, R-WSIG-21)."""
    workflow = SigPayment.create(hero=user)
    delivery = workflow.signal("payment_confirmed", {"on": date(2030, 1, 2)})
    assert delivery.woken == ()
    assert signal_rows(workflow.id)[0]["state"] == "pending"
    geneva_jobs.drain()
    assert [("ship", "payment_confirmed", {"on": date(2030, 1, 2)})] == SEEN
    assert workflow_row(workflow.id)["state"] == "finished"
    assert signal_rows(workflow.id)[0]["state"] == "consumed"


def test_the_oldest_matching_signal_is_claimed_first(user, geneva_jobs):
    """Two buffered matches: the oldest is claimed; the others stay pending until
    the workflow finishes, which expires them (R-WSIG-13, R-WSIG-34)."""
    workflow = SigPayment.create(hero=user)
    workflow.signal("payment_confirmed", 1)
    workflow.signal("payment_confirmed", 2)
    workflow.signal("something_else", 3, warn_unawaited=False)
    geneva_jobs.drain()
    assert SEEN == [("ship", "payment_confirmed", 1)]
    assert [(r["payload"], r["state"]) for r in signal_rows(workflow.id)] == [
        (1, "consumed"),
        (2, "expired"),
        (3, "expired"),
    ]


def test_a_signal_matcher_with_where_filters_on_the_payload(user, geneva_jobs):
    """SignalMatcher(name, where=...) sees the workflow and the payload (R-WSIG-05)."""
    workflow = SigMatched.create(hero=user)
    geneva_jobs.drain()
    small = workflow.signal("approval", {"amount": 5})
    assert small.woken == ()
    assert_waiting_for_signal(workflow, "approval")
    big = workflow.signal("approval", {"amount": 500})
    assert len(big.woken) == 1
    geneva_jobs.drain()
    assert SEEN == [("approve", "approval", {"amount": 500})]


def test_a_custom_matcher_object_matches_any_name_it_likes(user, geneva_jobs):
    """Any object with matches(signal) -> bool is a matcher (R-WSIG-05)."""
    workflow = SigCustom.create(hero=user)
    workflow.signal("z")
    workflow.signal("b", "bee")
    geneva_jobs.drain()
    assert SEEN == [("either", "b", "bee")]


def test_wait_and_wait_for_compose(user, geneva_jobs):
    """The wait passes first, then the step waits for the signal (R-WSIG-06)."""
    workflow = SigWaitThenSignal.create(hero=user)
    execution = workflow.current_execution
    assert execution.scheduled_for > clock.now() + timedelta(hours=1)
    workflow.signal("go")
    assert execution_rows(workflow.id)[0]["state"] == "scheduled"
    speedrun_workflow(workflow)
    assert SEEN == [("use", "go", None)]


def test_skip_if_is_evaluated_again_when_the_signal_wakes_the_step(user, geneva_jobs):
    """skip_if holds when woken: skipped, and the claimed signal consumed (R-WSIG-06, R-WSIG-15)."""
    workflow = SigSkipIf.create(hero=user)
    geneva_jobs.drain()
    assert_waiting_for_signal(workflow, "go")
    user.counter = 1
    db.session.commit()
    workflow.signal("go")
    geneva_jobs.drain()
    assert SEEN == []
    assert _states(workflow.id) == [("use", "skipped"), ("after", "completed")]
    assert signal_rows(workflow.id)[0]["state"] == "consumed"


# -- reattempts and pauses re-read the same signal --------------------------------------


def test_a_reattempt_re_reads_the_same_claimed_signal(user, geneva_jobs):
    """The reattempt's execution runs with the signal the step claimed, not the
    newer one, which expires with the workflow (R-WSIG-14, R-WSIG-15, R-WSIG-34)."""
    workflow = SigFlaky.create(hero=user)
    workflow.signal("go", "first")
    workflow.signal("go", "second")
    geneva_jobs.drain()
    assert SEEN == [("use", "go", "first"), ("use", "go", "first")]
    assert [(r["payload"], r["state"]) for r in signal_rows(workflow.id)] == [
        ("first", "consumed"),
        ("second", "expired"),
    ]
    assert workflow_row(workflow.id)["state"] == "finished"


def test_resume_after_a_failure_re_reads_the_claimed_signal(user, geneva_jobs):
    """A failing step pauses; resume() runs it again with its signal (R-WSIG-14)."""
    workflow = SigPausing.create(hero=user)
    workflow.signal("go", "only")
    with pytest.raises(RuntimeError):
        speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "paused"
    assert signal_rows(workflow.id)[0]["state"] == "claimed"
    workflow.resume()
    speedrun_workflow(workflow)
    assert SEEN == [("use", "go", "only"), ("use", "go", "only")]
    assert signal_rows(workflow.id)[0]["state"] == "consumed"


def test_signals_sent_while_paused_are_delivered_on_resume(user, geneva_jobs):
    """Paused: stored pending, not woken; resume() wakes the step, which claims it (R-WSIG-32)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    workflow.pause()
    delivery = workflow.signal("payment_confirmed", "late")
    assert delivery.woken == ()
    assert _states(workflow.id)[-1] == ("ship", "waiting")
    geneva_jobs.clear()
    resumed = workflow.resume()
    assert resumed.id == execution_rows(workflow.id)[-1]["id"]
    geneva_jobs.drain()
    assert SEEN == [("ship", "payment_confirmed", "late")]
    assert workflow_row(workflow.id)["state"] == "finished"


def test_resume_without_a_signal_parks_the_step_again(user, geneva_jobs):
    """resume() wakes the parked step; with nothing to claim it parks again (R-WSIG-32)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    since = execution_rows(workflow.id)[-1]["waiting_since"]
    workflow.pause()
    workflow.resume()
    geneva_jobs.drain()
    assert _states(workflow.id) == [("order", "completed"), ("ship", "waiting")]
    assert execution_rows(workflow.id)[-1]["waiting_since"] == since


# -- operators ----------------------------------------------------------------------------


def test_cancel_of_a_parked_step(user, geneva_jobs):
    """cancel() cancels the parked execution and the workflow (R-WSIG-12)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    workflow.cancel()
    assert _states(workflow.id)[-1] == ("ship", "canceled")
    assert workflow_row(workflow.id)["state"] == "canceled"
    with pytest.raises(InvalidStateError, match="Cannot signal a canceled workflow"):
        workflow.signal("payment_confirmed")
    assert signal_rows(workflow.id) == []


def test_skip_of_a_parked_step_runs_the_next_one(user, geneva_jobs):
    """skip() skips the parked execution (R-WSIG-12)."""
    workflow = SigSkipIf.create(hero=user)
    geneva_jobs.drain()
    workflow.skip()
    geneva_jobs.drain()
    assert _states(workflow.id) == [("use", "skipped"), ("after", "completed")]
    assert hero_counter(user.id) == 100


def test_skip_consumes_the_signal_of_a_paused_step(user, geneva_jobs):
    """A step paused after claiming its signal is skipped: the signal is consumed (R-WSIG-12)."""
    workflow = SigPausing.create(hero=user)
    workflow.signal("go")
    with pytest.raises(RuntimeError):
        speedrun_workflow(workflow)
    workflow.skip()
    assert signal_rows(workflow.id)[0]["state"] == "consumed"
    assert workflow_row(workflow.id)["state"] == "finished"


def test_a_new_execution_cancels_a_parked_one(user, geneva_jobs):
    """Scheduling a step cancels a waiting execution first: never two current ones (R-WSIG-16, R-SCH-03)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    workflow.reschedule_current_step()
    states = _states(workflow.id)
    assert states == [
        ("order", "completed"),
        ("ship", "canceled"),
        ("ship", "scheduled"),
    ]


# -- sending: idempotency, limits, errors -----------------------------------------------


def test_an_idempotency_key_makes_a_second_delivery_a_duplicate(user, geneva_jobs):
    """Same key: the stored row, duplicate=True, nothing woken (R-WSIG-22)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    first = workflow.signal("payment_confirmed", 1, idempotency_key="evt_1")
    geneva_jobs.clear()
    again = workflow.signal("payment_confirmed", 2, idempotency_key="evt_1")
    assert first.woken
    assert not first.duplicate
    assert again.duplicate
    assert again.woken == ()
    assert again.signal.id == first.signal.id
    assert len(signal_rows(workflow.id)) == 1
    assert geneva_jobs.enqueued == []


def test_the_payload_size_is_capped(app, user):
    """A payload above GENEVA_MAX_SIGNAL_PAYLOAD_SIZE is refused before writing (R-WSIG-21)."""
    app.config["GENEVA_MAX_SIGNAL_PAYLOAD_SIZE"] = 50
    workflow = SigPayment.create(hero=user)
    with pytest.raises(
        SignalPayloadTooLargeError, match="GENEVA_MAX_SIGNAL_PAYLOAD_SIZE"
    ):
        workflow.signal("payment_confirmed", {"text": "x" * 100})
    assert signal_rows(workflow.id) == []


def test_the_pending_buffer_is_capped(app, user):
    """One pending signal more than the cap raises SignalBufferFullError (R-WSIG-23)."""
    app.config["GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW"] = 2
    workflow = SigPayment.create(hero=user)
    workflow.signal("a", warn_unawaited=False)
    workflow.signal("b", warn_unawaited=False)
    with pytest.raises(SignalBufferFullError, match="2 pending"):
        workflow.signal("c", warn_unawaited=False)
    assert len(signal_rows(workflow.id)) == 2


def test_invalid_names_and_keys_are_refused(user):
    """Names and keys are non-empty str of at most 255 characters (R-WSIG-20)."""
    workflow = SigPayment.create(hero=user)
    with pytest.raises(ValueError, match="signal name"):
        workflow.signal("")
    with pytest.raises(ValueError, match="idempotency_key"):
        workflow.signal("a", idempotency_key="k" * 256)


def test_a_raising_matcher_never_fails_the_sender(user, geneva_jobs):
    """The signal is stored with the error; the step's policy handles it (R-WSIG-33)."""
    workflow = SigBrokenMatcher.create(hero=user)
    geneva_jobs.drain()
    delivery = workflow.signal("go", {"x": 1})
    assert len(delivery.woken) == 1
    row = signal_rows(workflow.id)[0]
    assert row["state"] == "pending"
    assert row["matcher_error"].startswith("KeyError")
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "paused"
    failed = execution_rows(workflow.id)[-1]
    assert failed["state"] == "failed"
    assert "no such field" in failed["error_message"]
    assert SEEN == []


def test_signal_hero_signals_the_ongoing_workflow(user, geneva_jobs):
    """signal_hero finds the hero's ongoing workflow; without one it raises (R-WSIG-25)."""
    other = make_user("nobody@example.com")
    with pytest.raises(WorkflowNotFoundError, match="start=True"):
        SigPayment.signal_hero(other, "payment_confirmed")
    workflow = SigPayment.create(hero=user)
    delivery = SigPayment.signal_hero(user, "payment_confirmed", 5)
    assert delivery.signal.workflow_id == workflow.id


def test_signal_hero_with_start_creates_the_workflow(user, geneva_jobs):
    """start=True creates the workflow when none is ongoing, then signals it (R-WSIG-25)."""
    delivery = SigPayment.signal_hero(user, "payment_confirmed", 7, start=True)
    again = SigPayment.signal_hero(user, "payment_confirmed", 8, start=True)
    assert delivery.signal.workflow_id == again.signal.workflow_id
    geneva_jobs.drain()
    assert SEEN == [("ship", "payment_confirmed", 7)]


# -- timeouts -----------------------------------------------------------------------------


def _past_deadline(workflow_id):
    table = geneva.StepExecution.__table__
    with external_writer() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.workflow_id == workflow_id)
            .where(table.c.state == "waiting")
            .values(wait_deadline=clock.now() - timedelta(seconds=1))
        )


def _timed_out(workflow_cls, user, geneva_jobs):
    """A new ``workflow_cls`` workflow, parked, past its wait deadline and woken by
    the dispatcher; its jobs have run."""
    workflow = workflow_cls.create(hero=user)
    geneva_jobs.drain()
    _past_deadline(workflow.id)
    geneva.dispatch_due()
    geneva_jobs.drain()
    return workflow


def test_a_timeout_raises_signal_wait_timeout_into_the_policies(user, geneva_jobs):
    """The dispatcher wakes it; the gate raises SignalWaitTimeout; default policy pauses (R-WSIG-40)."""
    workflow = SigTimeout.create(hero=user)
    geneva_jobs.drain()
    parked = execution_rows(workflow.id)[-1]
    assert parked["wait_deadline"] == parked["waiting_since"] + timedelta(hours=1)
    assert geneva.dispatch_due() == 0
    _past_deadline(workflow.id)
    assert geneva.dispatch_due() == 1
    geneva_jobs.drain()
    assert [type(error) for _, error in geneva_jobs.failures] == [SignalWaitTimeout]
    assert workflow_row(workflow.id)["state"] == "paused"
    failed = execution_rows(workflow.id)[-1]
    assert failed["state"] == "failed"
    assert "waited 1:00:00 for workflow signal go" in failed["error_message"]


def test_on_wait_timeout_skip(user, geneva_jobs):
    """on_wait_timeout='skip': skipped, next step runs (R-WSIG-41)."""
    workflow = _timed_out(SigTimeoutSkip, user, geneva_jobs)
    assert _states(workflow.id) == [("use", "skipped"), ("after", "completed")]
    assert "waited" in execution_rows(workflow.id)[0]["error_message"]


def test_on_wait_timeout_cancel(user, geneva_jobs):
    """on_wait_timeout='cancel': execution and workflow canceled (R-WSIG-41)."""
    workflow = _timed_out(SigTimeoutCancel, user, geneva_jobs)
    assert _states(workflow.id) == [("use", "canceled")]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_a_timeout_reattempt_parks_again_with_a_new_deadline(user, geneva_jobs):
    """A policy reattempting SignalWaitTimeout parks a new execution (R-WSIG-40)."""
    workflow = _timed_out(SigTimeoutReattempt, user, geneva_jobs)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("failed", "failed"),
        ("waiting", None),
    ]
    assert rows[-1]["wait_deadline"] > clock.now()


def test_a_signal_at_the_deadline_still_wins(user, geneva_jobs):
    """Past its deadline with a matching signal pending, the gate runs the step (R-WSIG-40, R-WSIG-13)."""
    workflow = SigTimeout.create(hero=user)
    geneva_jobs.drain()
    workflow.pause()
    workflow.signal("go")
    _past_deadline(workflow.id)
    workflow.resume()
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"
    assert signal_rows(workflow.id)[0]["state"] == "consumed"


# -- lost publications ----------------------------------------------------------------------


def test_the_dispatcher_republishes_a_lost_wake(user, geneva_jobs):
    """A woken execution still scheduled after GENEVA_PUBLISH_TIMEOUT is published again (R-WSIG-31)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    # Frozen: on a loaded machine the wake must not age past the timeout
    # between the signal and the first dispatch.
    with clock.frozen():
        workflow.signal("payment_confirmed")
        woken_id = execution_rows(workflow.id)[-1]["id"]
        geneva_jobs.clear()  # the publication is lost
        assert geneva.dispatch_due() == 0  # too recent
    table = geneva.StepExecution.__table__
    with external_writer() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.id == woken_id)
            .values(scheduled_for=clock.now() - timedelta(seconds=30))
        )
    assert geneva.dispatch_due() == 1
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [woken_id]
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"


def test_a_lost_wake_older_than_the_stuck_threshold_is_left_to_housekeeping(
    user, geneva_jobs
):
    """The dispatcher reads only wakes due at most GENEVA_STUCK_SCHEDULED_THRESHOLD
    (15 minutes) ago, so that its run costs what came due lately; an older one
    is housekeeping's stuck-scheduled recovery's (R-WSIG-31, R-HK-20)."""
    workflow = SigPayment.create(hero=user)
    geneva_jobs.drain()
    with clock.frozen():
        workflow.signal("payment_confirmed")
        woken_id = execution_rows(workflow.id)[-1]["id"]
        geneva_jobs.clear()  # the publication is lost
    table = geneva.StepExecution.__table__
    with external_writer() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.id == woken_id)
            .values(scheduled_for=clock.now() - timedelta(minutes=16))
        )
    assert geneva.dispatch_due() == 0
    assert geneva_jobs.enqueued == []
    assert geneva.run_housekeeping()["stuck_scheduled_recovered"] == 1
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"


# -- test helpers ----------------------------------------------------------------------------


def test_speedrun_stops_naming_the_awaited_signal(user):
    """speedrun_workflow raises WaitingForSignal naming the signal and the step (R-WSIG-50)."""
    workflow = SigPayment.create(hero=user)
    with pytest.raises(WaitingForSignal, match=r"'payment_confirmed'.*'ship'") as info:
        speedrun_workflow(workflow)
    assert info.value.awaited == "payment_confirmed"
    workflow.signal("payment_confirmed", "now")
    speedrun_workflow(workflow)
    assert SEEN == [("ship", "payment_confirmed", "now")]


def test_assert_waiting_for_signal_says_what_it_found(user):
    """The helper fails with what the current step is doing (R-WSIG-50)."""
    workflow = SigPayment.create(hero=user)
    with pytest.raises(AssertionError, match="step 'order' is scheduled"):
        assert_waiting_for_signal(workflow, "payment_confirmed")
    perform_next_step(workflow)
    perform_next_step(workflow)
    assert_waiting_for_signal(workflow, "payment_confirmed")
    with pytest.raises(AssertionError, match="waits for payment_confirmed"):
        assert_waiting_for_signal(workflow, "other")


def test_speedrun_current_step_stops_naming_a_custom_matcher(user):
    """speedrun_current_step raises WaitingForSignal too; a custom matcher is named
    by its repr, which assert_waiting_for_signal accepts (R-WSIG-50)."""
    workflow = SigCustom.create(hero=user)
    with pytest.raises(
        WaitingForSignal, match=r"_AnyNamed\('a', 'b'\).*'either'"
    ) as info:
        speedrun_current_step(workflow)
    assert (info.value.step_name, info.value.awaited) == (
        "either",
        "_AnyNamed('a', 'b')",
    )
    assert info.value.workflow_id == workflow.id
    assert_waiting_for_signal(workflow, "_AnyNamed('a', 'b')")
    with pytest.raises(AssertionError, match="waits for _AnyNamed"):
        assert_waiting_for_signal(workflow, "a")


def test_the_received_signal_is_none_outside_a_wait_for_step(user):
    """received_signal is None outside a wait_for step's body (R-WSIG-17)."""
    workflow = SigPayment.create(hero=user)
    assert workflow.received_signal is None


def test_workflow_signals_are_not_instrumentation_signals():
    """The names stay apart: flask_geneva.signals is blinker's namespace (R-WSIG-01)."""
    from flask_geneva import signals

    assert not hasattr(signals, "WorkflowSignal")
    assert geneva.WorkflowSignal.__tablename__ == "geneva_drive_signals"
