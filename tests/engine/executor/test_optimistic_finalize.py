"""Finalize without the locking read, guarded by what the claim committed (R-EXE-81).

On PostgreSQL a Celery task's finalize of a body that returned sends no
locking read: the merged statement (R-EXE-79) is guarded by both rows'
state and ``updated_at`` at the claim and, for an inline claim, by the hero's
``EXISTS``. Here another session changes a row between the claim and finalize
(from the body, through another thread: a real second connection that
commits); the guard fails, finalize rolls back and takes the locked path,
and every case ends exactly as the locked path alone ends it (the ``locked``
parameter turns the optimistic attempt off to show that): the body never runs
again, the operator's state wins (R-EXE-41/42), and a next step whose hero is
gone is published, not claimed (R-EXE-73). On SQLite and MariaDB finalize
always locks; the outcomes are the same.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import InvalidStateError
from flask_geneva import step
from flask_geneva.engine.executor import finalize
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import recorded_statements
from tests.support.step_bodies import recording_steps
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import in_other_thread
from tests.support.workflow import start_without_jobs
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row

#: Step names of every body run, in order.
RUNS: list[str] = []
#: Called (in the first step's body) with no argument: the concurrent change.
MEANWHILE: list[Any] = []

GUARDED = "WITH geneva_workflow_update"


class OptimisticChain(geneva.Workflow):
    """Three steps; the first lets another session change the rows meanwhile."""

    @step
    def first(self):
        RUNS.append("first")
        for change in MEANWHILE:
            change()

    _rest = recording_steps(RUNS, "second", "third")


@pytest.fixture(autouse=True)
def _clean():
    RUNS.clear()
    MEANWHILE.clear()
    yield
    RUNS.clear()
    MEANWHILE.clear()


@pytest.fixture(params=["optimistic", "locked"])
def finalize_mode(request, monkeypatch):
    """``locked`` turns the optimistic attempt off: the outcome to compare with."""
    if request.param == "locked":
        monkeypatch.setattr(finalize, "_finalize_optimistically", lambda *args: None)
    return request.param


def _run(user, geneva_jobs, change=None, *, continue_inline=True):
    """Run the chain in one task, ``change(workflow id, first id)`` during ``first``.

    ``continue_inline=False`` runs ``first`` alone, one step per delivery.
    """
    workflow_id, first_id = start_without_jobs(OptimisticChain, user, geneva_jobs)
    if change is not None:
        MEANWHILE.append(lambda: change(workflow_id, first_id))
    with recorded_statements() as statements:
        perform_step_execution(first_id, continue_inline=continue_inline)
    return workflow_id, first_id, statements


def _assert_fell_back(statements, mode):
    """On PostgreSQL: the first finalize sent the guarded statement, then locked."""
    if mode == "locked" or db.engine.dialect.name != "postgresql":
        return
    guarded = [i for i, s in enumerate(statements) if s.startswith(GUARDED)]
    assert guarded, "the optimistic finalize sent no guarded statement"
    after = statements[guarded[0] + 1 :]
    assert any("FOR UPDATE" in s and "geneva_drive_workflows" in s for s in after)


def test_an_operator_pause_wins(app, user, geneva_jobs, finalize_mode):
    """Paused meanwhile: the step is recorded completed, the next preserved (R-EXE-42a, R-EXE-81)."""
    workflow_id, _, statements = _run(
        user, geneva_jobs, lambda wid, eid: externally(wid, "pause")
    )
    assert RUNS == ["first"]
    assert workflow_row(workflow_id)["state"] == "paused"
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]
    assert geneva_jobs.enqueued == []
    _assert_fell_back(statements, finalize_mode)


def test_an_operator_cancel_wins(app, user, geneva_jobs, finalize_mode):
    """Canceled meanwhile: the step is recorded completed, nothing follows (R-EXE-42a, R-EXE-81)."""
    workflow_id, _, statements = _run(
        user, geneva_jobs, lambda wid, eid: externally(wid, "cancel")
    )
    assert RUNS == ["first"]
    assert workflow_row(workflow_id)["state"] == "canceled"
    assert execution_history(workflow_id) == [("first", "completed", "success")]
    assert geneva_jobs.enqueued == []
    _assert_fell_back(statements, finalize_mode)


def test_a_withdrawn_pause_is_seen_and_the_chain_goes_on(
    app, user, geneva_jobs, finalize_mode
):
    """Paused and resumed meanwhile: ``performing`` again, but not the row the
    claim left; the locked path finalizes normally (R-EXT-26, R-EXE-81)."""

    def pause_and_resume(wid, eid):
        externally(wid, "pause")
        externally(wid, "resume")

    workflow_id, _, statements = _run(user, geneva_jobs, pause_and_resume)
    assert RUNS == ["first", "second", "third"]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [s[1] for s in execution_history(workflow_id)] == ["completed"] * 3
    assert geneva_jobs.enqueued == []
    _assert_fell_back(statements, finalize_mode)


def test_a_hero_deleted_meanwhile_ends_the_chain(app, user, geneva_jobs, finalize_mode):
    """The guard's EXISTS fails: the next step is published, not claimed (R-EXE-73, R-EXE-81)."""

    user_id = user.id

    def delete_hero(wid, eid):
        def action():
            db.session.execute(sa.delete(User).where(User.id == user_id))
            db.session.commit()

        in_other_thread(action)

    workflow_id, _, statements = _run(user, geneva_jobs, delete_hero)
    assert RUNS == ["first"]
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [rows[1]["id"]]
    assert workflow_row(workflow_id)["state"] == "ready"
    _assert_fell_back(statements, finalize_mode)


