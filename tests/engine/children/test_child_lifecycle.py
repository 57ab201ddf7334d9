"""Operators on a parent parked for its children, children failing and
recovering, and savepoints around start_children (SPEC §25).

R-CHD-20: a child settles once (failed -> finished un-fails it, failed ->
canceled changes nothing). R-CHD-21/22/24: a paused parent is not woken; its
resume runs the step when the children settled meanwhile. R-CHD-31: cancel
of a parked parent cascades. R-CHD-11: children and their count exist only
if the transaction that started them commits (savepoints included). On all
three databases.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

import pytest

from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children.support import assert_counts_exact
from tests.engine.children.support import children_rows
from tests.engine.children.support import counts_row
from tests.engine.children.support import deliver_now
from tests.engine.children.support import first_executions
from tests.engine.children.support import heroes
from tests.engine.children.support import heroes_named
from tests.engine.children.support import run_fan_out
from tests.support.limits import published_ids
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

PREFIX = ["none"]
FAILING: set[str] = set()
COLLECTED: list[Any] = []
#: What the savepoint parent's body does, by test.
BODY: list[Any] = []


class LifeLeaf(geneva.Workflow):
    @step
    def work(self):
        if self.hero.email in FAILING:
            raise RuntimeError(f"{self.hero.email} fails")
        self.set_result(self.hero.id)


class LifeParent(geneva.Workflow):
    @step
    def fan_out(self):
        self.start_children(LifeLeaf, heroes_named(PREFIX[0]))

    @step(wait_for_children=True, on_child_failure="ignore")
    def collect(self):
        COLLECTED.append(self.id)


class SavepointParent(geneva.Workflow):
    @step
    def fan_out(self):
        BODY[0](self)

    @step(wait_for_children=True)
    def collect(self):
        COLLECTED.append(self.id)


@pytest.fixture(autouse=True)
def _reset():
    FAILING.clear()
    COLLECTED.clear()
    BODY.clear()
    yield
    FAILING.clear()


def _parked_parent(tag: str, children: int, geneva_jobs: Any) -> tuple[Any, Any]:
    PREFIX[0] = tag
    [hero, *_] = heroes(tag, children)
    parent_id, collect_id = run_fan_out(LifeParent, hero, geneva_jobs)
    deliver_now(collect_id)
    assert execution_rows(parent_id)[-1]["state"] == "waiting"
    geneva_jobs.clear()
    db.session.remove()
    return parent_id, collect_id


def _op(workflow_id: Any, operation: str) -> None:
    getattr(geneva.Workflow.get(workflow_id), operation)()
    db.session.remove()


def _deliver(execution_id: Any) -> None:
    """Deliver; a body's error (recorded by its policy) is not the test's."""
    try:
        deliver_now(execution_id)
    except RuntimeError:
        db.session.remove()


def _children_finish(parent_id: Any) -> None:
    for execution_id in first_executions(parent_id):
        _deliver(execution_id)
    db.session.remove()


def test_a_paused_parent_is_not_woken_and_its_resume_runs_the_step(app, geneva_jobs):
    """R-CHD-22/24: the parked parent is paused, its children all settle: the
    wake's delivery leaves it parked, the dispatcher forgets the wait; resume
    runs the step at once (it does not park again)."""
    parent_id, collect_id = _parked_parent("paused", 2, geneva_jobs)
    _op(parent_id, "pause")
    _children_finish(parent_id)
    assert assert_counts_exact(parent_id) == (2, 2, 0)
    assert published_ids(geneva_jobs) == [collect_id]
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "paused"
    assert execution_rows(parent_id)[-1]["state"] == "waiting"
    assert COLLECTED == []
    _op(parent_id, "resume")
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert [parent_id] == COLLECTED
    row = counts_row(parent_id)
    assert (row["waiting_execution_id"], row["wake_due_at"]) == (None, None)


def test_a_parent_paused_before_its_gate_resumes_past_it(app, geneva_jobs):
    """R-CHD-21: paused before the collect step ran, children all settled
    meanwhile: resume runs the step, without parking."""
    PREFIX[0] = "early"
    [hero, *_] = heroes("early", 2)
    parent_id, _collect_id = run_fan_out(LifeParent, hero, geneva_jobs)
    _op(parent_id, "pause")
    _children_finish(parent_id)
    geneva_jobs.clear()
    _op(parent_id, "resume")
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"
    assert [row["state"] for row in execution_rows(parent_id)] == [
        "completed",
        "completed",
    ]
    assert [parent_id] == COLLECTED


def test_resume_of_a_paused_parked_parent_parks_it_again(app, geneva_jobs):
    """R-CHD-21: paused and resumed while no child settled: parked again,
    woken once by the last settlement."""
    parent_id, collect_id = _parked_parent("repark", 2, geneva_jobs)
    _op(parent_id, "pause")
    _op(parent_id, "resume")
    geneva_jobs.drain()
    assert execution_rows(parent_id)[-1]["state"] == "waiting"
    assert workflow_row(parent_id)["state"] == "ready"
    geneva_jobs.clear()
    _children_finish(parent_id)
    assert published_ids(geneva_jobs) == [collect_id]
    geneva_jobs.drain()
    assert [parent_id] == COLLECTED


def test_cancel_of_a_parked_parent_cancels_its_children(app, geneva_jobs):
    """R-CHD-31: the parked execution is canceled with its workflow; the
    dispatcher cancels the children; the counts say (3, 3, 3)."""
    parent_id, _collect_id = _parked_parent("canceled", 3, geneva_jobs)
    _op(parent_id, "cancel")
    assert execution_rows(parent_id)[-1]["state"] == "canceled"
    assert counts_row(parent_id)["cancel_due_at"] is not None
    geneva.dispatch_due()
    db.session.remove()
    assert {row["state"] for row in children_rows(parent_id)} == {"canceled"}
    assert assert_counts_exact(parent_id) == (3, 3, 3)
    assert counts_row(parent_id)["cancel_due_at"] is None
    geneva_jobs.drain()
    assert COLLECTED == []


def test_skip_of_a_parked_parent_finishes_it_and_the_children_still_settle(
    app, geneva_jobs
):
    """R-CHD-20/24: skipping the parked step finishes the parent (last
    step); the children settle later, the stale wake changes nothing and
    the dispatcher forgets it."""
    parent_id, _collect_id = _parked_parent("skipped", 2, geneva_jobs)
    _op(parent_id, "skip")
    assert workflow_row(parent_id)["state"] == "finished"
    assert execution_rows(parent_id)[-1]["state"] == "skipped"
    _children_finish(parent_id)
    geneva_jobs.drain()
    assert assert_counts_exact(parent_id) == (2, 2, 0)
    assert workflow_row(parent_id)["state"] == "finished"
    assert COLLECTED == []
    table = db.metadata.tables["geneva_drive_child_counts"]
    with db.engine.begin() as connection:  # made due long ago: a lost wake
        connection.execute(
            table.update()
            .where(table.c.parent_workflow_id == parent_id)
            .values(wake_due_at=datetime(2020, 1, 1, tzinfo=UTC))
        )
    geneva.dispatch_due()
    db.session.remove()
    row = counts_row(parent_id)
    assert (row["waiting_execution_id"], row["wake_due_at"]) == (None, None)


def test_a_failed_child_resumed_then_finished_and_one_canceled_after_failing(
    app, geneva_jobs
):
    """R-CHD-20/23: two children paused by errors (settled, failed 2); one
    is resumed and finishes (failed 1), the other canceled (still failed 1):
    each counted settled once."""
    FAILING.update({"failing-0@example.com", "failing-1@example.com"})
    parent_id, _collect_id = _parked_parent("failing", 3, geneva_jobs)
    _children_finish(parent_id)
    assert assert_counts_exact(parent_id) == (3, 3, 2)
    geneva_jobs.drain()
    assert [parent_id] == COLLECTED  # on_child_failure="ignore"
    first, second, _ = (row["id"] for row in children_rows(parent_id))
    assert workflow_row(first)["child_settled"] == "failed"
    FAILING.clear()
    _op(first, "resume")
    geneva_jobs.drain()
    assert workflow_row(first)["state"] == "finished"
    assert assert_counts_exact(parent_id) == (3, 3, 1)
    _op(second, "cancel")
    assert workflow_row(second)["child_settled"] == "canceled"
    assert assert_counts_exact(parent_id) == (3, 3, 1)


# -- savepoints (R-CHD-11, R-CHD-20) -------------------------------------------------


def _run_savepoint_parent(tag: str, body: Any, geneva_jobs: Any) -> Any:
    """Create a SavepointParent, run its fan_out (``body``) and, if scheduled,
    its collect step; return its id."""
    PREFIX[0] = tag
    BODY[:] = [body]
    [hero, *_] = heroes(tag, 2)
    parent = SavepointParent.create(hero=hero)
    parent_id, first_id = parent.id, parent.current_execution.id
    db.session.commit()
    geneva_jobs.clear()
    _deliver(first_id)
    following = execution_rows(parent_id)[-1]
    if following["step_name"] == "collect":
        _deliver(following["id"])
    db.session.remove()
    return parent_id


#: Publications wait for the commit, as outside tests (R-TXN-01/03).
AFTER_COMMIT = pytest.mark.parametrize(
    "app_config", [{"GENEVA_ENQUEUE_AFTER_COMMIT": True}], ids=["after_commit"]
)


@AFTER_COMMIT
def test_children_started_in_a_rolled_back_savepoint_count_nothing(app, geneva_jobs):
    """R-CHD-11: start_children inside a savepoint rolled back: no child, no
    count; the children started after it (released savepoint) count."""

    def body(workflow: Any) -> None:
        nested = db.session.begin_nested()
        workflow.start_children(LifeLeaf, heroes_named(PREFIX[0]))
        nested.rollback()
        with db.session.begin_nested():
            workflow.start_child(LifeLeaf, hero=workflow.hero, key="kept")

    parent_id = _run_savepoint_parent("savepoint", body, geneva_jobs)
    [kept] = children_rows(parent_id)
    assert kept["child_key"] == "kept"
    kept_first = execution_rows(kept["id"])[0]["id"]
    collect_id = execution_rows(parent_id)[-1]["id"]
    # The rolled-back children's first steps are not published (R-TXN-03).
    assert published_ids(geneva_jobs) == [kept_first, collect_id]
    assert assert_counts_exact(parent_id) == (1, 0, 0)
    geneva_jobs.drain()
    assert workflow_row(parent_id)["state"] == "finished"


@AFTER_COMMIT
def test_a_body_raising_after_start_children_leaves_no_child(app, geneva_jobs):
    """R-CHD-11: the body's transaction is rolled back: no child, no count;
    the step fails and the parent pauses."""

    def body(workflow: Any) -> None:
        workflow.start_children(LifeLeaf, heroes_named(PREFIX[0]))
        raise RuntimeError("after the children")

    parent_id = _run_savepoint_parent("raising", body, geneva_jobs)
    assert children_rows(parent_id) == []
    assert counts_row(parent_id) is None
    assert workflow_row(parent_id)["state"] == "paused"
    assert geneva_jobs.enqueued == []


def test_a_child_canceled_in_a_savepoint_rolled_back_settles_nothing(app, geneva_jobs):
    """R-CHD-20: an operator's cancel of a child made with commit=False in a
    savepoint that is rolled back leaves the child ongoing and the counts
    as they were; the same cancel committed settles it once."""
    PREFIX[0] = "nested"
    [hero, *_] = heroes("nested", 2)
    parent_id, _collect_id = run_fan_out(LifeParent, hero, geneva_jobs)
    child_id = children_rows(parent_id)[0]["id"]
    child = geneva.Workflow.get(child_id)
    nested = db.session.begin_nested()
    child.cancel(commit=False)
    nested.rollback()
    db.session.commit()
    db.session.remove()
    assert workflow_row(child_id)["state"] == "ready"
    assert assert_counts_exact(parent_id) == (2, 0, 0)
    child = geneva.Workflow.get(child_id)
    with db.session.begin_nested():
        child.cancel(commit=False)
    db.session.commit()
    db.session.remove()
    assert workflow_row(child_id)["state"] == "canceled"
    assert assert_counts_exact(parent_id) == (2, 1, 1)


def test_a_root_commit_with_a_savepoint_still_open_applies_the_settlement(
    app, geneva_jobs
):
    """R-CHD-20: session.commit() while a savepoint is open commits it too
    (SQLAlchemy releases it): the child's cancel made inside it settles
    for the parent."""
    PREFIX[0] = "open"
    [hero, *_] = heroes("open", 2)
    parent_id, _collect_id = run_fan_out(LifeParent, hero, geneva_jobs)
    child_id = children_rows(parent_id)[0]["id"]
    child = geneva.Workflow.get(child_id)
    db.session.begin_nested()
    child.cancel(commit=False)
    db.session.commit()
    db.session.remove()
    assert workflow_row(child_id)["state"] == "canceled"
    assert assert_counts_exact(parent_id) == (2, 1, 1)
