"""Inline continuation claims a limited next step only the way Phase 1 would.

R-LIM-15: finalize claims the next step inline only when it gets its slots as
Phase 1's fast path gets them and nobody waits for them: a slot the finished
step holds for the same limit and key is kept (not given back and taken
again), any other is taken with the one-statement take. Otherwise the next
step is published and queues behind the waiters (see
``test_release_paths.test_inline_continuation_never_bypasses_a_waiter``).
"""

from __future__ import annotations

from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.limits.test_claim import RUNS
from tests.support.limits import counters
from tests.support.limits import first_execution
from tests.support.limits import published_ids
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()


same = Limit("test-inline-same", concurrency=1)
other = Limit("test-inline-other", concurrency=1)


class LimitedTwice(geneva.Workflow):
    @step(limit=same)
    def first(self):
        RUNS.append("first")

    @step(limit=same)
    def second(self):
        RUNS.append("second")

    @step(limit=other)
    def third(self):
        RUNS.append("third")


def test_a_limited_chain_of_steps_continues_inline_keeping_its_slot(app, geneva_jobs):
    """R-LIM-15: one delivery runs the three steps; the slot of ``same`` is
    kept from first to second, ``other``'s is taken for third (its key row
    created on this first use), and all are given back at the end."""
    workflow_id, first_id = first_execution(LimitedTwice, "a@example.com")
    geneva_jobs.clear()
    perform_step_execution(first_id, continue_inline=True)
    assert RUNS == ["first", "second", "third"]
    assert published_ids(geneva_jobs) == []  # nothing went through the broker
    rows = execution_rows(workflow_id)
    assert [r["state"] for r in rows] == ["completed"] * 3
    assert rows[0]["limit_holds"] == {
        "held": [["test-inline-same", ""]],
        "passed_on": [["test-inline-same", ""]],
    }
    # Second gave same's slot back itself, in key order, before taking
    # other's for third (R-LIM-30).
    assert rows[1]["limit_holds"] == {
        "held": [["test-inline-same", ""]],
        "given_back": [["test-inline-same", ""]],
    }
    assert rows[2]["limit_holds"] == {"held": [["test-inline-other", ""]]}
    assert counters("test-inline-same", "") == (0, 0, 0)
    assert counters("test-inline-other", "") == (0, 0, 0)
    assert workflow_row(workflow_id)["state"] == "finished"


def test_a_full_key_is_not_claimed_inline(app, geneva_jobs):
    """R-LIM-15: ``other`` is full (another workflow holds it): third is
    published instead, and parks when delivered."""
    _, earlier_id = first_execution(LimitedTwice, "earlier@example.com")
    geneva_jobs.clear()
    perform_step_execution(earlier_id, continue_inline=True)  # creates the keys
    assert counters("test-inline-other", "") == (0, 0, 0)
    workflow_id, first_id = first_execution(LimitedTwice, "a@example.com")
    geneva_jobs.clear()
    # Take other's slot away from the outside, as a running workflow would.
    table = db.metadata.tables["geneva_drive_limit_keys"]
    with db.engine.begin() as connection:
        connection.execute(
            table.update()
            .where(table.c.limit_name == "test-inline-other")
            .values(running=1)
        )
    perform_step_execution(first_id, continue_inline=True)
    rows = execution_rows(workflow_id)
    assert [r["step_name"] for r in rows] == ["first", "second", "third"]
    assert rows[2]["state"] == "scheduled"
    assert rows[2]["id"] in published_ids(geneva_jobs)
    assert counters("test-inline-other", "") == (1, 0, 0)
    assert counters("test-inline-same", "") == (0, 0, 0)


class KeptUnlessSomeoneWaits(geneva.Workflow):
    @step(limit=same)
    def first(self):
        RUNS.append("kept-first")
        for hook in HOOKS:
            hook()

    @step(limit=same)
    def second(self):
        RUNS.append("kept-second")


HOOKS: list[Any] = []


def test_a_waiter_queued_during_the_body_stops_the_inline_claim(app, geneva_jobs):
    """R-LIM-15: a waiter is counted for ``same`` while first runs; finalize does
    not keep the slot for second (on PostgreSQL the statement's guard refuses
    and finalize runs again without continuing inline): first completes once,
    its slot is given back, second is published."""
    _, earlier_id = first_execution(LimitedTwice, "earlier@example.com")
    geneva_jobs.clear()
    perform_step_execution(earlier_id, continue_inline=True)  # the key row exists
    workflow_id, first_id = first_execution(KeptUnlessSomeoneWaits, "a@example.com")
    geneva_jobs.clear()
    table = db.metadata.tables["geneva_drive_limit_keys"]

    def someone_waits() -> None:
        with db.engine.begin() as connection:
            connection.execute(
                table.update()
                .where(table.c.limit_name == "test-inline-same")
                .values(waiting=1)
            )

    HOOKS.append(someone_waits)
    try:
        perform_step_execution(first_id, continue_inline=True)
    finally:
        HOOKS.clear()
    assert RUNS.count("kept-first") == 1
    assert "kept-second" not in RUNS
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    assert rows[1]["id"] in published_ids(geneva_jobs)
    assert "passed_on" not in (rows[0]["limit_holds"] or {})
    # The slot went back (under the lock, as waiters are counted).
    assert counters("test-inline-same", "") == (0, 0, 1)
