"""Starting children, waiting for them, results (SPEC §25).

R-CHD-01: ``set_result``/``result``. R-CHD-11/12: children are created in the
step's transaction, linked to the parent, the step execution and the step,
unique per (parent, step, key). R-CHD-20..22: each child settles once; the
``wait_for_children`` step parks without a broker message and the settlement
that reaches its count wakes it once. R-CHD-23: a failed child raises
``ChildWorkflowFailed`` into the parent's policies, unless ``ignore``.
"""

from __future__ import annotations

import pytest

from flask_geneva import ChildWorkflowFailed
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children import workflows
from tests.engine.children.workflows import Doubler
from tests.engine.children.workflows import FirstOfMany
from tests.engine.children.workflows import Summing
from tests.engine.children.workflows import SummingIgnoringFailures
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row


@pytest.fixture(autouse=True)
def _fan_out():
    workflows.FAN_OUT[:] = ["a@example.com", "b@example.com", "c@example.com"]
    workflows.CHILD_FAILS.clear()
    yield
    workflows.CHILD_FAILS.clear()


def _heroes():
    return [make_user(email) for email in workflows.FAN_OUT]


def _children_rows(parent_id):
    rows = db.session.execute(
        db.select(geneva.Workflow.__table__).where(
            geneva.Workflow.__table__.c.parent_workflow_id == parent_id
        )
    ).all()
    db.session.rollback()
    return sorted(rows, key=lambda row: row.id)


def test_fan_out_and_fan_in_sum_the_children_results(app, geneva_jobs):
    """R-CHD-01, R-CHD-11, R-CHD-21/22: three children, their results summed."""
    heroes = _heroes()
    parent = Summing.create(hero=heroes[0])
    parent_id = parent.id
    geneva_jobs.drain()
    row = workflow_row(parent_id)
    assert row["state"] == "finished"
    assert Summing.get(parent_id).result == sum(2 * hero.id for hero in heroes)
    children = _children_rows(parent_id)
    assert len(children) == 3
    fan_out = execution_rows(parent_id)[0]
    assert {child.parent_execution_id for child in children} == {fan_out["id"]}
    assert {child.parent_step_name for child in children} == {"fan_out"}
    assert {child.child_settled for child in children} == {"finished"}
    assert {child.state for child in children} == {"finished"}
    counts = Summing.get(parent_id).child_counts
    assert (counts.started, counts.settled, counts.failed) == (3, 3, 0)
    assert counts.waiting_execution_id is None
    child = Doubler.get(children[0].id)
    assert child.parent.id == parent_id
    assert child.result == {"doubled": 2 * child.hero.id}


def test_the_collecting_step_parks_until_the_last_child_settles(app, geneva_jobs):
    """R-CHD-21/22: parked (no message, no worker) while children run; the
    last child's settlement publishes it once."""
    heroes = _heroes()
    parent_id = Summing.create(hero=heroes[0]).id
    first_id = execution_rows(parent_id)[0]["id"]
    geneva_jobs.clear()
    perform_step_execution(first_id, continue_inline=True)
    collect = execution_rows(parent_id)[1]
    assert collect["step_name"] == "collect"
    # Never claimed inline: its own delivery passes the gate (R-CHD-21).
    assert collect["state"] == "scheduled"
    children = _children_rows(parent_id)
    child_firsts = {execution_rows(child.id)[0]["id"]: child.id for child in children}
    published = {p.step_execution_id for p in geneva_jobs.enqueued}
    assert published == {*child_firsts, collect["id"]}
    geneva_jobs.clear()
    perform_step_execution(collect["id"], continue_inline=False)
    assert execution_rows(parent_id)[1]["state"] == "waiting"
    assert workflow_row(parent_id)["state"] == "ready"
    assert geneva_jobs.enqueued == []
    for index, execution_id in enumerate(sorted(child_firsts)):
        perform_step_execution(execution_id, continue_inline=False)
        published = [p.step_execution_id for p in geneva_jobs.enqueued]
        if index < 2:
            assert collect["id"] not in published
            assert execution_rows(parent_id)[1]["state"] == "waiting"
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [collect["id"]]
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert execution_rows(parent_id)[1]["state"] == "completed"


