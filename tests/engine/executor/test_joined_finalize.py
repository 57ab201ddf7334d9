"""One commit per step: finalize commits the body's writes with the outcome (R-EXE-82).

A body that returns without committing the session leaves its writes to
finalize, whose first attempt runs in the body's transaction: the writes and
the recorded outcome commit together, in one commit. A body that commits (or
rolls back) the session itself keeps the separate commit of R-EXE-38. An
operator's pause committed while the step ran still wins (R-EXE-42), with the
body's writes committed; an operator pausing in another thread while
finalize runs (a real race, real connections) leaves a consistent history
whoever wins. A joined attempt that fails rolls the body's writes back with
it, and the failure is the step's captured exception.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from flask import current_app

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import hero_counter
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row

#: What the steps of the classes below do besides writing, set per test.
BEFORE_WRITE: list[Any] = []
AFTER_WRITE: list[Any] = []


def _count_up(workflow: Any) -> None:
    """Increment the hero's counter through the session, without committing."""
    hero = db.session.get(User, workflow.hero_id, populate_existing=True)
    hero.counter = hero.counter + 1


class WritingChain(geneva.Workflow):
    """Three steps, each incrementing its hero's counter."""

    @step
    def first(self):
        for action in BEFORE_WRITE:
            action(self)
        _count_up(self)
        for action in AFTER_WRITE:
            action(self)

    @step
    def second(self):
        _count_up(self)

    @step
    def third(self):
        _count_up(self)


@contextmanager
def counted_commits() -> Iterator[list[int]]:
    """Count the COMMITs the app's engine sends in the block."""
    commits = [0]

    def count(_connection: Any) -> None:
        commits[0] += 1

    sa.event.listen(db.engine, "commit", count)
    try:
        yield commits
    finally:
        sa.event.remove(db.engine, "commit", count)


def _start(user, geneva_jobs):
    """``(workflow id, first execution id, hero id)`` of a new WritingChain."""
    BEFORE_WRITE.clear()
    AFTER_WRITE.clear()
    user_id = user.id
    return (*start_without_jobs(WritingChain, user, geneva_jobs), user_id)


@pytest.mark.backends("mysql")
def test_on_mariadb_a_delivered_step_keeps_the_separate_commit(app, user, geneva_jobs):
    """No joined finalize on MySQL/MariaDB: claim, body, finalize (R-EXE-82)."""
    _workflow_id, first_id, user_id = _start(user, geneva_jobs)
    with counted_commits() as commits:
        Executor.execute(first_id)
    assert commits == [3]
    assert hero_counter(user_id) == 1


@pytest.mark.backends("sqlite", "postgresql")
def test_a_delivered_step_commits_its_writes_with_its_outcome(app, user, geneva_jobs):
    """The claim's commit and one more: the body's writes and the outcome (R-EXE-82)."""
    workflow_id, first_id, user_id = _start(user, geneva_jobs)
    with counted_commits() as commits:
        Executor.execute(first_id)
    assert commits == [2]
    assert hero_counter(user_id) == 1
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]


@pytest.mark.backends("sqlite", "postgresql")
def test_a_continued_chain_commits_once_per_step(app, user, geneva_jobs):
    """Inline continuation: the claim, then one commit per step (R-EXE-82, R-EXE-70)."""
    workflow_id, first_id, user_id = _start(user, geneva_jobs)
    with counted_commits() as commits:
        perform_step_execution(first_id)
    assert commits == [1 + 3]
    assert hero_counter(user_id) == 3
    assert workflow_row(workflow_id)["state"] == "finished"


def test_a_body_that_commits_keeps_the_separate_commit(app, user, geneva_jobs):
    """A body that committed writes again afterwards: those are committed before
    finalize, as R-EXE-38 says, not joined (R-EXE-82)."""
    workflow_id, first_id, user_id = _start(user, geneva_jobs)

    def commit_and_write_again(workflow):
        db.session.commit()
        db.session.get(User, workflow.hero_id).email = "again@example.com"

    AFTER_WRITE.append(commit_and_write_again)
    with counted_commits() as commits:
        Executor.execute(first_id)
    # The claim, the body's own, the body's remaining writes, finalize.
    assert commits == [4]
    assert hero_counter(user_id) == 1
    with db.engine.connect() as connection:
        email = connection.scalar(
            sa.select(User.__table__.c.email).where(User.__table__.c.id == user_id)
        )
    assert email == "again@example.com"
    assert execution_history(workflow_id)[0] == ("first", "completed", "success")


def test_a_body_that_rolls_back_keeps_the_separate_commit(app, user, geneva_jobs):
    """A body that rolled the session back ended its transaction itself: what it
    writes afterwards is committed before finalize, not joined (R-EXE-82, R-EXE-38)."""
    workflow_id, first_id, user_id = _start(user, geneva_jobs)

    def roll_back_and_write_again(workflow):
        db.session.rollback()  # the increment is gone
        _count_up(workflow)

    AFTER_WRITE.append(roll_back_and_write_again)
    with counted_commits() as commits:
        Executor.execute(first_id)
    assert commits == [3]  # the claim, the body's writes, finalize
    assert hero_counter(user_id) == 1
    assert execution_history(workflow_id)[0] == ("first", "completed", "success")