def test_an_execution_changed_meanwhile_is_left(app, user, geneva_jobs, finalize_mode):
    """The execution is no longer in_progress: finalize changes nothing (R-EXE-41, R-EXE-81)."""

    def fail_it(wid, eid):
        in_other_thread(lambda: update_execution(eid, state="failed", outcome="failed"))

    workflow_id, _, statements = _run(user, geneva_jobs, fail_it)
    assert RUNS == ["first"]
    assert execution_history(workflow_id) == [("first", "failed", "failed")]
    row = workflow_row(workflow_id)
    assert row["state"] == "performing"
    assert row["current_step_name"] == "first"
    assert geneva_jobs.enqueued == []
    _assert_fell_back(statements, finalize_mode)


def test_a_released_worker_id_is_harmless(app, user, geneva_jobs, finalize_mode):
    """A heartbeat's release (``worker_id`` = NULL, state kept) sets ``updated_at``:
    the guard fails and the locked path finalizes normally (R-WRK-18, R-EXE-81)."""

    def release(wid, eid):
        in_other_thread(lambda: update_execution(eid, worker_id=None))

    workflow_id, _, statements = _run(user, geneva_jobs, release)
    assert RUNS == ["first", "second", "third"]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [s[1] for s in execution_history(workflow_id)] == ["completed"] * 3
    _assert_fell_back(statements, finalize_mode)


@pytest.mark.backends("postgresql")
def test_the_guarded_statement_locks_the_workflow_first(app, user, geneva_jobs):
    """An operator holds the workflow row: the waiting statement holds no execution lock (R-EXE-81, SPEC §7).

    The holder then pauses the workflow and commits; the guard fails on the
    row it waited for, and the locked path records the step completed under
    the operator's pause (R-EXE-42a).
    """
    engine = db.engine
    workflows = geneva.Workflow.__table__
    executions = geneva.StepExecution.__table__
    seen: dict[str, Any] = {}
    locked = threading.Event()

    def holder(workflow_id, execution_id):
        with engine.connect() as first:
            first.execute(
                sa.select(workflows.c.id)
                .where(workflows.c.id == workflow_id)
                .with_for_update()
            )
            locked.set()
            deadline = time.monotonic() + 10
            waiting = 0
            while time.monotonic() < deadline and not waiting:
                with engine.connect() as probe:
                    waiting = probe.scalar(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity WHERE "
                            "wait_event_type = 'Lock' AND query LIKE :guarded"
                        ),
                        {"guarded": GUARDED + "%"},
                    )
                time.sleep(0.02)
            seen["waiting"] = waiting
            with engine.connect() as second:
                try:
                    second.execute(
                        sa.select(executions.c.id)
                        .where(executions.c.id == execution_id)
                        .with_for_update(nowait=True)
                    )
                    seen["execution_free"] = True
                except sa.exc.OperationalError:
                    seen["execution_free"] = False
                second.rollback()
            first.execute(
                sa.update(workflows)
                .where(workflows.c.id == workflow_id)
                .values(state="paused")
            )
            first.commit()

    threads: list[threading.Thread] = []

    def start_holder(wid, eid):
        thread = threading.Thread(target=holder, args=(wid, eid))
        threads.append(thread)
        thread.start()
        assert locked.wait(10)

    workflow_id, _, _ = _run(user, geneva_jobs, start_holder)
    for thread in threads:
        thread.join(20)
    assert seen == {"waiting": 1, "execution_free": True}
    assert RUNS == ["first"]
    assert workflow_row(workflow_id)["state"] == "paused"
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]


class OptimisticNoted(geneva.Workflow):
    """Another session writes the first execution's ``error_message`` with raw
    SQL that leaves ``updated_at`` as it was: the guard holds."""

    held: list[Any] = []  # the executions the hooks saw
    seen: list[Any] = []  # what the second step reads of the first execution

    def before_step_execution(self, execution):
        OptimisticNoted.held.append(execution)

    @step
    def first(self):
        execution_id = OptimisticNoted.held[0].id

        def action():
            db.session.execute(
                sa.text(
                    "UPDATE geneva_drive_step_executions "
                    "SET error_message = 'written meanwhile' WHERE id = :id"
                ),
                {"id": execution_id},
            )
            db.session.commit()

        in_other_thread(action)

    @step
    def second(self):
        OptimisticNoted.seen.append(OptimisticNoted.held[0].error_message)


