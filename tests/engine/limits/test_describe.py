"""The sentence of a limit's waiter, its queue position and the status line.

R-LIM-41: a waiting execution reads "waiting for a <limit> slot (key <key>, R of
C running, W waiting, position P) since <duration>", a granted one "granted a
<limit> slot (key <key>) <duration> ago (its task is on its way)"; anything else
has no sentence. The position counts the key's ungranted waiters ahead in grant
order (priority, then waiting since, then arrival, R-LIM-12). A key whose rate
window is full reads "waiting for the <limit> rate (key <key>, N starts in the
last D, ...; next start at HH:MM:SS UTC)", a grant for a later start "granted a
<limit> start (key <key>) at HH:MM:SS UTC (the rate's window)"; a waiter that
resume() published again under a task id is still described.
R-LIM-43: the status line "limits: N keys busy, M waiting, oldest D".
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.publications import LIMITED_JOB_ID
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.engine.limits import overview as limit_overview
from flask_geneva.engine.limits.describe import clock_time
from flask_geneva.engine.limits.describe import waited_limit
from flask_geneva.engine.limits.describe import waiting_sentence
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.limits.test_rate import drain_until
from tests.support.limit_rows import park
from tests.support.limit_rows import record_starts
from tests.support.limit_rows import set_key
from tests.support.workflow import execution_row
from tests.support.workflow import externally
from tests.support.workflow import in_other_thread
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

partner_api = Limit("describe-partner-api", concurrency=2, key=lambda wf: "acme")
one_slot = Limit("describe-one-slot", concurrency=1)
three_a_minute = Limit(
    "describe-rate", rate=3, per=timedelta(minutes=1), key=lambda wf: "acme"
)
two_in_three_seconds = Limit(
    "describe-rate-real", rate=2, per=timedelta(seconds=3), key=lambda wf: "acme"
)
#: Called inside the body of ``OneSlot.work`` while it holds its slot.
DURING: list[Callable[[], Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    DURING.clear()


class PartnerSync(geneva.Workflow):
    @step(limit=partner_api)
    def push(self):
        pass


class RatedCall(geneva.Workflow):
    @step(limit=three_a_minute)
    def call(self):
        pass


class RealRatedCall(geneva.Workflow):
    @step(limit=two_in_three_seconds)
    def call(self):
        pass


class OneSlot(geneva.Workflow):
    @step(limit=one_slot)
    def work(self):
        while DURING:
            DURING.pop(0)()


def _scheduled(workflow_cls: Any, email: str) -> tuple[Any, Any]:
    """(workflow id, its first execution id), not delivered."""
    workflow = workflow_cls.create(hero=make_user(email))
    ids = workflow.id, workflow.current_execution.id
    db.session.commit()
    return ids


def _sentence(execution_id: Any, now: Any = None) -> str | None:
    session = geneva.session
    session.expire_all()
    execution = session.get(geneva.StepExecution, execution_id)
    try:
        return waiting_sentence(session, execution, now=now)
    finally:
        session.rollback()


def _three_waiters(now: Any) -> list[Any]:
    """Three waiters of describe-partner-api/acme; the key runs 2 of 2."""
    ids = [_scheduled(PartnerSync, f"w{i}@example.com") for i in range(3)]
    set_key("describe-partner-api", "acme", running=2, waiting=3)
    park(*ids[0], "describe-partner-api", "acme", since=now - timedelta(minutes=5))
    park(
        *ids[1],
        "describe-partner-api",
        "acme",
        since=now - timedelta(minutes=1),
        priority=5,
    )
    park(*ids[2], "describe-partner-api", "acme", since=now - timedelta(minutes=2))
    return [execution_id for _, execution_id in ids]


def test_a_waiter_says_its_limit_key_counters_position_and_wait(app, geneva_jobs):
    """R-LIM-41: counters of the key, its place in grant order, how long it waited."""
    now = clock.now()
    first, vip, third = _three_waiters(now)
    assert _sentence(first, now) == (
        "waiting for a describe-partner-api slot (key acme, 2 of 2 running, "
        "3 waiting, position 2) since 5 min"
    )
    # Higher priority first (R-LIM-12), whatever its wait.
    assert _sentence(vip, now).endswith("position 1) since 1 min")
    assert _sentence(third, now).endswith("position 3) since 2 min")


def test_equal_priority_and_wait_are_ordered_by_arrival(app, geneva_jobs):
    """R-LIM-41, R-LIM-12: the waiter row's id breaks a tie on waiting_since."""
    now = clock.now()
    ids = [_scheduled(PartnerSync, f"t{i}@example.com") for i in range(2)]
    set_key("describe-partner-api", "acme", running=2, waiting=2)
    for workflow_id, execution_id in ids:
        park(workflow_id, execution_id, "describe-partner-api", "acme", since=now)
    positions = []
    for _, execution_id in ids:
        db.session.rollback()
        place = limit_reads.waiter_position(geneva.session, execution_id)
        positions.append(place.position)
    db.session.rollback()
    assert positions == [1, 2]