def test_running_the_fan_out_again_creates_no_duplicate(app, geneva_jobs):
    """R-CHD-11/12: a step run again after its body committed finds its
    children and counts none twice."""
    heroes = _heroes()
    parent_id = Summing.create(hero=heroes[0]).id
    first_id = execution_rows(parent_id)[0]["id"]
    geneva_jobs.clear()
    perform_step_execution(first_id, continue_inline=False)
    first_children = [child.id for child in _children_rows(parent_id)]
    # The same step again, as after a worker died between body and finalize.
    parent = Summing.get(parent_id)
    from flask_geneva.engine.flow_control import step_context

    with step_context(parent_id, "body", execution_id=first_id, step_name="fan_out"):
        again = parent.start_children(Doubler, heroes)
    db.session.commit()
    assert [child.id for child in again] == first_children
    assert [child.id for child in _children_rows(parent_id)] == first_children
    assert Summing.get(parent_id).child_counts.started == 3
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"


def test_a_failed_child_raises_into_the_parents_policies(app, geneva_jobs):
    """R-CHD-20/23: a child paused by an error settles as failed; the wait,
    settled, raises ChildWorkflowFailed and the default policy pauses."""
    heroes = _heroes()
    workflows.CHILD_FAILS.add("b@example.com")
    parent_id = Summing.create(hero=heroes[0]).id
    geneva_jobs.drain()
    row = workflow_row(parent_id)
    assert row["state"] == "paused"
    collect = execution_rows(parent_id)[-1]
    assert collect["error_class_name"] == "flask_geneva.exceptions.ChildWorkflowFailed"
    assert "1 of the 3 child workflows" in collect["error_message"]
    failed = [child for child in _children_rows(parent_id) if child.state == "paused"]
    assert [child.child_settled for child in failed] == ["failed"]
    counts = Summing.get(parent_id).child_counts
    assert (counts.settled, counts.failed) == (3, 1)
    # The child recovers; it stops counting as failed, and the parent resumes.
    workflows.CHILD_FAILS.clear()
    Doubler.get(failed[0].id).resume()
    geneva_jobs.drain()
    assert workflow_row(failed[0].id)["child_settled"] == "finished"
    counts = Summing.get(parent_id).child_counts
    assert (counts.settled, counts.failed) == (3, 0)
    Summing.get(parent_id).resume()
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert Summing.get(parent_id).result == sum(2 * hero.id for hero in heroes)


def test_on_child_failure_ignore_runs_the_step(app, geneva_jobs):
    """R-CHD-23: ``on_child_failure="ignore"`` runs the step with what there is."""
    heroes = _heroes()
    workflows.CHILD_FAILS.add("a@example.com")
    parent_id = SummingIgnoringFailures.create(hero=heroes[0]).id
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    expected = sum(2 * hero.id for hero in heroes[1:])
    assert SummingIgnoringFailures.get(parent_id).result == expected


def test_any_wakes_with_the_first_settled_child(app, geneva_jobs):
    """R-CHD-21: ``"any"`` runs the step once one child settled."""
    workflows.FAN_OUT[:] = ["a@example.com", "b@example.com"]
    heroes = _heroes()
    parent_id = FirstOfMany.create(hero=heroes[0]).id
    geneva_jobs.drain()  # the children run their first step; the second waits
    assert workflow_row(parent_id)["state"] == "ready"
    assert execution_rows(parent_id)[-1]["state"] == "waiting"
    assert {row.state for row in _children_rows(parent_id)} == {"ready"}
    child_id = _children_rows(parent_id)[0].id
    second = execution_rows(child_id)[-1]
    perform_step_execution(second["id"], continue_inline=False, run_early=True)
    geneva_jobs.drain()
    assert workflow_row(child_id)["state"] == "finished"
    assert workflow_row(parent_id)["state"] == "finished"
    assert FirstOfMany.get(parent_id).result == 1


