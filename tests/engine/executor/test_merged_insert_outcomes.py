"""Workflows ended, parked or continued by their steps, run as a worker runs them.

On PostgreSQL a finished step's UPDATEs and the next execution's INSERT are one
statement when the workflow goes on, and separate statements when it ends or
other objects are pending (R-EXE-79); SQLite and MariaDB always send separate
statements. The outcomes here are constants, so running this file on the three
databases compares them: the merge must change no row a workflow leaves.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import workflow_row


class MergeEndsLast(geneva.Workflow):
    @step
    def a(self):
        self.hero.counter += 1

    @step
    def b(self):
        pass


class MergeCancelsInside(geneva.Workflow):
    @step
    def a(self):
        pass

    @step
    def b(self):
        self.hero.counter += 1
        self.cancel()

    @step
    def c(self):
        self.hero.counter += 100


class MergeSkipsLast(geneva.Workflow):
    @step
    def a(self):
        pass

    @step
    def b(self):
        self.skip()


class MergeFinishesEarly(geneva.Workflow):
    @step
    def a(self):
        self.hero.counter += 1
        self.finish()

    @step
    def b(self):
        self.hero.counter += 100


class MergeWaits(geneva.Workflow):
    @step
    def a(self):
        pass

    @step(wait=timedelta(hours=1))
    def b(self):
        pass


class MergeWalks(geneva.Workflow):
    @step
    def a(self):
        pass

    @resumable_step
    def walk(self, it):
        if (it.cursor or 0) < 3:
            it.skip_to((it.cursor or 0) + 1)
        self.hero.counter += 1

    @step
    def z(self):
        pass


class MergeWaitsForSignal(geneva.Workflow):
    @step
    def a(self):
        pass

    @step(wait_for="go")
    def b(self):
        self.hero.counter += self.received_signal.payload["n"]

    @step
    def c(self):
        pass


class MergeAddsHostRow(geneva.Workflow):
    @step
    def a(self):
        db.session.add(User(email=f"added-{self.id}@example.com"))

    @step
    def b(self):
        self.hero.email = f"renamed-{self.id}@example.com"

    @step
    def c(self):
        pass


@pytest.fixture
def user_id(user):
    """The hero's id, read before a session is removed."""
    return user.id


def _task(geneva_jobs: Any, workflow_id: Any) -> None:
    """One worker task for the workflow's due scheduled execution (inline on)."""
    (due,) = [r["id"] for r in execution_rows(workflow_id) if r["state"] == "scheduled"]
    geneva_jobs.clear()
    perform_step_execution(due)
    db.session.remove()


def _start(workflow_cls: Any, user: Any, geneva_jobs: Any) -> Any:
    workflow = workflow_cls.create(hero=user)
    workflow_id = workflow.id
    db.session.remove()
    _task(geneva_jobs, workflow_id)
    return workflow_id


@pytest.mark.parametrize(
    ("workflow_cls", "rows", "state", "counter"),
    [
        (
            MergeEndsLast,
            [("a", "completed", "success"), ("b", "completed", "success")],
            "finished",
            1,
        ),
        (
            MergeCancelsInside,
            [("a", "completed", "success"), ("b", "canceled", "canceled")],
            "canceled",
            1,
        ),
        (
            MergeSkipsLast,
            [("a", "completed", "success"), ("b", "skipped", "skipped")],
            "finished",
            0,
        ),
        (MergeFinishesEarly, [("a", "completed", "success")], "finished", 1),
    ],
    ids=["last-step", "cancel-inside", "skip-last", "finish-early"],
)
def test_a_step_that_ends_its_workflow_leaves_the_same_rows(
    app, user, user_id, geneva_jobs, workflow_cls, rows, state, counter
):
    """One task runs the chain to the step that ends the workflow; the rows and
    the hero are as without the merge, nothing is published (R-EXE-79, R-EXE-70,
    R-FC-10..14).
    """
    workflow_id = _start(workflow_cls, user, geneva_jobs)
    assert execution_history(workflow_id) == rows
    assert workflow_row(workflow_id)["state"] == state
    assert workflow_row(workflow_id)["current_step_name"] is None
    assert geneva_jobs.enqueued == []
    assert hero_counter(user_id) == counter


def test_a_step_wait_ends_the_chain_with_one_waiting_execution(
    app, user, user_id, geneva_jobs
):
    """The waiting next step is inserted scheduled an hour ahead and published for
    later; run_now replaces it (R-EXE-71, R-EXE-79, R-ADM-51).
    """
    workflow_id = _start(MergeWaits, user, geneva_jobs)
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "scheduled", None),
    ]
    row = workflow_row(workflow_id)
    assert (row["state"], row["next_step_name"], row["current_step_name"]) == (
        "ready",
        "b",
        None,
    )
    geneva.Workflow.get(workflow_id).run_now()
    db.session.remove()
    _task(geneva_jobs, workflow_id)
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "canceled", "canceled"),
        ("b", "completed", "success"),
    ]
    assert workflow_row(workflow_id)["state"] == "finished"


