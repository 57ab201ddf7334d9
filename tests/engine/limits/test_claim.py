"""Concurrency limits in Phase 1: take a slot, park over the cap, wake by grant.

R-LIM-10: a limited step takes one slot of each of its limits in Phase 1, under
the workflow and execution locks, just before the claim; the counter row of
``(limit, key)`` never counts more running executions than the cap.
R-LIM-11: over the cap the execution stays ``scheduled`` with ``job_id =
"geneva:limited"``, a waiter row and no broker message.
R-LIM-12: waiters are granted in priority order (higher first), then first
come first served; a newcomer never passes a waiter.
R-LIM-13: the transaction that frees a slot grants it to the next waiter and
publishes that waiter's task after its commit.
R-LIM-14: a paused workflow's waiter keeps its place and is skipped.

Each test runs the real executor through the task logic a Celery worker runs
(:func:`flask_geneva.ext.tasks.perform_step_execution`); a step body that must
be "running" while another workflow is delivered delivers it from another
thread, as a second worker would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.core.publications import LIMITED_JOB_ID
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import counters
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import key_row
from tests.support.limits import published_ids
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import signal_rows
from tests.support.workflow import workflow_row

RUNS: list[str] = []
#: Called inside the body of ``Exclusive.work`` while it holds its slot.
DURING: list[Callable[[], Any]] = []

one_at_a_time = Limit("test-one-at-a-time", concurrency=1, key=lambda wf: "acme")
two_at_a_time = Limit("test-two-at-a-time", concurrency=2)
#: Sorted after the other limits: taken last (R-LIM-30's order).
last_limit = Limit("test-zz-last", concurrency=1, key=lambda wf: "acme")


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()
    DURING.clear()


class Exclusive(geneva.Workflow):
    @step(limit=one_at_a_time)
    def work(self):
        # Before reading the hero: on SQLite a read begins a transaction that
        # holds the write lock the other "worker" needs.
        while DURING:
            DURING.pop(0)()
        RUNS.append(f"work:{self.hero.email}")

    @step
    def after(self):
        RUNS.append(f"after:{self.hero.email}")


class PairedLimits(geneva.Workflow):
    @step(limit=[last_limit, two_at_a_time])
    def both(self):
        RUNS.append(f"both:{self.hero.email}")


class HoldsLast(geneva.Workflow):
    @step(limit=last_limit)
    def hold(self):
        while DURING:
            DURING.pop(0)()


def test_a_limited_step_holds_its_slot_while_it_runs_and_gives_it_back(
    app, geneva_jobs
):
    """R-LIM-10, R-LIM-20: the claim writes the held pairs; the end gives them back."""
    seen: list[tuple[int, int, int]] = []
    DURING.append(lambda: seen.append(counters("test-one-at-a-time", "acme")))
    workflow_id, first_id = first_execution(Exclusive, "a@example.com")
    geneva_jobs.drain()
    assert RUNS == ["work:a@example.com", "after:a@example.com"]
    assert seen == [(1, 0, 0)]  # held while the body ran
    assert counters("test-one-at-a-time", "acme") == (0, 0, 0)
    assert execution_row(first_id)["limit_holds"] == {
        "held": [["test-one-at-a-time", "acme"]]
    }
    after = execution_rows(workflow_id)[-1]
    assert after["limit_holds"] is None  # an unlimited step holds nothing
    assert workflow_row(workflow_id)["state"] == "finished"


def test_over_the_cap_an_execution_parks_without_a_message_and_is_granted_on_release(
    app, geneva_jobs
):
    """R-LIM-11, R-LIM-13: B parks while A runs; A's end grants B and publishes it."""
    _, a_id = first_execution(Exclusive, "a@example.com")
    b_workflow, b_id = first_execution(Exclusive, "b@example.com")
    geneva_jobs.clear()
    parked: dict[str, Any] = {}

    def while_a_runs() -> None:
        deliver(b_id)
        parked["row"] = execution_row(b_id)
        parked["counters"] = counters("test-one-at-a-time", "acme")
        parked["published"] = published_ids(geneva_jobs)
        parked["waiters"] = waiter_rows("test-one-at-a-time")

    DURING.append(while_a_runs)
    perform_step_execution(a_id, continue_inline=False)
    assert parked["row"]["state"] == "scheduled"
    assert parked["row"]["job_id"] == LIMITED_JOB_ID
    assert parked["row"]["limit_holds"]["waits"] == ["test-one-at-a-time", "acme"]
    assert parked["counters"] == (1, 0, 1)
    assert parked["published"] == []  # no broker message holds a waiter
    assert [w["execution_id"] for w in parked["waiters"]] == [b_id]
    # A finished: its slot went to B (granted) and B's task was published.
    assert counters("test-one-at-a-time", "acme") == (0, 1, 0)
    assert b_id in published_ids(geneva_jobs)
    assert waiter_rows("test-one-at-a-time")[0]["granted_at"] is not None
    geneva_jobs.drain()
    assert RUNS.count("work:b@example.com") == 1
    assert execution_row(b_id)["state"] == "completed"
    assert counters("test-one-at-a-time", "acme") == (0, 0, 0)
    assert waiter_rows("test-one-at-a-time") == []
    assert workflow_row(b_workflow)["state"] == "finished"


