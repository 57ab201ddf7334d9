"""A limit's grant and a child wait's wake carry the step's time limits (R-STO-03,
R-LIM-13, R-LIM-16, R-CHD-22, R-CHD-24).

These publications start from rows, not from a step definition: the statement
that finds the waiter or the wake reads its workflow's type and its step's name
too, and the step's ``timeout`` gives Celery's soft limit (the timeout) and
hard limit (the timeout plus ``GENEVA_STEP_TIMEOUT_GRACE``).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.ext.operations import dispatch_due
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children.support import first_executions
from tests.engine.children.support import heroes
from tests.engine.children.support import heroes_named
from tests.engine.children.support import run_fan_out
from tests.engine.children.workflows import Doubler
from tests.support.limits import assert_consistent
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row

PUBLISH_TIMEOUT = timedelta(minutes=2)
GRACE = timedelta(seconds=5)
LIMIT = "test-timeout-grant"

timed_slot = Limit(LIMIT, concurrency=1, key=lambda wf: "k")
#: Called inside the holder's body while it holds the slot.
WHILE_HOLDING: list = []


class GrantTimed(geneva.Workflow):
    @step(limit=timed_slot, timeout=timedelta(seconds=90))
    def work(self):
        while WHILE_HOLDING:
            WHILE_HOLDING.pop(0)()


class GrantUntimed(geneva.Workflow):
    @step(limit=timed_slot)
    def work(self):
        pass


class WakeTimed(geneva.Workflow):
    @step
    def fan_out(self):
        self.start_children(Doubler, heroes_named("timed-wake"))

    @step(wait_for_children=True, timeout=timedelta(seconds=45))
    def collect(self):
        pass


@pytest.fixture
def app_config():
    return {
        "GENEVA_PUBLISH_TIMEOUT": PUBLISH_TIMEOUT,
        "GENEVA_STEP_TIMEOUT_GRACE": GRACE,
    }


def _published(geneva_jobs, execution_id):
    """The publications of ``execution_id`` recorded so far."""
    return [
        publication
        for publication in geneva_jobs.enqueued
        if str(publication.step_execution_id) == str(execution_id)
    ]


def _limits(publication):
    return publication.soft_time_limit, publication.time_limit


def test_a_grant_carries_the_time_limits_of_the_waiting_step(app, geneva_jobs):
    """A holds the one slot while B (90 s timeout) and C (none) park; A's release
    grants B, whose task carries 90 s and 95 s; B's release grants C, whose task
    carries none; a lost grant published again by the dispatcher carries them
    too (R-STO-03, R-LIM-13, R-LIM-16)."""
    WHILE_HOLDING.clear()
    _, a_id = first_execution(GrantTimed, "grant-a@example.com")
    _, b_id = first_execution(GrantTimed, "grant-b@example.com")
    c_workflow, c_id = first_execution(GrantUntimed, "grant-c@example.com")
    geneva_jobs.clear()

    def park_the_others():
        deliver(b_id)
        deliver(c_id)

    WHILE_HOLDING.append(park_the_others)
    perform_step_execution(a_id, continue_inline=False)
    db.session.remove()
    assert WHILE_HOLDING == []
    assert assert_consistent(LIMIT, "k") == (0, 1, 1)
    [granted] = _published(geneva_jobs, b_id)
    assert _limits(granted) == (90.0, 95.0)
    geneva_jobs.clear()  # the broker lost it
    later = datetime.now(UTC) + PUBLISH_TIMEOUT + timedelta(seconds=1)
    with clock.frozen(later):
        dispatch_due()
    db.session.remove()
    [again] = _published(geneva_jobs, b_id)
    assert _limits(again) == (90.0, 95.0)
    assert again.task_id != granted.task_id
    geneva_jobs.clear()
    perform_step_execution(b_id, continue_inline=False)
    db.session.remove()
    [untimed] = _published(geneva_jobs, c_id)
    assert _limits(untimed) == (None, None)
    geneva_jobs.drain()
    assert workflow_row(c_workflow)["state"] == "finished"


def test_a_child_wait_wake_carries_the_time_limits_of_the_parked_step(app, geneva_jobs):
    """The parent's collect step (45 s timeout) parks for two children; the last
    child's settlement wakes it with a task carrying 45 s and 50 s; a lost wake
    published again by the dispatcher carries them too (R-STO-03, R-CHD-22,
    R-CHD-24)."""
    heroes("timed-wake", 2)
    parent_id, collect_id = run_fan_out(WakeTimed, make_user(), geneva_jobs)
    perform_step_execution(collect_id, continue_inline=False)
    db.session.remove()
    assert workflow_row(parent_id)["state"] == "ready"
    for child_execution in first_executions(parent_id):
        perform_step_execution(child_execution, continue_inline=False)
        db.session.remove()
    [wake] = _published(geneva_jobs, collect_id)
    assert _limits(wake) == (45.0, 50.0)
    geneva_jobs.clear()  # the broker lost it
    table = db.metadata.tables["geneva_drive_child_counts"]
    with db.engine.begin() as connection:  # made due long ago: a lost wake
        connection.execute(
            table.update()
            .where(table.c.parent_workflow_id == parent_id)
            .values(wake_due_at=datetime(2020, 1, 1, tzinfo=UTC))
        )
    dispatch_due()
    db.session.remove()
    [again] = _published(geneva_jobs, collect_id)
    assert _limits(again) == (45.0, 50.0)
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
