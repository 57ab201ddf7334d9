"""The child counts row is the leaf of the lock order (SPEC §25, R-CHD-40).

Every transaction locks the parent's counts row after the workflow, execution
and limit key rows it locks, and nothing after it. Each test here holds one
transaction at the point where the order matters, lets another one block on
the lock it holds, then lets the first one go on: with the leaf rule the
second one simply waits; without it the two deadlock and one of them fails
(a traceback in a step, or an operator's 500). PostgreSQL and MariaDB.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children.support import assert_counts_exact
from tests.engine.children.support import children_rows
from tests.engine.children.support import counts_row
from tests.engine.children.support import heroes
from tests.engine.children.support import heroes_named
from tests.support.innodb_locks import run_in_thread
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

WAIT_SECONDS = 30
PREFIX = ["none"]
#: Set by the parent's body once its children are started; it then waits for GO.
STARTED = threading.Event()
GO = threading.Event()


class OrderLeaf(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def work(self):
        pass


def _start_then_write(workflow: Any) -> None:
    workflow.start_children(OrderLeaf, heroes_named(PREFIX[0]))
    STARTED.set()
    assert GO.wait(WAIT_SECONDS), "the test never let the body go on"
    workflow.set_result("started")


class StartsThenWrites(geneva.Workflow):
    """Starts children, then writes its own row (its result) in the same body."""

    @step
    def fan_out(self):
        _start_then_write(self)

    @step(wait_for_children=True)
    def collect(self):
        pass


class SeedsThenStarts(geneva.Workflow):
    """As StartsThenWrites, after a first step that started one child: the
    counts row exists when the second step starts more."""

    @step
    def seed(self):
        self.start_child(OrderLeaf, hero=None, key="seed")

    @step
    def fan_out(self):
        _start_then_write(self)

    @step(wait_for_children=True)
    def collect(self):
        pass


@pytest.fixture(autouse=True)
def _servers_only(app: Any) -> None:
    if db.engine.dialect.name == "sqlite":
        pytest.skip("SQLite's single writer serializes the transactions")
    STARTED.clear()
    GO.clear()


def wait_until_blocked_or_done(app: Any, thread: threading.Thread) -> None:
    """Poll until a transaction on this test's database waits for a row lock,
    or ``thread`` ended (its transaction waited for nothing)."""
    if db.engine.dialect.name == "postgresql":
        query = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = "
            "current_database() AND wait_event_type = 'Lock'"
        )
    else:
        query = sa.text(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX t "
            "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
            "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
        )
    done = threading.Event()
    timer = threading.Timer(WAIT_SECONDS, done.set)
    timer.start()
    try:
        with app.app_context(), db.engine.connect() as probe:
            while not done.is_set():
                if not thread.is_alive() or probe.execute(query).scalar_one() >= 1:
                    return
                probe.rollback()
                done.wait(0.1)
    finally:
        timer.cancel()
    raise AssertionError("the other transaction neither waited nor ended")


def _in_app(app: Any, action: Any) -> Any:
    def run() -> None:
        with app.app_context():
            try:
                action()
            finally:
                db.session.remove()

    return run_in_thread(run)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("workflow_cls", "seeded"),
    [(StartsThenWrites, 0), (SeedsThenStarts, 1)],
    ids=["first_children", "more_children"],
)
def test_a_body_writing_its_row_after_starting_children_racing_a_cancel(
    app, geneva_jobs, workflow_cls, seeded, caplog
):
    """R-CHD-40, R-CHD-31: the parent's body has started its children and then
    sets its result, while an operator cancels the parent. The cancel (parent
    row, then the counts row at commit) waits for the body or the body for the
    cancel, never both: the cancel is done, the body's writes commit, the
    cancel's cascade is due and the counts are exact."""
    PREFIX[0] = "order-cancel"
    [hero, *_] = heroes("order-cancel", 2)
    parent = workflow_cls.create(hero=hero)
    parent_id, first_id = parent.id, parent.current_execution.id
    db.session.commit()
    db.session.remove()
    geneva_jobs.clear()
    if seeded:
        perform_step_execution(first_id, continue_inline=False)
        first_id = execution_rows(parent_id)[-1]["id"]
        db.session.remove()

    body, body_errors = _in_app(
        app, lambda: perform_step_execution(first_id, continue_inline=False)
    )
    assert STARTED.wait(WAIT_SECONDS)
    operator, operator_errors = _in_app(
        app, lambda: geneva.Workflow.get(parent_id).cancel()
    )
    try:
        wait_until_blocked_or_done(app, operator)
    finally:
        GO.set()
        body.join(60)
        operator.join(60)
    victims = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    assert victims == []
    assert body_errors == []
    assert operator_errors == [], [f"{type(e).__name__}: {e}" for e in operator_errors]
    assert workflow_row(parent_id)["state"] == "canceled"
    failures = [
        row["error_message"]
        for row in execution_rows(parent_id)
        if row["error_message"] is not None
    ]
    assert failures == []
    started = 2 + seeded
    assert len(children_rows(parent_id)) == started
    assert assert_counts_exact(parent_id) == (started, 0, 0)
    assert counts_row(parent_id)["cancel_due_at"] is not None
    geneva.dispatch_due()
    db.session.remove()
    assert assert_counts_exact(parent_id) == (started, started, started)
    assert counts_row(parent_id)["cancel_due_at"] is None