def test_waiters_are_granted_by_priority_then_first_come(app, geneva_jobs):
    """R-LIM-12: higher priority first, then the order they started waiting."""
    _, a_id = first_execution(Exclusive, "a@example.com")
    waiting = [
        first_execution(Exclusive, "low1@example.com", priority=1)[1],
        first_execution(Exclusive, "high@example.com", priority=5)[1],
        first_execution(Exclusive, "low2@example.com", priority=1)[1],
        first_execution(Exclusive, "none@example.com")[1],
    ]
    geneva_jobs.clear()

    def while_a_runs() -> None:
        for execution_id in waiting:
            deliver(execution_id)

    DURING.append(while_a_runs)
    perform_step_execution(a_id, continue_inline=False)
    order = []
    for _ in waiting:
        granted = [i for i in published_ids(geneva_jobs) if i in waiting]
        assert len(granted) == 1, granted  # one slot, one grant at a time
        order.append(granted[0])
        geneva_jobs.clear()
        perform_step_execution(granted[0], continue_inline=False)
    assert order == [waiting[1], waiting[0], waiting[2], waiting[3]]
    assert counters("test-one-at-a-time", "acme")[0] == 0


def test_a_newcomer_never_passes_a_waiter(app, geneva_jobs):
    """R-LIM-12: with a waiter granted, a new delivery parks behind it."""
    _, a_id = first_execution(Exclusive, "a@example.com")
    _, b_id = first_execution(Exclusive, "b@example.com")
    _, c_id = first_execution(Exclusive, "c@example.com")
    geneva_jobs.clear()
    DURING.append(lambda: deliver(b_id))
    perform_step_execution(a_id, continue_inline=False)
    assert counters("test-one-at-a-time", "acme") == (0, 1, 0)
    deliver(c_id)  # the slot is granted to B: C waits
    assert execution_row(c_id)["job_id"] == LIMITED_JOB_ID
    assert counters("test-one-at-a-time", "acme") == (0, 1, 1)
    geneva_jobs.drain()
    assert [r.split(":")[1] for r in RUNS if r.startswith("work")] == [
        "a@example.com",
        "b@example.com",
        "c@example.com",
    ]
    assert counters("test-one-at-a-time", "acme") == (0, 0, 0)


def test_a_paused_workflows_waiter_is_skipped_and_keeps_its_place(app, geneva_jobs):
    """R-LIM-14: B (paused) is passed over for C; resumed, B runs next."""
    _, a_id = first_execution(Exclusive, "a@example.com")
    b_workflow, b_id = first_execution(Exclusive, "b@example.com")
    _, c_id = first_execution(Exclusive, "c@example.com")
    geneva_jobs.clear()

    def while_a_runs() -> None:
        deliver(b_id)
        deliver(c_id)
        externally(b_workflow, "pause")

    DURING.append(while_a_runs)
    perform_step_execution(a_id, continue_inline=False)
    assert [i for i in published_ids(geneva_jobs) if i in (b_id, c_id)] == [c_id]
    assert [w["execution_id"] for w in waiter_rows("test-one-at-a-time")] == [
        b_id,
        c_id,
    ]
    geneva_jobs.clear()
    perform_step_execution(c_id, continue_inline=False)
    assert counters("test-one-at-a-time", "acme") == (0, 0, 1)
    externally(b_workflow, "resume")
    geneva_jobs.drain()
    assert execution_row(b_id)["state"] == "completed"
    assert counters("test-one-at-a-time", "acme") == (0, 0, 0)
    assert waiter_rows("test-one-at-a-time") == []


def test_several_limits_are_taken_all_or_nothing(app, geneva_jobs):
    """R-LIM-10: refused on one limit, the slots taken on the others go back."""
    _, holder_id = first_execution(HoldsLast, "holder@example.com")
    _, b_id = first_execution(PairedLimits, "b@example.com")
    geneva_jobs.clear()
    during: dict[str, Any] = {}

    def while_holder_runs() -> None:
        deliver(b_id)
        during["first"] = counters("test-two-at-a-time", "")
        during["last"] = counters("test-zz-last", "acme")
        during["row"] = execution_row(b_id)

    DURING.append(while_holder_runs)
    perform_step_execution(holder_id, continue_inline=False)
    # B took a slot of the first limit, was refused on the last, gave it back.
    assert during["first"] == (0, 0, 0)
    assert during["last"] == (1, 0, 1)
    assert during["row"]["limit_holds"]["waits"] == ["test-zz-last", "acme"]
    geneva_jobs.drain()
    assert execution_row(b_id)["state"] == "completed"
    assert execution_row(b_id)["limit_holds"]["held"] == [
        ["test-two-at-a-time", ""],
        ["test-zz-last", "acme"],
    ]
    assert counters("test-two-at-a-time", "") == (0, 0, 0)
    assert counters("test-zz-last", "acme") == (0, 0, 0)