def test_a_granted_waiter_says_its_task_is_on_its_way(app, geneva_jobs):
    """R-LIM-41: a granted waiter, and grants that count next to running."""
    now = clock.now()
    granted = _scheduled(PartnerSync, "g@example.com")
    waiting = _scheduled(PartnerSync, "w@example.com")
    set_key("describe-partner-api", "acme", running=1, granted=1, waiting=1)
    park(
        *granted,
        "describe-partner-api",
        "acme",
        since=now - timedelta(minutes=3),
        granted_at=now - timedelta(seconds=2),
    )
    park(*waiting, "describe-partner-api", "acme", since=now - timedelta(seconds=30))
    assert _sentence(granted[1], now) == (
        "granted a describe-partner-api slot (key acme) 2 s ago "
        "(its task is on its way)"
    )
    # The granted waiter is not counted ahead of the ungranted one.
    assert _sentence(waiting[1], now) == (
        "waiting for a describe-partner-api slot (key acme, 1 of 2 running, "
        "1 granted, 1 waiting, position 1) since 30 s"
    )


def test_the_global_key_reads_global(app, geneva_jobs):
    """R-LIM-41: a limit without ``key`` waits on the global key ``""``."""
    now = clock.now()
    workflow_id, execution_id = _scheduled(OneSlot, "global@example.com")
    set_key("describe-one-slot", "", running=1, waiting=1, concurrency=1)
    park(workflow_id, execution_id, "describe-one-slot", "", since=now)
    assert _sentence(execution_id, now) == (
        "waiting for a describe-one-slot slot (global key, 1 of 1 running, "
        "1 waiting, position 1) since 0 s"
    )


def test_only_a_limits_waiter_has_a_sentence(app, geneva_jobs):
    """R-LIM-41: an ordinary scheduled execution, or one marked limited whose row
    says nothing of a wait, has no sentence."""
    _, execution_id = _scheduled(PartnerSync, "plain@example.com")
    assert _sentence(execution_id) is None
    update_execution(execution_id, job_id="geneva:limited", limit_holds=None)
    assert _sentence(execution_id) is None
    db.session.expire_all()
    assert waited_limit(db.session.get(geneva.StepExecution, execution_id)) is None
    db.session.rollback()


def test_a_real_waiter_is_described_then_granted_then_has_none(app, geneva_jobs):
    """R-LIM-41 on the claim path: parked behind a running step, granted when it
    ends, no sentence once it ran."""
    _, holder = _scheduled(OneSlot, "holder@example.com")
    _, waiter = _scheduled(OneSlot, "waiter@example.com")
    geneva_jobs.clear()
    seen: dict[str, Any] = {}

    def while_the_holder_runs() -> None:
        in_other_thread(lambda: perform_step_execution(waiter, continue_inline=False))
        seen["sentence"] = in_other_thread(lambda: _sentence(waiter))

    DURING.append(while_the_holder_runs)
    perform_step_execution(holder, continue_inline=False)
    assert seen["sentence"].startswith(
        "waiting for a describe-one-slot slot (global key, 1 of 1 running, "
        "1 waiting, position 1) since "
    )
    assert _sentence(waiter).startswith("granted a describe-one-slot slot")
    geneva_jobs.drain()
    assert _sentence(waiter) is None


def _rate_waiters(now: Any, ages: list[timedelta]) -> tuple[list[Any], list[Any]]:
    """Two waiters of describe-rate/acme (3 per 1 min), its ring holding starts
    of the given ages by the database's clock; (execution ids, start times)."""
    ids = [_scheduled(RatedCall, f"r{i}@example.com") for i in range(2)]
    set_key(
        "describe-rate",
        "acme",
        waiting=2,
        concurrency=None,
        rate=3,
        per=timedelta(minutes=1),
    )
    starts = record_starts("describe-rate", "acme", ages)
    park(*ids[0], "describe-rate", "acme", since=now - timedelta(seconds=40))
    park(*ids[1], "describe-rate", "acme", since=now - timedelta(seconds=20))
    return [execution_id for _, execution_id in ids], starts


