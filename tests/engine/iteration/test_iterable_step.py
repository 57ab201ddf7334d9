"""The ``it`` object: cursor changes, atomic checkpoints, interruption (R-IT, R-INT)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

import flask_geneva
from flask_geneva import Executor
from flask_geneva import InvalidStateError
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.engine.iteration import clear_worker_exit
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

NOTES: list[object] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    NOTES.clear()


class Advances(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        NOTES.append((it.cursor, it.resumed, it.advanced, it.iterations))
        it.set(0)
        it.advance()
        it.advance()
        NOTES.append(it.to_tuple())
        NOTES.append(it.description)
        NOTES.append((it.advanced, it.iterations))


def test_set_and_advance_checkpoint_each_time(user, geneva_jobs):
    """set() and advance() change the cursor and count checkpoints (R-IT-01..04, R-IT-06)."""
    workflow = Advances.create(hero=user)
    perform_next_step(workflow)
    assert NOTES == [
        (None, False, False, 0),
        ("walk", 2),
        "at 'walk', cursor 2",
        (True, 3),
    ]
    (row,) = execution_rows(workflow.id)
    assert (row["outcome"], row["cursor"]) == ("success", 2)


class AdvancesFromNone(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        it.advance()


def test_advance_needs_an_int_cursor(user, geneva_jobs):
    """advance() on a None cursor raises TypeError showing the cursor (R-IT-03)."""
    workflow = AdvancesFromNone.create(hero=user)
    with pytest.raises(TypeError, match="got None"):
        perform_next_step(workflow)
    assert workflow_row(workflow.id)["state"] == "paused"


class AtomicItems(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            self.hero.counter += item
            if item == 3:
                raise RuntimeError("item 3 failed after writing")


def test_checkpoint_commits_item_writes_with_the_cursor(user, geneva_jobs):
    """Checkpointed items' writes persist with the cursor; the failed item's write is rolled back (R-IT-10, R-EXE-38, BTR-07)."""
    workflow = AtomicItems.create(hero=user)
    with pytest.raises(RuntimeError, match="item 3"):
        perform_next_step(workflow)
    (row,) = execution_rows(workflow.id)
    assert (row["state"], row["cursor"]) == ("failed", 2)
    assert hero_counter(user.id) == 3


class NestedCheckpoint(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        with db.session.begin_nested():
            it.set(1)


def test_checkpoint_inside_a_savepoint_raises(user, geneva_jobs):
    """checkpoint() inside begin_nested() raises InvalidStateError (R-IT-10)."""
    workflow = NestedCheckpoint.create(hero=user)
    with pytest.raises(InvalidStateError, match="nested transaction"):
        perform_next_step(workflow)
    (row,) = execution_rows(workflow.id)
    assert (row["state"], row["cursor"]) == ("failed", None)


class Empty(geneva.Workflow):
    @resumable_step(max_iterations=1)
    def walk(self, it):
        for _ in it.iterate_over([]):
            NOTES.append("item")
        for _ in it.iterate_over_records(sa.select(User).where(User.email == "nobody")):
            NOTES.append("row")
        for _ in it.iterate_over_batches(
            sa.select(User).where(User.email == "nobody"), batch_size=10
        ):
            NOTES.append("batch")
        NOTES.append(it.iterations)


def test_empty_collections_complete_at_once(user, geneva_jobs):
    """Empty collections complete with zero iterations and an unchanged cursor (R-IT-24)."""
    workflow = Empty.create(hero=user)
    perform_next_step(workflow)
    assert NOTES == [0]
    (row,) = execution_rows(workflow.id)
    assert (row["outcome"], row["cursor"]) == ("success", None)


class NotIterable(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for _ in it.iterate_over(42):
            pass


def test_iterate_over_rejects_non_iterables(user, geneva_jobs):
    """iterate_over() of a non-iterable raises TypeError (R-IT-20)."""
    workflow = NotIterable.create(hero=user)
    with pytest.raises(TypeError, match="int"):
        perform_next_step(workflow)


class BreaksEarly(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over(["a", "b", "c"]):
            NOTES.append(item)
            if item == "b" and not it.resumed:
                break
        if not it.resumed:
            it.skip_to(it.cursor)


def test_break_does_not_checkpoint_the_current_item(user, geneva_jobs):
    """A break leaves the current item unchecked-in, so it runs again (R-IT-20, R-RES-38)."""
    workflow = BreaksEarly.create(hero=user)
    speedrun_workflow(workflow)
    assert NOTES == ["a", "b", "b", "c"]
    assert [r["cursor"] for r in execution_rows(workflow.id)] == [1, 3]


class Batches(geneva.Workflow):
    @resumable_step(max_iterations=2)
    def walk(self, it):
        for batch in it.iterate_over_batches(
            sa.select(User).where(User.email.like("batch-%")), batch_size=3
        ):
            NOTES.append(len(db.session.scalars(batch.select).all()))
            db.session.execute(
                sa.update(User).where(batch.where).values(counter=User.counter + 1)
            )


def test_batches_are_usable_in_bulk_updates(user, geneva_jobs):
    """Each Batch has ids, a select and a where usable in update(); cursor = last id (R-IT-23)."""
    rows = [User(email=f"batch-{i}") for i in range(7)]
    db.session.add_all(rows)
    db.session.commit()
    ids = [r.id for r in rows]
    workflow = Batches.create(hero=user)
    first = run_iterations(workflow, 2)
    assert first.cursor_value == ids[5]
    speedrun_workflow(workflow)
    assert NOTES == [3, 3, 1]
    assert {hero_counter(i) for i in ids} == {1}
    assert hero_counter(user.id) == 0


class Interrupts(geneva.Workflow):
    @resumable_step(max_runtime=timedelta(microseconds=1))
    def slow(self, it):
        for item in it.iterate_over([1, 2]):
            NOTES.append(item)

    @resumable_step
    def asks_to_exit(self, it):
        for item in it.iterate_over([1, 2]):
            NOTES.append(item)
            flask_geneva.request_exit()

    @resumable_step
    def worker_exit(self, it):
        for item in it.iterate_over([1, 2]):
            NOTES.append(item)
            flask_geneva.request_worker_exit()


@pytest.mark.parametrize(
    ("step_name", "reason"),
    [
        ("slow", "max_runtime"),
        ("asks_to_exit", "worker_shutdown"),
        ("worker_exit", "worker_shutdown"),
    ],
)
def test_interruption_reasons_are_recorded(user, geneva_jobs, step_name, reason):
    """max_runtime and exit requests interrupt at the checkpoint, recorded in metadata (R-INT-01, R-INT-03, R-PDR-03)."""
    from flask_geneva.testing import perform_step_inline

    workflow = Interrupts.create(hero=user)
    try:
        execution = perform_step_inline(workflow, step_name)
    finally:
        clear_worker_exit()
    assert (execution.state, execution.outcome) == ("completed", "continued")
    record = execution.read_metadata("interrupt")
    assert record["reason"] == reason
    assert record["iterations"] == 1
    assert record["runtime_seconds"] >= 0
    assert NOTES == [1]
    assert execution.successor.cursor_value == 1


def test_max_iterations_interrupt_is_recorded(user, geneva_jobs):
    """A max_iterations interruption records reason and iterations (R-PDR-03, R-INT-02)."""
    workflow = Batches.create(hero=user)
    db.session.add_all([User(email=f"batch-{i}") for i in range(9)])
    db.session.commit()
    execution = run_iterations(workflow, 2)
    assert execution.read_metadata("interrupt")["reason"] == "max_iterations"
    assert execution.read_metadata("interrupt")["iterations"] == 2


def test_non_interruptible_runs_ignore_exit_requests(user, geneva_jobs):
    """With interruptible=False a checkpoint never interrupts (R-INT-01)."""
    workflow = Interrupts.create(hero=user)
    flask_geneva.request_worker_exit()
    try:
        speedrun_workflow(workflow)
    finally:
        clear_worker_exit()
    assert [r["outcome"] for r in execution_rows(workflow.id)] == ["success"] * 3
    assert NOTES == [1, 2] * 3


class SeesItsIt(geneva.Workflow):
    @resumable_step(name="deliveries", max_iterations=1)
    def walk(self, it):
        NOTES.append((it.name, it.cursor, it.resumed))
        for _letter in it.iterate_over(["a", "b"]):
            pass


def test_the_body_gets_name_stored_cursor_and_resumed(user, geneva_jobs):
    """``it`` carries the step name, the execution's stored cursor (None at first)
    and whether it continues an earlier execution; the executor interrupts it
    (R-RES-03).
    """
    workflow = SeesItsIt.create(hero=user)
    for _ in range(3):
        perform_next_step(workflow)
    assert NOTES == [
        ("deliveries", None, False),
        ("deliveries", 1, True),
        ("deliveries", 2, True),
    ]
    rows = execution_rows(workflow.id)
    assert [(r["outcome"], r["cursor"]) for r in rows] == [
        ("continued", 1),
        ("continued", 2),
        ("success", 2),
    ]


class NeverCheckpoints(geneva.Workflow):
    """Every interruption condition holds while its body runs; it never checkpoints."""

    @resumable_step(max_iterations=1, max_runtime=timedelta(milliseconds=1))
    def walk(self, it):
        flask_geneva.request_exit()
        update_workflow(self.id, state="paused")
        time.sleep(0.01)
        NOTES.append(("ran to the end", it.iterations))

    @step
    def after(self):
        pass


def test_a_body_that_never_checkpoints_is_never_interrupted(user, geneva_jobs):
    """Past max_runtime, with an exit request and the workflow paused, a body without
    checkpoints runs to its end: completed/success, not workflow_paused (R-INT-06).
    """
    workflow = NeverCheckpoints.create(hero=user)
    execution_id = workflow.current_execution.id
    try:
        Executor.execute(execution_id)
    finally:
        clear_worker_exit()
    assert NOTES == [("ran to the end", 0)]
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    # The operator's pause wins for what comes next (R-EXE-42).
    assert workflow_row(workflow.id)["state"] == "paused"


class WatchesItself(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2]):
            NOTES.append(self.allow_multiple)
            if item == 1:
                update_workflow(self.id, allow_multiple=True)

    @step
    def after(self):
        pass


def test_interruption_check_does_not_refresh_the_workflow(user, geneva_jobs):
    """The state check is a separate query; the body's workflow object is not reloaded (R-INT-05)."""
    workflow = WatchesItself.create(hero=user)
    perform_next_step(workflow)
    assert NOTES == [False, False]
    assert execution_rows(workflow.id)[0]["outcome"] == "success"