class PairLimited(geneva.Workflow):
    @step(limit=two_at_a_time)
    def work(self):
        while DURING:
            DURING.pop(0)()


def test_a_woken_waiter_takes_its_grant_not_a_second_slot(app, geneva_jobs):
    """R-LIM-13: with its grant waiting and a slot free besides, the woken
    waiter's claim takes the grant: nothing is left granted or queued."""
    _, a_id = first_execution(PairLimited, "a@example.com")
    _, b_id = first_execution(PairLimited, "b@example.com")
    _, c_id = first_execution(PairLimited, "c@example.com")
    geneva_jobs.clear()
    # A runs and delivers B; B runs and delivers C, which parks (2 of 2 held).
    DURING.extend([lambda: deliver(b_id), lambda: deliver(c_id)])
    perform_step_execution(a_id, continue_inline=False)
    # B's end granted C its slot; A's end freed the other one.
    assert counters("test-two-at-a-time", "") == (0, 1, 0)
    perform_step_execution(c_id, continue_inline=False)
    assert execution_row(c_id)["state"] == "completed"
    assert counters("test-two-at-a-time", "") == (0, 0, 0)
    assert waiter_rows("test-two-at-a-time") == []


def _tenant_of(workflow):
    """The key of :class:`BadlyKeyed`: whatever the test put in KEY_VALUES."""
    value = KEY_VALUES[0]
    if isinstance(value, BaseException):
        raise value
    return value


KEY_VALUES: list[Any] = [None]
badly_keyed = Limit("test-badly-keyed", concurrency=1, key=_tenant_of)


class BadlyKeyed(geneva.Workflow):
    @step(limit=badly_keyed)
    def work(self):
        RUNS.append("work")


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (KeyError("tenant_id"), "KeyError"),
        (["acme", "beta"], "['acme', 'beta']"),
        ("x" * 300, "xxxx"),
    ],
)
def test_a_bad_key_pauses_the_workflow_through_its_policies(
    app, geneva_jobs, value, named
):
    """R-LIM-05, R-LIM-19: create() never evaluates the key, so it succeeds; the
    claim's LimitKeyError is recorded, the default policy pauses the workflow,
    and no slot or waiter is left."""
    KEY_VALUES[0] = value
    workflow_id, execution_id = first_execution(BadlyKeyed, "k@example.com")
    geneva_jobs.drain()
    row = execution_row(execution_id)
    assert row["state"] == "failed"
    assert row["error_class_name"] == "flask_geneva.exceptions.LimitKeyError"
    assert "test-badly-keyed" in row["error_message"]
    assert named in row["error_message"]
    assert workflow_row(workflow_id)["state"] == "paused"
    assert RUNS == []
    assert key_row("test-badly-keyed", "acme") is None
    assert waiter_rows("test-badly-keyed") == []


class SignalledAndLimited(geneva.Workflow):
    @step(wait_for="approved", limit=one_at_a_time)
    def ship(self):
        while DURING:
            DURING.pop(0)()
        RUNS.append(f"ship:{self.received_signal.payload}")


def test_a_wait_for_step_takes_its_slot_after_its_gate(app, geneva_jobs):
    """R-LIM-10, R-WSIG-14: B's signal is claimed at the gate, B parks for the
    slot A holds, and runs with that signal once A's end grants it."""
    a_wf, a_id = first_execution(SignalledAndLimited, "a@example.com")
    b_wf, b_id = first_execution(SignalledAndLimited, "b@example.com")
    for workflow_id, payload in ((a_wf, "a"), (b_wf, "b")):
        geneva.Workflow.get(workflow_id).signal("approved", payload)
    db.session.commit()
    geneva_jobs.clear()
    during: dict[str, Any] = {}

    def while_a_runs() -> None:
        deliver(b_id)
        during["b"] = execution_row(b_id)
        during["b signal"] = signal_rows(b_wf)[0]["state"]
        during["counters"] = counters("test-one-at-a-time", "acme")

    DURING.append(while_a_runs)
    perform_step_execution(a_id, continue_inline=False)
    assert during["b"]["state"] == "scheduled"
    assert during["b"]["job_id"] == LIMITED_JOB_ID
    assert during["b signal"] == "claimed"  # at the gate, kept while it waits
    assert during["counters"] == (1, 0, 1)
    geneva_jobs.drain()
    assert RUNS == ["ship:a", "ship:b"]
    assert counters("test-one-at-a-time", "acme") == (0, 0, 0)
    assert workflow_row(b_wf)["state"] == "finished"
    assert signal_rows(b_wf)[0]["state"] == "consumed"