def test_a_waiter_of_a_full_rate_window_says_when_the_next_start_is_allowed(
    app, geneva_jobs
):
    """R-LIM-41, R-LIM-23: 3 starts in the last minute (rate 3): "waiting for the
    describe-rate rate", the starts in the window and the next start's time, the
    oldest start in the window plus per."""
    now = clock.now()
    ages = [timedelta(seconds=50), timedelta(seconds=30), timedelta(seconds=10)]
    (first, second), starts = _rate_waiters(now, ages)
    next_at = clock_time(starts[0] + timedelta(minutes=1), now)
    assert _sentence(first, now) == (
        "waiting for the describe-rate rate (key acme, 3 starts in the last 1 min, "
        f"2 waiting, position 1; next start at {next_at}) since 40 s"
    )
    assert _sentence(second, now).endswith(
        f"position 2; next start at {next_at}) since 20 s"
    )
    activity = limit_reads.key_activity(geneva.session, "describe-rate", "acme")
    db.session.rollback()
    assert (activity.rate, activity.per_ms, activity.rate_used) == (3, 60_000, 3)
    assert activity.rate_full
    assert activity.next_start_at == starts[0] + timedelta(minutes=1)
    assert activity.read_at is not None


def test_starts_older_than_the_window_do_not_count(app, geneva_jobs):
    """R-LIM-41, R-LIM-23: a start older than per is out of the window: 2 of 3
    used, no next start time, and the waiter reads as a slot's."""
    now = clock.now()
    ages = [timedelta(seconds=70), timedelta(seconds=30), timedelta(seconds=10)]
    (first, _), _ = _rate_waiters(now, ages)
    activity = limit_reads.key_activity(geneva.session, "describe-rate", "acme")
    db.session.rollback()
    assert (activity.rate_used, activity.next_start_at) == (2, None)
    assert not activity.rate_full
    assert _sentence(first, now) == (
        "waiting for a describe-rate slot (key acme, 0 running, 2 waiting, "
        "position 1) since 40 s"
    )


def test_a_waiter_granted_for_a_later_start_says_when(app, geneva_jobs):
    """R-LIM-41, R-LIM-24: a grant whose not_before is ahead reads "granted a
    <limit> start (key K) at T UTC (the rate's window)"; once T has passed, its
    task is on its way."""
    now = clock.now()
    ids = _scheduled(RatedCall, "later@example.com")
    set_key(
        "describe-rate", "acme", granted=1, concurrency=None, rate=3,
        per=timedelta(minutes=1),
    )  # fmt: skip
    at = now + timedelta(seconds=4)
    park(
        *ids,
        "describe-rate",
        "acme",
        since=now - timedelta(seconds=30),
        granted_at=now - timedelta(seconds=1),
        not_before=at,
    )
    assert _sentence(ids[1], now) == (
        f"granted a describe-rate start (key acme) at {clock_time(at, now)} "
        "(the rate's window)"
    )
    later = now + timedelta(seconds=6)
    assert _sentence(ids[1], later) == (
        "granted a describe-rate slot (key acme) 7 s ago (its task is on its way)"
    )


def test_real_waiters_of_a_full_window_on_the_claim_path(app, geneva_jobs):
    """R-LIM-41, R-LIM-24 with the claim path's own rows: 4 starts at 2 per 3 s;
    two run, the head waiter is granted for the window's end, the last waits for
    the rate; all run in the end and then have no sentence."""
    ids = [_scheduled(RealRatedCall, f"real{i}@example.com")[1] for i in range(4)]
    geneva_jobs.drain(respect_eta=True)
    done = [i for i in ids if execution_row(i)["state"] == "completed"]
    head, last = [i for i in ids if i not in done]
    assert len(done) == 2
    now = clock.now()
    activity = limit_reads.key_activity(geneva.session, "describe-rate-real", "acme")
    db.session.rollback()
    assert (activity.rate_used, activity.granted, activity.waiting) == (2, 1, 1)
    next_at = clock_time(activity.next_start_at, now)
    assert _sentence(head, now) == (
        f"granted a describe-rate-real start (key acme) at {next_at} "
        "(the rate's window)"
    )
    assert _sentence(last, now).startswith(
        "waiting for the describe-rate-real rate (key acme, 2 starts in the last "
        f"3 s, 1 granted, 1 waiting, position 1; next start at {next_at}) since "
    )
    drain_until(
        geneva_jobs, lambda: all(execution_row(i)["state"] == "completed" for i in ids)
    )
    assert _sentence(last) is None