def test_the_optimistic_finalize_expires_what_the_lock_would_not_read(
    app, user, geneva_jobs
):
    """No locking read, yet the finished execution's other columns are read
    from the row, not the claim's values (R-EXE-48, R-EXE-81)."""
    OptimisticNoted.held.clear()
    OptimisticNoted.seen.clear()
    workflow_id, first_id = start_without_jobs(OptimisticNoted, user, geneva_jobs)
    with recorded_statements() as statements:
        perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert OptimisticNoted.seen == ["written meanwhile"]
    if db.engine.dialect.name == "postgresql":
        # The first finalize took the optimistic path: its guard held.
        guarded = [i for i, s in enumerate(statements) if s.startswith(GUARDED)]
        assert guarded
        claim_and_last = [s for s in statements if "FOR UPDATE" in s]
        assert len(claim_and_last) == 2


@pytest.mark.backends("postgresql")
def test_a_refusal_before_any_statement_takes_the_locked_path(
    app, user, geneva_jobs, monkeypatch
):
    """Pending writes that would not go out as the one guarded statement are
    refused before anything is sent; the locked path finalizes (R-EXE-81)."""
    from flask_geneva.db import row_updates

    monkeypatch.setattr(row_updates, "merges_with_insert", lambda *args: False)
    workflow_id, _, statements = _run(user, geneva_jobs, lambda wid, eid: None)
    assert RUNS == ["first", "second", "third"]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [s[1:] for s in execution_history(workflow_id)] == [
        ("completed", "success")
    ] * 3
    assert not [s for s in statements if s.startswith(GUARDED)]
    # Every finalize locked: the claim's lock and three finalizes.
    assert sum("FOR UPDATE" in s for s in statements) == 4


def test_a_refused_skip_changes_nothing_and_costs_no_lock(
    app, user, geneva_jobs, finalize_mode
):
    """``skip()`` refuses while the step runs and writes nothing: the guard
    holds and finalize sends no locking read (R-EXT-26, R-EXE-81)."""
    refused: list[Any] = []

    def try_skip(wid, eid):
        try:
            externally(wid, "skip")
        except InvalidStateError as error:
            refused.append(error)

    workflow_id, _, statements = _run(user, geneva_jobs, try_skip)
    assert len(refused) == 1
    assert RUNS == ["first", "second", "third"]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [s[1:] for s in execution_history(workflow_id)] == [
        ("completed", "success")
    ] * 3
    if finalize_mode == "optimistic" and db.engine.dialect.name == "postgresql":
        assert sum(s.startswith(GUARDED) for s in statements) == 2
        # The claim's lock and the last finalize's, none for the raced step.
        assert (
            sum(
                "FOR UPDATE" in s and "geneva_drive_step_executions" in s
                for s in statements
                if "JOIN" in s
            )
            == 2
        )


# -- one step per delivery (issue 40) ----------------------------------------------


def test_one_step_per_delivery_finalizes_without_the_lock(app, user, geneva_jobs):
    """Without inline continuation the claim is the delivery's only lock (R-EXE-81).

    The next step is scheduled and published by the guarded statement; the
    locked path's read is not sent on PostgreSQL (the other databases always
    lock, and SQLite's lock is its ``BEGIN IMMEDIATE``).
    """
    workflow_id, _, statements = _run(user, geneva_jobs, continue_inline=False)
    assert RUNS == ["first"]
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [rows[1]["id"]]
    assert workflow_row(workflow_id)["state"] == "ready"
    locks = [s for s in statements if "FOR UPDATE" in s]
    guarded = [s for s in statements if s.startswith(GUARDED)]
    if db.engine.dialect.name == "postgresql":
        assert len(locks) == 1, locks
        assert len(guarded) == 1, statements
    else:
        assert guarded == [], "only PostgreSQL skips the locking read"


def test_one_step_per_delivery_yields_to_an_operator_pause(
    app, user, geneva_jobs, finalize_mode
):
    """Paused while the delivered step ran: the guard fails, the pause wins (R-EXE-42a, R-EXE-81)."""
    workflow_id, _, statements = _run(
        user,
        geneva_jobs,
        lambda wid, eid: externally(wid, "pause"),
        continue_inline=False,
    )
    assert RUNS == ["first"]
    assert workflow_row(workflow_id)["state"] == "paused"
    assert execution_history(workflow_id) == [
        ("first", "completed", "success"),
        ("second", "scheduled", None),
    ]
    assert geneva_jobs.enqueued == []
    _assert_fell_back(statements, finalize_mode)


def test_one_step_per_delivery_does_not_check_the_next_steps_hero(
    app, user, geneva_jobs, finalize_mode
):
    """A hero deleted meanwhile is the next delivery's to notice (R-EXE-13): the step completes, the next is published."""
    user_id = user.id

    def delete_hero(wid, eid):
        in_other_thread(
            lambda: (
                db.session.execute(sa.delete(User).where(User.id == user_id)),
                db.session.commit(),
            )
        )

    workflow_id, _, _ = _run(user, geneva_jobs, delete_hero, continue_inline=False)
    assert RUNS == ["first"]
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [rows[1]["id"]]