class HookedChain(WritingChain):
    """An ``after_step_execution`` hook: user code between body and finalize."""

    def after_step_execution(self, execution):
        HookedChain.seen.append(execution.step_name)

    seen: list[str] = []


def test_an_after_hook_keeps_the_separate_commit(app, user, geneva_jobs):
    """With ``after_step_execution`` overridden the body's writes are committed
    before the hook runs, as before (R-EXE-82, R-EXE-36/38)."""
    BEFORE_WRITE.clear()
    AFTER_WRITE.clear()
    HookedChain.seen.clear()
    user_id = user.id
    workflow_id, first_id = start_without_jobs(HookedChain, user, geneva_jobs)
    with counted_commits() as commits:
        Executor.execute(first_id)
    # The claim, the body's writes, the hook's read (the commit expired the
    # execution it reads), finalize.
    assert commits == [4]
    assert HookedChain.seen == ["first"]
    assert hero_counter(user_id) == 1
    assert execution_history(workflow_id)[0] == ("first", "completed", "success")


def test_a_pause_committed_during_the_body_wins_and_keeps_the_writes(
    app, user, geneva_jobs
):
    """An operator paused the workflow while the body ran: the lock in the body's
    transaction sees it; the step is completed with its writes, the next step
    preserved (R-EXE-82, R-EXE-42a)."""
    workflow_id, first_id, user_id = _start(user, geneva_jobs)
    # Before the body's write: on SQLite the write holds the database's lock.
    BEFORE_WRITE.append(lambda workflow: externally(workflow.id, "pause"))
    with counted_commits() as commits:
        perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "paused"
    assert hero_counter(user_id) == 1
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]
    assert geneva_jobs.enqueued == []
    # The claim, the operator's pause, the step's one commit (on MySQL/MariaDB,
    # where finalize does not join, the body's own commit too).
    joins = db.engine.dialect.name != "mysql"
    assert commits == [3 if joins else 4]


def test_a_failed_joined_commit_rolls_the_writes_back(app, user, geneva_jobs):
    """A write the database refuses fails the joined attempt: the body's other
    writes are rolled back with it and the failure is the step's captured
    exception, recorded by its policy (R-EXE-82, R-EXE-38)."""
    workflow_id, first_id, user_id = _start(user, geneva_jobs)

    def break_the_hero(workflow):
        db.session.get(User, workflow.hero_id).email = None  # NOT NULL

    AFTER_WRITE.append(break_the_hero)
    # Re-raised after its policy was committed (R-EXE-50).
    with pytest.raises(sa.exc.IntegrityError):
        Executor.execute(first_id)
    assert hero_counter(user_id) == 0
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [("first", "failed")]
    assert "IntegrityError" in rows[0]["error_class_name"]
    assert workflow_row(workflow_id)["state"] == "paused"


class RacedChain(geneva.Workflow):
    """A pause races the first step's finalize; the second waits for the pause."""

    pausing: dict[Any, threading.Thread] = {}
    errors: list[BaseException] = []

    @step
    def first(self):
        _count_up(self)
        app = current_app._get_current_object()
        workflow_id = self.id

        def pause() -> None:
            with app.app_context():
                try:
                    geneva.Workflow.get(workflow_id).pause()
                except BaseException as error:  # noqa: BLE001 - checked by the test
                    RacedChain.errors.append(error)
                finally:
                    db.session.remove()

        thread = threading.Thread(target=pause)
        RacedChain.pausing[workflow_id] = thread
        thread.start()  # not joined: it runs while finalize does

    @step
    def second(self):
        # No transaction is open here: the pause can take its locks.
        RacedChain.pausing[self.id].join(30)
        _count_up(self)

    @step
    def third(self):
        _count_up(self)


def test_an_operator_pause_racing_the_joined_finalize(app, user, geneva_jobs):
    """Pause and finalize race on real connections: whoever wins, the workflow
    ends paused, each completed step's write is committed exactly once, one
    step is preserved for ``resume()`` and none is left in progress (R-EXE-82,
    R-EXE-42, R-EXT-02)."""
    RacedChain.errors.clear()
    outcomes = set()
    for round_number in range(6):
        hero = User(email=f"race{round_number}@example.com")
        db.session.add(hero)
        db.session.commit()
        hero_id = hero.id
        workflow_id, first_id = start_without_jobs(RacedChain, hero, geneva_jobs)
        perform_step_execution(first_id)
        RacedChain.pausing.pop(workflow_id).join(30)
        assert RacedChain.errors == []
        history = execution_history(workflow_id)
        completed = [name for name, state, _ in history if state == "completed"]
        assert workflow_row(workflow_id)["state"] == "paused"
        assert hero_counter(hero_id) == len(completed)
        assert [state for _, state, _ in history] == ["completed"] * len(completed) + [
            "scheduled"
        ]
        assert completed in (["first"], ["first", "second"])
        outcomes.add(len(completed))
        geneva_jobs.clear()
        db.session.remove()
    # Which side won varies with the machine's timing; both are consistent.
    assert outcomes <= {1, 2}