def test_child_workflow_failed_pickles():
    """ChildWorkflowFailed crosses process boundaries with its attributes."""
    import pickle

    error = ChildWorkflowFailed("x", failed_count=2, failed_child_ids=(1, 2))
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (str(copy), copy.failed_count, copy.failed_child_ids) == ("x", 2, (1, 2))


def test_an_int_threshold_runs_the_step_with_children_still_running(app, geneva_jobs):
    """R-CHD-21: ``wait_for_children=2`` runs the step once two of three
    children settled; the third runs on (R-CHD-30: nothing stops it)."""
    from tests.engine.children.workflows import TwoOfThree

    heroes = _heroes()
    parent_id = TwoOfThree.create(hero=heroes[0]).id
    geneva_jobs.drain()  # the children's second steps are a day later
    assert execution_rows(parent_id)[-1]["state"] == "waiting"
    children = _children_rows(parent_id)
    for child in children[:2]:
        second = execution_rows(child.id)[-1]
        perform_step_execution(second["id"], continue_inline=False, run_early=True)
        if child is children[0]:
            assert execution_rows(parent_id)[-1]["state"] == "waiting"
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert TwoOfThree.get(parent_id).result == ["finished", "finished", "ready"]
    assert workflow_row(children[2].id)["state"] == "ready"


def test_a_signal_wait_and_a_children_wait_compose(app, geneva_jobs):
    """R-CHD-21, R-WSIG-06: the signal gate first, then the children gate;
    the step runs once both are satisfied, whichever comes last."""
    from tests.engine.children.workflows import SignalThenChildren

    heroes = _heroes()
    parent_id = SignalThenChildren.create(hero=heroes[0]).id
    geneva_jobs.drain()  # children finished; the step parks for the signal
    assert workflow_row(parent_id)["state"] == "ready"
    assert execution_rows(parent_id)[-1]["state"] == "waiting"
    SignalThenChildren.get(parent_id).signal("go", {"n": 1})
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert SignalThenChildren.get(parent_id).result == {
        "signal": {"n": 1},
        "children": 3,
    }


def test_pausing_the_parent_pauses_no_child(app, geneva_jobs):
    """R-CHD-30: a paused parent's children run and finish; resumed, the
    parent runs its collecting step."""
    heroes = _heroes()
    parent_id = Summing.create(hero=heroes[0]).id
    first_id = execution_rows(parent_id)[0]["id"]
    geneva_jobs.clear()
    perform_step_execution(first_id, continue_inline=False)
    Summing.get(parent_id).pause()
    geneva_jobs.drain()
    assert {row.state for row in _children_rows(parent_id)} == {"finished"}
    assert workflow_row(parent_id)["state"] == "paused"
    Summing.get(parent_id).resume()
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert Summing.get(parent_id).result == sum(2 * hero.id for hero in heroes)


def test_a_signal_before_the_children_is_kept_while_they_settle(app, geneva_jobs):
    """R-CHD-21, R-WSIG-14: the signal claimed at the gate stays the step's
    while it parks for its children; the last child wakes it with it."""
    from tests.engine.children.workflows import SignalThenChildren

    heroes = _heroes()
    parent_id = SignalThenChildren.create(hero=heroes[0]).id
    first_id = execution_rows(parent_id)[0]["id"]
    geneva_jobs.clear()
    perform_step_execution(first_id, continue_inline=False)
    SignalThenChildren.get(parent_id).signal("go", {"n": 2})
    collect = execution_rows(parent_id)[-1]
    perform_step_execution(collect["id"], continue_inline=False)
    assert execution_rows(parent_id)[-1]["state"] == "waiting"  # for children
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert SignalThenChildren.get(parent_id).result == {
        "signal": {"n": 2},
        "children": 3,
    }
