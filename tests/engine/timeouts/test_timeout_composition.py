"""Step timeouts compose with waits: the timeout counts the body's run from its
start, never the time the execution waited (R-STO-06, R-DEF-04, R-WSIG-06,
R-WSIG-40/41).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import SignalWaitTimeout
from flask_geneva import StepTimeout
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import geneva
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

T0 = datetime(2030, 7, 1, 9, 0, tzinfo=UTC)
TIMEOUT = timedelta(minutes=1)
LONG = timedelta(hours=3)


class Runs:
    """How long the next body run takes, by the frozen clock."""

    frozen = None
    takes = timedelta(0)

    @classmethod
    def body(cls, workflow):
        cls.frozen.advance(cls.takes)


@pytest.fixture
def runs():
    with clock.frozen(T0) as frozen:
        Runs.frozen, Runs.takes = frozen, timedelta(0)
        yield Runs
    Runs.frozen = None


class TimeoutAfterWait(geneva.Workflow):
    @step(wait=timedelta(hours=1), timeout=TIMEOUT)
    def work(self):
        Runs.body(self)


class TimeoutAfterSignal(geneva.Workflow):
    @step(wait_for="approved", timeout=TIMEOUT)
    def work(self):
        Runs.body(self)


class TimeoutAndWaitTimeout(geneva.Workflow):
    @step(
        wait_for="approved",
        wait_timeout=timedelta(hours=1),
        on_wait_timeout="skip",
        timeout=TIMEOUT,
    )
    def work(self):
        Runs.body(self)

    @step
    def tail(self):
        pass


def test_a_wait_longer_than_the_timeout_is_not_counted(app, user, runs, geneva_jobs):
    """A step due an hour later, run three hours later, completes within its
    one-minute timeout; the same step taking two minutes times out (R-STO-06,
    R-STO-03)."""
    quick = TimeoutAfterWait.create(hero=user)
    runs.frozen.advance(LONG)
    geneva.dispatch_due()  # a wait beyond GENEVA_MAX_BROKER_DELAY (R-DSP-01)
    # The dispatcher's publication carries the limits too (R-STO-03).
    assert [p.soft_time_limit for p in geneva_jobs.enqueued] == [60.0]
    geneva_jobs.drain()
    assert execution_history(quick.id) == [("work", "completed", "success")]
    row = execution_rows(quick.id)[0]
    assert row["started_at"] - row["scheduled_for"] > TIMEOUT  # it waited, then ran

    slow = TimeoutAfterWait.create(hero=user)
    runs.frozen.advance(LONG)
    geneva.dispatch_due()
    runs.takes = 2 * TIMEOUT
    geneva_jobs.drain()
    assert [type(error) for _, error in geneva_jobs.failures] == [StepTimeout]
    assert execution_history(slow.id) == [("work", "failed", "failed")]


def test_a_signal_wait_longer_than_the_timeout_is_not_counted(
    app, user, runs, geneva_jobs
):
    """A wait_for step parked for three hours runs its body within its timeout
    once the signal arrives; a body that then takes longer times out (R-STO-06,
    R-WSIG-06)."""
    quick = TimeoutAfterSignal.create(hero=user)
    geneva_jobs.drain()
    assert execution_history(quick.id) == [("work", "waiting", None)]
    runs.frozen.advance(LONG)
    quick.signal("approved")
    # The wake's publication carries the limits (R-STO-03, R-WSIG-11).
    assert [p.time_limit for p in geneva_jobs.enqueued] == [90.0]
    geneva_jobs.drain()
    assert execution_history(quick.id) == [("work", "completed", "success")]

    slow = TimeoutAfterSignal.create(hero=user)
    geneva_jobs.drain()
    runs.frozen.advance(LONG)
    slow.signal("approved")
    runs.takes = TIMEOUT + timedelta(seconds=1)
    geneva_jobs.drain()
    assert [type(error) for _, error in geneva_jobs.failures] == [StepTimeout]
    assert workflow_row(slow.id)["state"] == "paused"


def test_the_signal_wait_timeout_and_the_step_timeout_are_separate(
    app, user, runs, geneva_jobs
):
    """wait_timeout bounds the wait (on_wait_timeout applies, no StepTimeout);
    timeout bounds the body (R-STO-06, R-WSIG-41)."""
    waited_out = TimeoutAndWaitTimeout.create(hero=user)
    geneva_jobs.drain()
    runs.frozen.advance(timedelta(hours=2))
    assert geneva.dispatch_due() == 1
    geneva_jobs.drain()
    assert execution_history(waited_out.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "completed", "success"),
    ]
    assert "waited" in execution_rows(waited_out.id)[0]["error_message"]
    assert geneva_jobs.failures == []

    signaled = TimeoutAndWaitTimeout.create(hero=user)
    geneva_jobs.drain()
    runs.frozen.advance(timedelta(minutes=59))
    signaled.signal("approved")
    runs.takes = 2 * TIMEOUT
    geneva_jobs.drain()
    assert [type(error) for _, error in geneva_jobs.failures] == [StepTimeout]
    assert not any(
        isinstance(error, SignalWaitTimeout) for _, error in geneva_jobs.failures
    )
    assert execution_history(signaled.id) == [("work", "failed", "failed")]
