"""The sentence of a limit's waiter, its queue position and the status line.

R-LIM-41: a waiting execution reads "waiting for a <limit> slot (key <key>, R of
C running, W waiting, position P) since <duration>", a granted one "granted a
<limit> slot (key <key>) <duration> ago (its task is on its way)"; anything else
has no sentence. The position counts the key's ungranted waiters ahead in grant
order (priority, then waiting since, then arrival, R-LIM-12).
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
from flask_geneva.db.queries import limits as limit_reads
from flask_geneva.engine.limits import overview as limit_overview
from flask_geneva.engine.limits.describe import waited_limit
from flask_geneva.engine.limits.describe import waiting_sentence
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limit_rows import park
from tests.support.limit_rows import set_key
from tests.support.workflow import in_other_thread
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

partner_api = Limit("describe-partner-api", concurrency=2, key=lambda wf: "acme")
one_slot = Limit("describe-one-slot", concurrency=1)
#: Called inside the body of ``OneSlot.work`` while it holds its slot.
DURING: list[Callable[[], Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    DURING.clear()


class PartnerSync(geneva.Workflow):
    @step(limit=partner_api)
    def push(self):
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


def test_the_status_line_counts_busy_keys_waiters_and_the_oldest_wait(app, geneva_jobs):
    """R-LIM-43: only busy keys count; the oldest ungranted wait is shown."""
    now = clock.now()
    _three_waiters(now)
    set_key("describe-one-slot", "", running=1, concurrency=1)
    set_key("describe-one-slot", "idle-key", concurrency=1)
    status = limit_overview.limit_status(geneva.session)
    db.session.rollback()
    assert status["keys_busy"] == 2
    assert status["waiting"] == 3
    assert status["running"] == 3
    assert status["limits"]["describe-one-slot"]["keys"] == 2
    assert status["limits"]["describe-one-slot"]["keys_busy"] == 1
    assert 5 * 60 <= status["oldest_wait_seconds"] < 6 * 60
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
