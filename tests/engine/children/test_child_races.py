"""Child workflows under concurrent workers, operators and the dispatcher (SPEC §25).

R-CHD-20: each child settles once; the parent's counts equal its children.
R-CHD-21/22/24: a settlement racing the parent's gate never leaves the parent
parked with enough settled children (no lost wake), and the wake is
published once. R-CHD-31: a canceled parent's cascade racing the children's
own finalize and operators. R-CHD-40: the counts row is the leaf of the lock
order: no deadlock with the limits' key rows or the workflows' rows.

Threads are real workers (own session and connection each, started at one
barrier by :func:`tests.support.workflow.run_together`); PostgreSQL and
MariaDB only: SQLite's single writer serializes them.
``GENEVA_TEST_CHILD_RACE_ROUNDS`` scales the rounds (default 6).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.exceptions import InvalidStateError
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children.support import assert_counts_exact
from tests.engine.children.support import children_rows
from tests.engine.children.support import counts
from tests.engine.children.support import counts_row
from tests.engine.children.support import deliver_now
from tests.engine.children.support import first_executions
from tests.engine.children.support import heroes
from tests.engine.children.support import heroes_named
from tests.engine.children.support import run_fan_out
from tests.support.innodb_locks import BOTH_ISOLATION_LEVELS
from tests.support.limits import published_ids
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import run_together
from tests.support.workflow import workflow_row

ROUNDS = int(os.environ.get("GENEVA_TEST_CHILD_RACE_ROUNDS", "6"))

#: The hero prefix the parents fan out to (set per round).
PREFIX = ["none"]
_runs_lock = threading.Lock()
COLLECTS: Counter[Any] = Counter()
SHARED = "test-child-shared"


class RaceLeaf(geneva.Workflow):
    @step
    def work(self):
        self.set_result(self.hero.id)


class RaceTwoSteps(geneva.Workflow):
    @step
    def first(self):
        pass

    @step
    def second(self):
        self.set_result(self.hero.id)


class RaceParent(geneva.Workflow):
    @step
    def fan_out(self):
        self.start_children(RaceLeaf, heroes_named(PREFIX[0]))

    @step(wait_for_children=True)
    def collect(self):
        with _runs_lock:
            COLLECTS[self.id] += 1


class RaceParentTwoSteps(geneva.Workflow):
    @step
    def fan_out(self):
        self.start_children(RaceTwoSteps, heroes_named(PREFIX[0]))

    @step(wait_for_children=True, on_child_failure="ignore")
    def collect(self):
        with _runs_lock:
            COLLECTS[self.id] += 1


class SharedLeaf(geneva.Workflow):
    @step(limit=Limit(SHARED, concurrency=1))
    def work(self):
        self.set_result(self.hero.id)


class SharedParent(geneva.Workflow):
    @step(limit=Limit(SHARED, concurrency=1))
    def fan_out(self):
        self.start_children(SharedLeaf, heroes_named(PREFIX[0]))

    @step(wait_for_children="any", limit=Limit(SHARED, concurrency=1))
    def collect(self):
        with _runs_lock:
            COLLECTS[self.id] += 1


@pytest.fixture(autouse=True)
def _servers_only(app: Any) -> None:
    if db.engine.dialect.name == "sqlite":
        pytest.skip("SQLite's single writer serializes the workers: no race")
    COLLECTS.clear()


def _deliver(execution_id: Any) -> Any:
    return lambda: deliver_now(execution_id)


def _operator(workflow_id: Any, operation: str) -> Any:
    """An operator action that may lose its race: a refusal is its answer."""

    def act() -> str:
        try:
            getattr(geneva.Workflow.get(workflow_id), operation)()
        except InvalidStateError:
            db.session.rollback()
            return "refused"
        return "done"

    return act


def _drain_together(app: Any, geneva_jobs: Any) -> None:
    """Deliver what was published, all at once, until nothing is left."""
    for _ in range(50):
        batch = published_ids(geneva_jobs)
        geneva_jobs.clear()
        if not batch:
            return
        run_together(app, [_deliver(execution_id) for execution_id in batch])
    raise AssertionError("publications never ran out")


def _parent(workflow_cls: Any, tag: str, children: int, geneva_jobs: Any) -> Any:
    PREFIX[0] = tag
    [hero, *_] = heroes(tag, children)
    return run_fan_out(workflow_cls, hero, geneva_jobs)


@pytest.mark.timeout(300)
def test_many_children_finishing_at_once(app, geneva_jobs):
    """R-CHD-20/22: six children finish at the same moment, the parent parked:
    counts exact, the parked execution published exactly once, the parent
    finishes once."""
    for round_number in range(max(ROUNDS // 2, 2)):
        parent_id, collect_id = _parent(
            RaceParent, f"many{round_number}", 6, geneva_jobs
        )
        deliver_now(collect_id)
        assert execution_row(collect_id)["state"] == "waiting"
        firsts = first_executions(parent_id)
        assert len(firsts) == 6
        geneva_jobs.clear()
        run_together(app, [_deliver(execution_id) for execution_id in firsts])
        assert assert_counts_exact(parent_id) == (6, 6, 0)
        assert published_ids(geneva_jobs) == [collect_id]
        row = counts_row(parent_id)
        assert row["wake_due_at"] is not None
        _drain_together(app, geneva_jobs)
        assert workflow_row(parent_id)["state"] == "finished"
        assert COLLECTS[parent_id] == 1
        assert [e["state"] for e in execution_rows(parent_id)] == [
            "completed",
            "completed",
        ]
        row = counts_row(parent_id)
        assert (row["waiting_execution_id"], row["wake_due_at"]) == (None, None)


@BOTH_ISOLATION_LEVELS
@pytest.mark.timeout(300)
def test_the_last_child_settling_while_the_gate_registers(app, geneva_jobs):
    """R-CHD-21/22/24: the parent's collect step reaches its gate while its last
    child finishes. Whichever commits first, the parent is never left parked
    with every child settled: it runs at once or its wake is published."""
    for round_number in range(ROUNDS * 2):
        parent_id, collect_id = _parent(
            RaceParent, f"gate{round_number}", 2, geneva_jobs
        )
        first, last = first_executions(parent_id)
        deliver_now(first)
        geneva_jobs.clear()
        run_together(app, [_deliver(collect_id), _deliver(last)])
        assert assert_counts_exact(parent_id) == (2, 2, 0)
        state = execution_row(collect_id)["state"]
        if state == "waiting":
            assert published_ids(geneva_jobs) == [collect_id], round_number
        else:
            assert state == "completed"
            assert collect_id not in published_ids(geneva_jobs)
        _drain_together(app, geneva_jobs)
        assert workflow_row(parent_id)["state"] == "finished"
        assert COLLECTS[parent_id] == 1
        row = counts_row(parent_id)
        assert (row["waiting_execution_id"], row["wake_due_at"]) == (None, None)


@pytest.mark.timeout(300)
def test_the_parent_canceled_while_its_children_finish(app, geneva_jobs):
    """R-CHD-20/31: an operator cancels the parked parent while its four
    children finish. The cancel is done or refused, never an error; the
    dispatcher cancels what is left; every child settled once, the counts
    exact, the collect step never runs."""
    for round_number in range(ROUNDS):
        parent_id, collect_id = _parent(
            RaceParent, f"cancel{round_number}", 4, geneva_jobs
        )
        deliver_now(collect_id)
        firsts = first_executions(parent_id)
        geneva_jobs.clear()
        outcomes = run_together(
            app,
            [_operator(parent_id, "cancel"), *[_deliver(e) for e in firsts]],
        )
        assert outcomes[0] == "done"
        assert workflow_row(parent_id)["state"] == "canceled"
        geneva.dispatch_due()
        db.session.remove()
        _drain_together(app, geneva_jobs)
        started, settled, failed = assert_counts_exact(parent_id)
        assert (started, settled) == (4, 4)
        states = Counter(row["state"] for row in children_rows(parent_id))
        assert states["canceled"] == failed
        assert states["finished"] + states["canceled"] == 4
        assert counts_row(parent_id)["cancel_due_at"] is None
        assert COLLECTS[parent_id] == 0
        assert workflow_row(parent_id)["state"] == "canceled"


@pytest.mark.timeout(300)
def test_the_cancel_cascade_racing_the_childrens_steps_and_operators(app, geneva_jobs):
    """R-CHD-20/31: the dispatcher cancels a canceled parent's children while
    they run their steps and an operator pauses one and resumes another.
    Refusals only, no deadlock, every child ends canceled or finished and
    the counts equal the children rows."""
    for round_number in range(ROUNDS):
        parent_id, collect_id = _parent(
            RaceParentTwoSteps, f"cascade{round_number}", 4, geneva_jobs
        )
        deliver_now(collect_id)
        firsts = first_executions(parent_id)
        firsts_delivered = [_deliver(e) for e in firsts]
        geneva_jobs.clear()
        run_together(app, firsts_delivered)  # every child at its second step
        seconds = list(published_ids(geneva_jobs))
        geneva_jobs.clear()
        kids = [row["id"] for row in children_rows(parent_id)]
        _operator(kids[1], "pause")()
        geneva.Workflow.get(parent_id).cancel()
        db.session.remove()
        run_together(
            app,
            [
                lambda: geneva.dispatch_due(),
                _deliver(seconds[0]),
                _deliver(seconds[2]),
                _operator(kids[1], "resume"),
                _operator(kids[3], "pause"),
            ],
        )
        geneva.dispatch_due()
        db.session.remove()
        _drain_together(app, geneva_jobs)
        geneva.dispatch_due()
        db.session.remove()
        _drain_together(app, geneva_jobs)
        rows = children_rows(parent_id)
        assert {row["state"] for row in rows} <= {"canceled", "finished"}, [
            (row["id"], row["state"]) for row in rows
        ]
        started, settled, failed = assert_counts_exact(parent_id)
        assert (started, settled) == (4, 4)
        assert failed == sum(row["state"] == "canceled" for row in rows)
        assert counts_row(parent_id)["cancel_due_at"] is None
        assert COLLECTS[parent_id] == 0


@pytest.mark.timeout(300)
def test_parent_and_children_sharing_a_limit_key(app, geneva_jobs):
    """R-CHD-40, R-LIM-30: the parent's steps and its children's hold one
    concurrency-1 key; the parent waits for any child. Everything delivered
    at once, round after round: no deadlock reaches a worker, the parent
    collects once, the counts are exact."""
    for round_number in range(ROUNDS):
        parent_id, collect_id = _parent(
            SharedParent, f"shared{round_number}", 3, geneva_jobs
        )
        firsts = first_executions(parent_id)
        geneva_jobs.clear()
        run_together(app, [_deliver(collect_id), *[_deliver(e) for e in firsts]])
        _drain_together(app, geneva_jobs)
        for _ in range(3):
            geneva.dispatch_due()
            db.session.remove()
            _drain_together(app, geneva_jobs)
        assert workflow_row(parent_id)["state"] == "finished"
        assert COLLECTS[parent_id] == 1
        assert assert_counts_exact(parent_id) == (3, 3, 0)
        assert {row["state"] for row in children_rows(parent_id)} == {"finished"}


def test_counts_helper_reads_nothing_before_children(app):
    """The helper itself: no row, (0, 0, 0)."""
    assert counts(-1) == (0, 0, 0)
