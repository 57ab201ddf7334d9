"""The dispatcher cancels or pauses workflows past their deadline (SPEC §27.1,
R-DL-20..24)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from flask_geneva.core import clock
from flask_geneva.db import deadlines as deadline_rows
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.deadlines.workflows import DAY
from tests.engine.deadlines.workflows import HOUR
from tests.engine.deadlines.workflows import RUNS
from tests.engine.deadlines.workflows import T0
from tests.engine.deadlines.workflows import Monthly
from tests.engine.deadlines.workflows import PausedByDeadline
from tests.engine.deadlines.workflows import RunsAcrossTheDeadline
from tests.engine.deadlines.workflows import RunsAcrossThePause
from tests.engine.deadlines.workflows import TwoDays
from tests.engine.deadlines.workflows import deadline_of
from tests.engine.deadlines.workflows import dispatch
from tests.engine.deadlines.workflows import operator_actions
from tests.engine.deadlines.workflows import state_of
from tests.support.workflow import execution_history
from tests.support.workflow import external_writer
from tests.support.workflow import workflows_table


def _started(workflow_cls, user, geneva_jobs, **create):
    """Create at T0 and run the first step; the second waits in the database."""
    with clock.frozen(T0):
        workflow = workflow_cls.create(hero=user, **create)
        geneva_jobs.drain()
    db.session.remove()
    return workflow.id


def test_a_workflow_past_its_deadline_is_canceled_by_the_dispatcher(
    app, user, geneva_jobs
):
    """At the deadline the dispatcher cancels the workflow and its scheduled
    execution, recorded as an operator action via "deadline" with the deadline
    (R-DL-20, R-DL-21); before it, nothing happens."""
    workflow_id = _started(Monthly, user, geneva_jobs)
    with clock.frozen(T0 + timedelta(days=30) - timedelta(seconds=1)):
        assert dispatch().deadlines == 0
    assert state_of(workflow_id) == "ready"
    with clock.frozen(T0 + timedelta(days=30)):
        assert dispatch().deadlines == 1
    assert state_of(workflow_id) == "canceled"
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "canceled", "canceled"),
    ]
    [action] = operator_actions(workflow_id)
    assert action["action"] == "cancel"
    assert action["via"] == "deadline"
    assert action["actor"] is None
    assert (action["from_state"], action["to_state"]) == ("ready", "canceled")
    assert action["deadline"] == (T0 + timedelta(days=30)).isoformat()
    # The deadline stays as history; a second run finds nothing (R-DL-22).
    assert deadline_of(workflow_id) == T0 + timedelta(days=30)
    with clock.frozen(T0 + timedelta(days=31)):
        assert dispatch().deadlines == 0


def test_on_deadline_pause_pauses_once_and_resume_runs_on(app, user, geneva_jobs):
    """With __geneva_on_deadline__ = "pause" the workflow is paused, its
    scheduled execution kept as an operator's pause keeps it; the deadline is
    spent, so after resume() the dispatcher leaves it alone (R-DL-23)."""
    workflow_id = _started(PausedByDeadline, user, geneva_jobs)
    with clock.frozen(T0 + 2 * HOUR):
        assert dispatch().deadlines == 1
    assert state_of(workflow_id) == "paused"
    assert execution_history(workflow_id)[-1] == ("second", "scheduled", None)
    assert deadline_of(workflow_id) is None
    [action] = operator_actions(workflow_id)
    assert (action["action"], action["via"]) == ("pause", "deadline")
    assert action["deadline"] == (T0 + HOUR).isoformat()
    with clock.frozen(T0 + 3 * HOUR):
        geneva.Workflow.get(workflow_id).resume()
        assert dispatch().deadlines == 0
    assert state_of(workflow_id) == "ready"


def test_a_paused_workflow_past_its_deadline(app, user, geneva_jobs):
    """An operator-paused workflow is canceled at its deadline under "cancel";
    under "pause" it stays paused and its deadline is spent (R-DL-20, R-DL-23)."""
    canceled = _started(TwoDays, user, geneva_jobs, deadline=HOUR, allow_multiple=True)
    paused = _started(PausedByDeadline, user, geneva_jobs)
    for workflow_id in (canceled, paused):
        geneva.Workflow.get(workflow_id).pause()
    with clock.frozen(T0 + 2 * HOUR):
        assert dispatch().deadlines == 2
    assert state_of(canceled) == "canceled"
    assert operator_actions(canceled)[-1]["from_state"] == "paused"
    assert state_of(paused) == "paused"
    assert deadline_of(paused) is None
    assert [a["via"] for a in operator_actions(paused)] == ["api"]


def test_a_workflow_that_finished_meanwhile_is_left_alone(
    app, user, geneva_jobs, monkeypatch
):
    """The pass reads the due workflows without a lock; one that finishes before
    the pass locks it is left as it is, without an error (R-DL-22)."""
    workflow_id = _started(TwoDays, user, geneva_jobs, deadline=HOUR)
    read = deadline_rows.due_deadlines

    def read_then_finish(session, *args, **kwargs):
        due = read(session, *args, **kwargs)
        if due:
            session.rollback()  # SQLite: the writer below needs the lock
            with external_writer() as connection:
                table = workflows_table()
                connection.execute(
                    sa.update(table)
                    .where(table.c.id == workflow_id)
                    .values(state="finished")
                )
        return due

    monkeypatch.setattr(deadline_rows, "due_deadlines", read_then_finish)
    with clock.frozen(T0 + 2 * HOUR):
        assert dispatch().deadlines == 0
    assert state_of(workflow_id) == "finished"
    assert operator_actions(workflow_id) == []


def test_a_step_running_across_the_deadline_does_not_continue_the_workflow(
    app, user, geneva_jobs
):
    """The dispatcher cancels a performing workflow without interrupting its
    step; the step completes, and no next step is scheduled (R-DL-24,
    R-EXE-42)."""
    RUNS.clear()
    with clock.frozen(T0):
        workflow = RunsAcrossTheDeadline.create(hero=user, deadline=HOUR)
    with clock.frozen(T0 + 2 * HOUR):
        geneva_jobs.drain()
    assert [run.deadlines for run in RUNS] == [1]
    assert state_of(workflow.id) == "canceled"
    assert execution_history(workflow.id) == [("first", "completed", "success")]
    assert operator_actions(workflow.id)[-1]["from_state"] == "performing"


def test_a_step_running_across_a_pausing_deadline_parks_the_next_step(
    app, user, geneva_jobs
):
    """Paused by its deadline while a step runs, the workflow keeps the next
    step scheduled and unpublished, as an operator's pause does; resume() runs
    it (R-DL-24, R-EXE-42)."""
    RUNS.clear()
    with clock.frozen(T0):
        workflow = RunsAcrossThePause.create(hero=user, deadline=HOUR)
    with clock.frozen(T0 + 2 * HOUR):
        geneva_jobs.drain()
    assert [run.deadlines for run in RUNS] == [1]
    assert state_of(workflow.id) == "paused"
    assert execution_history(workflow.id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]
    assert geneva_jobs.enqueued == []
    with clock.frozen(T0 + 3 * HOUR):
        geneva.Workflow.get(workflow.id).resume()
        geneva_jobs.drain()
    assert state_of(workflow.id) == "finished"


def test_the_pass_handles_more_workflows_than_one_batch(app, user, geneva_jobs):
    """The pass reads in batches of GENEVA_HOUSEKEEPING_BATCH_SIZE and cancels
    every due workflow, earliest deadline first (R-DL-20)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    ids = []
    with clock.frozen(T0):
        for minutes in (50, 10, 40, 20, 30):
            ids.append(
                TwoDays.create(
                    hero=user, deadline=timedelta(minutes=minutes), allow_multiple=True
                ).id
            )
        later = TwoDays.create(hero=user, deadline=DAY, allow_multiple=True).id
    with clock.frozen(T0 + HOUR):
        assert dispatch().deadlines == 5
    assert [state_of(i) for i in ids] == ["canceled"] * 5
    assert state_of(later) == "ready"