def test_a_resumable_steps_successor_chain_continues_from_its_cursor(
    app, user, user_id, geneva_jobs
):
    """skip_to() three times: three continued executions each followed by a
    successor carrying the cursor, then the last completes and ``z`` runs; each
    successor points at its predecessor (R-RES-20, R-SCH-08, R-EXE-79).
    """
    workflow_id = _start(MergeWalks, user, geneva_jobs)
    for _ in range(10):
        if workflow_row(workflow_id)["state"] != "ready":
            break
        _task(geneva_jobs, workflow_id)
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("a", "completed", "success"),
        ("walk", "completed", "continued"),
        ("walk", "completed", "continued"),
        ("walk", "completed", "continued"),
        ("walk", "completed", "success"),
        ("z", "completed", "success"),
    ]
    walks = [r for r in rows if r["step_name"] == "walk"]
    assert [w["continues_from_id"] for w in walks[1:]] == [w["id"] for w in walks[:-1]]
    assert [w["cursor"] for w in walks] == [1, 2, 3, 3]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert hero_counter(user_id) == 1


def test_a_signal_step_parks_then_runs_with_its_signal(app, user, user_id, geneva_jobs):
    """``b`` waits for ``go``: the chain parks it (waiting), the signal wakes it,
    and one task runs it and continues to ``c`` (R-WSIG-11, R-WSIG-30, R-EXE-79).
    """
    workflow_id = _start(MergeWaitsForSignal, user, geneva_jobs)
    # The gate is not claimed inline: b is published, and its delivery parks it.
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "scheduled", None),
    ]
    _task(geneva_jobs, workflow_id)
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "waiting", None),
    ]
    woken = geneva.Workflow.get(workflow_id).signal("go", {"n": 7}).woken
    db.session.remove()
    assert len(woken) == 1
    _task(geneva_jobs, workflow_id)
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "completed", "success"),
        ("c", "completed", "success"),
    ]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert hero_counter(user_id) == 7


def test_host_rows_pending_at_finalize_are_written(app, user, user_id, geneva_jobs):
    """A body that adds a host row, and one that changes the hero, leave pending
    objects: finalize falls back to separate statements and writes them with the
    step's rows (R-EXE-79, R-EXE-44).
    """
    workflow_id = MergeAddsHostRow.create(hero=user).id
    db.session.remove()
    with recorded_statements() as statements:
        _task(geneva_jobs, workflow_id)
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "completed", "success"),
        ("c", "completed", "success"),
    ]
    assert (
        db.session.query(User)
        .filter_by(email=f"added-{workflow_id}@example.com")
        .count()
        == 1
    )
    assert db.session.get(User, user_id).email == f"renamed-{workflow_id}@example.com"
    inserts = [s for s in statements if "INSERT INTO geneva_drive_step_executions" in s]
    assert len(inserts) == 2  # b's and c's; a's was inserted by create()
    # a's finalize had the new User pending, b's the renamed hero: both INSERTs
    # went out on their own, after the ORM flush of the host's objects.
    # The body's writes are committed before finalize (R-EXE-44), so finalize
    # itself has only geneva's rows pending: on PostgreSQL both INSERTs merge.
    merged = [s for s in inserts if s.lstrip().upper().startswith("WITH")]
    assert len(merged) == (2 if db.engine.dialect.name == "postgresql" else 0)


def _counting_condition(workflow: Any) -> bool:
    """A ``skip_if`` with a side effect: the hero changes, and a host row is added,
    while finalize evaluates it without autoflush (R-EXE-73)."""
    workflow.hero.counter += 1
    db.session.add(User(email=f"cond-{workflow.id}-{workflow.hero.counter}@x.org"))
    return False


class MergeConditionWrites(geneva.Workflow):
    @step
    def a(self):
        pass

    @step(skip_if=_counting_condition)
    def b(self):
        pass

    @step
    def c(self):
        pass


def test_host_objects_pending_at_the_insert_fall_back_and_are_written(
    app, user, user_id, geneva_jobs
):
    """``b``'s condition, evaluated inline in ``a``'s finalize, leaves a changed hero
    and a new host row pending at the INSERT of ``b``'s execution: no merge (other
    objects are pending), they are flushed by the ORM and committed with the step;
    the delivery-time evaluation is not repeated for a claimed step (R-EXE-79,
    R-EXE-73, R-EXE-74).
    """
    workflow_id = MergeConditionWrites.create(hero=user).id
    db.session.remove()
    with recorded_statements() as statements:
        _task(geneva_jobs, workflow_id)
    assert execution_history(workflow_id) == [
        ("a", "completed", "success"),
        ("b", "completed", "success"),
        ("c", "completed", "success"),
    ]
    assert hero_counter(user_id) == 1
    assert db.session.query(User).filter(User.email.like("cond-%")).count() == 1
    (insert_b, _) = [
        s for s in statements if "INSERT INTO geneva_drive_step_executions" in s
    ]
    assert insert_b.lstrip().upper().startswith("INSERT")