def test_the_clock_time_has_the_date_only_on_another_day(app):
    """R-LIM-41: "12:00:04 UTC" on the day of now, else with the date."""
    now = clock.now().replace(hour=12, minute=0, second=0, microsecond=0)
    assert clock_time(now + timedelta(seconds=4), now) == "12:00:04 UTC"
    assert clock_time(now + timedelta(days=1), now) == (
        (now + timedelta(days=1)).strftime("%Y-%m-%d 12:00:00 UTC")
    )


def test_a_resumed_waiter_is_still_described(app, geneva_jobs):
    """R-LIM-41 (R-EXT-21): resume() publishes a paused waiter again under a task
    id; it still waits (its limit_holds say so) and keeps its sentence."""
    now = clock.now()
    workflow_id, execution_id = _scheduled(PartnerSync, "resumed@example.com")
    set_key("describe-partner-api", "acme", running=2, waiting=1)
    park(
        workflow_id,
        execution_id,
        "describe-partner-api",
        "acme",
        since=now - timedelta(minutes=1),
    )
    externally(workflow_id, "pause")
    externally(workflow_id, "resume")
    assert execution_row(execution_id)["job_id"] != LIMITED_JOB_ID
    assert execution_row(execution_id)["state"] == "scheduled"
    assert _sentence(execution_id, now) == (
        "waiting for a describe-partner-api slot (key acme, 2 of 2 running, "
        "1 waiting, position 1) since 1 min"
    )
    db.session.expire_all()
    execution = db.session.get(geneva.StepExecution, execution_id)
    assert waited_limit(execution) == ("describe-partner-api", "acme")
    db.session.rollback()


def test_a_paused_waiter_says_it_is_passed_over(app, geneva_jobs):
    """R-LIM-41, R-LIM-14: a waiter whose workflow is paused says so, so that
    its wait is not read as the limit's."""
    now = clock.now()
    workflow_id, execution_id = _scheduled(PartnerSync, "paused@example.com")
    set_key("describe-partner-api", "acme", running=2, waiting=1)
    park(
        workflow_id,
        execution_id,
        "describe-partner-api",
        "acme",
        since=now - timedelta(minutes=1),
    )
    externally(workflow_id, "pause")
    assert _sentence(execution_id, now) == (
        "waiting for a describe-partner-api slot (key acme, 2 of 2 running, "
        "1 waiting, position 1) since 1 min; its workflow is paused: passed "
        "over until it is resumed"
    )


def test_the_status_line_counts_busy_keys_waiters_and_the_oldest_wait(app, geneva_jobs):
    """R-LIM-43: only busy keys count; the oldest ungranted wait is shown."""
    now = clock.now()
    _three_waiters(now)
    set_key("describe-one-slot", "", running=1, concurrency=1)
    set_key("describe-one-slot", "idle-key", concurrency=1)
    # The clock stands still: on a loaded machine seconds pass before the read.
    with clock.frozen(now):
        status = limit_overview.limit_status(geneva.session)
    db.session.rollback()
    assert status["keys_busy"] == 2
    assert status["waiting"] == 3
    assert status["running"] == 3
    assert status["limits"]["describe-one-slot"]["keys"] == 2
    assert status["limits"]["describe-one-slot"]["keys_busy"] == 1
    assert status["oldest_wait_seconds"] == 5 * 60
    assert limit_overview.status_line(status) == (
        "limits: 2 keys busy, 3 waiting, oldest 5 min"
    )


def test_no_status_line_when_nothing_is_busy(app, geneva_jobs):
    """R-LIM-43: idle key rows make no line."""
    set_key("describe-one-slot", "", concurrency=1)
    status = limit_overview.limit_status(geneva.session)
    db.session.rollback()
    assert status["keys_busy"] == 0
    assert limit_overview.status_line(status) is None
    assert limit_overview.status_line(None) is None


def test_without_the_unit_there_is_no_sentence_and_no_status(
    app, without_unit, geneva_jobs
):
    """R-LIM-41/43, R-LIM-50: nothing is read without add_flow_limits."""
    _, execution_id = _scheduled(PartnerSync, "old@example.com")
    without_unit("add_flow_limits")
    update_execution(execution_id, job_id="geneva:limited")
    assert _sentence(execution_id) is None
    assert limit_overview.limit_status(geneva.session) is None
    assert limit_overview.limit_gauges(geneva.session) == []
    db.session.rollback()
