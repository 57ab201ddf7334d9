"""Deadlines of waiting workflows and of children (SPEC §27.1, R-DL-30, R-DL-40,
R-DL-41)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import InvalidStateError
from flask_geneva.core import clock
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.deadlines.workflows import CHILD_PLAN
from tests.engine.deadlines.workflows import DAY
from tests.engine.deadlines.workflows import HOUR
from tests.engine.deadlines.workflows import LIMIT_ACTIONS
from tests.engine.deadlines.workflows import T0
from tests.engine.deadlines.workflows import FansOut
from tests.engine.deadlines.workflows import HalfHour
from tests.engine.deadlines.workflows import LimitedWork
from tests.engine.deadlines.workflows import TwoDays
from tests.engine.deadlines.workflows import WaitsForSignal
from tests.engine.deadlines.workflows import deadline_of
from tests.engine.deadlines.workflows import dispatch
from tests.engine.deadlines.workflows import operator_actions
from tests.engine.deadlines.workflows import state_of
from tests.support.limits import counters
from tests.support.limits import first_execution
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_history
from tests.support.workflow import workflow_row


def test_a_step_wait_past_the_deadline_is_canceled_on_time(app, user, geneva_jobs):
    """A step due a day later does not hold off a one-hour deadline: the
    dispatcher cancels the workflow and its waiting execution at the deadline
    (R-DL-40)."""
    with clock.frozen(T0):
        workflow = TwoDays.create(hero=user, deadline=HOUR)
        geneva_jobs.drain()
    with clock.frozen(T0 + HOUR):
        assert dispatch().deadlines == 1
    assert state_of(workflow.id) == "canceled"
    assert execution_history(workflow.id)[-1] == ("second", "canceled", "canceled")


def test_a_signal_wait_past_the_deadline_is_canceled_on_time(app, user, geneva_jobs):
    """A step parked for a signal with a two-day timeout is canceled at the
    one-hour deadline; a signal sent later is refused as for any canceled
    workflow (R-DL-40, R-WSIG-24)."""
    with clock.frozen(T0):
        workflow = WaitsForSignal.create(hero=user, deadline=HOUR)
        geneva_jobs.drain()
    assert execution_history(workflow.id) == [("gate", "waiting", None)]
    with clock.frozen(T0 + HOUR + timedelta(seconds=1)):
        assert dispatch().deadlines == 1
    assert state_of(workflow.id) == "canceled"
    assert execution_history(workflow.id) == [("gate", "canceled", "canceled")]
    with pytest.raises(InvalidStateError):
        geneva.Workflow.get(workflow.id).signal("go")


def test_children_inherit_the_parent_deadline_unless_given_their_own(
    app, user, geneva_jobs
):
    """A child gets the deadline given to start_child (later than the parent's
    or not), else the earlier of the parent's and its class's (R-DL-30)."""
    CHILD_PLAN[:] = [
        (TwoDays, "inherits", None),
        (TwoDays, "own", 3 * DAY),
        (HalfHour, "class", None),
    ]
    with clock.frozen(T0):
        parent = FansOut.create(hero=user, deadline=DAY)
        geneva_jobs.drain()
    children = {row.child_key: row.id for row in parent.children()}
    db.session.rollback()
    assert deadline_of(children["inherits"]) == T0 + DAY
    assert deadline_of(children["own"]) == T0 + 3 * DAY
    assert deadline_of(children["class"]) == T0 + timedelta(minutes=30)


def test_a_parent_waiting_for_children_is_canceled_and_cascades(app, user, geneva_jobs):
    """A parent parked for its children is canceled at its deadline; its
    "cancel" children are canceled too, by their own (inherited) deadline or by
    the parent's cascade (R-DL-41, R-CHD-31)."""
    CHILD_PLAN[:] = [(TwoDays, "inherits", None), (TwoDays, "own", 3 * DAY)]
    with clock.frozen(T0):
        parent = FansOut.create(hero=user, deadline=DAY)
        geneva_jobs.drain()
    parent_id = parent.id
    children = {row.child_key: row.id for row in parent.children()}
    db.session.rollback()
    assert execution_history(parent_id)[-1] == ("collect", "waiting", None)
    with clock.frozen(T0 + DAY):
        assert dispatch().deadlines == 2
    assert state_of(parent_id) == "canceled"
    assert execution_history(parent_id)[-1] == ("collect", "canceled", "canceled")
    assert [state_of(i) for i in children.values()] == ["canceled", "canceled"]
    assert operator_actions(children["inherits"])[-1]["via"] == "deadline"
    assert operator_actions(children["own"])[-1]["via"] == "parent"
    assert workflow_row(children["own"])["deadline_at"] == T0 + 3 * DAY


def test_a_step_waiting_for_a_limit_slot_is_canceled_at_the_deadline(app, geneva_jobs):
    """A step parked for a limit's slot is canceled with its workflow at the
    deadline, and its waiter row goes with it; the holder runs on and frees
    the slot (R-DL-40, R-LIM-14)."""
    with clock.frozen(T0):
        holder, holder_execution = first_execution(LimitedWork, "holder@example.com")
        waiter, waiter_execution = first_execution(
            LimitedWork, "waiter@example.com", deadline=HOUR
        )
    geneva_jobs.clear()
    db.session.remove()
    LIMIT_ACTIONS[:] = [
        lambda: perform_step_execution(waiter_execution, continue_inline=False),
        lambda: _parked_then_dispatch(waiter),
    ]
    with clock.frozen(T0 + 2 * HOUR):
        perform_step_execution(holder_execution, continue_inline=False)
    assert PARKED == [1]
    assert state_of(waiter) == "canceled"
    assert execution_history(waiter) == [("work", "canceled", "canceled")]
    assert state_of(holder) == "finished"
    assert counters("test-deadline-slot", "k") == (0, 0, 0)
    assert waiter_rows("test-deadline-slot") == []


#: The waiters the limit had when the dispatcher ran.
PARKED: list[int] = []


def _parked_then_dispatch(waiter_id):
    PARKED[:] = [counters("test-deadline-slot", "k")[2]]
    assert dispatch().deadlines == 1
