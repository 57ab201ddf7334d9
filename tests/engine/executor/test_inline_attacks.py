"""Attacks on inline continuation (R-EXE-70..80) that found bugs (h41)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import ExceptionPolicy
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.innodb_locks import add_reattempted_executions
from tests.support.innodb_locks import move_state_with_short_lock_wait
from tests.support.workflow import execution_rows
from tests.support.workflow import hero_counter
from tests.support.workflow import make_user
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row

#: How often ``second``'s skip_if raised; the first evaluation fails in SQL.
FAILED_EVALUATIONS: list[int] = []


def _skip_if_failing_in_sql(workflow):
    """A skip_if whose query fails in the database once (a statement timeout, a
    lock timeout or, here, a missing table): on PostgreSQL the error aborts the
    transaction it ran in."""
    if not FAILED_EVALUATIONS:
        FAILED_EVALUATIONS.append(1)
        db.session.execute(sa.text("SELECT flag FROM h41_no_such_table")).scalar()
    return False


class InlineSkipIfFailsInSql(geneva.Workflow):
    @step
    def first(self):
        db.session.execute(
            sa.text("UPDATE users SET counter = counter + 1 WHERE id = :id"),
            {"id": self.hero_id},
        )

    @step(
        skip_if=_skip_if_failing_in_sql,
        on_exception=ExceptionPolicy("reattempt", max_reattempts=None),
    )
    def second(self):
        pass


def test_a_skip_if_failing_in_sql_still_completes_the_finished_step(
    app, user, geneva_jobs
):
    """The next step's skip_if fails in the database while finalize checks it for
    an inline claim: ``first`` is still recorded completed (its writes were
    committed, it must never run again, R-EXE-42, R-EXE-38) and ``second`` is
    published for its delivery to evaluate again (R-EXE-73), never a finalize
    failing on an aborted transaction that leaves ``first`` in_progress for
    recovery to run it a second time.
    """
    FAILED_EVALUATIONS.clear()
    user_id = user.id
    workflow_id, first_id = start_without_jobs(
        InlineSkipIfFailsInSql, user, geneva_jobs
    )
    perform_step_execution(first_id)
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows][:2] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ], rows
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [rows[1]["id"]]
    geneva_jobs.drain()
    assert workflow_row(workflow_id)["state"] == "finished"
    assert hero_counter(user_id) == 1


def _skip_if_always_failing_in_sql(workflow):
    """A skip_if whose query always fails in the database (here a missing table)."""
    return db.session.execute(sa.text("SELECT flag FROM h41_no_such_table")).scalar()


class InlineSkipIfAlwaysFailsInSql(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(skip_if=_skip_if_always_failing_in_sql, on_exception=ExceptionPolicy("pause"))
    def second(self):
        pass


def test_a_precondition_failing_in_sql_at_delivery_applies_its_policy(
    app, user, geneva_jobs
):
    """``second``'s skip_if always fails in the database: the inline check leaves
    it to the delivery (R-EXE-73), and the delivery applies the step's policy to
    the condition's exception (R-EXE-23: pause, ``second`` failed/``failed``) as
    on every database, never failing its claim on PostgreSQL's aborted
    transaction and leaving ``second`` scheduled for stuck recovery to deliver
    the same failure again and again.
    """
    workflow_id, first_id = start_without_jobs(
        InlineSkipIfAlwaysFailsInSql, user, geneva_jobs
    )
    perform_step_execution(first_id)
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow_id)] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    geneva_jobs.drain()
    [(_, error)] = geneva_jobs.failures
    assert isinstance(error, sa.exc.DBAPIError), repr(error)
    assert "h41_no_such_table" in str(error)
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("first", "completed", "success"),
        ("second", "failed", "failed"),
    ]
    assert workflow_row(workflow_id)["state"] == "paused"


def _claim_another_workflow_while_an_operator_locks(locking):
    """Lock one workflow's active executions as an operator does (``locking``)
    with the table's statistics taken while it was empty, and meanwhile claim
    the next workflow's scheduled execution on another connection (lock wait at
    most 2 s). Returns the rows the claim matched; raises the lock wait timeout."""
    from flask_geneva.db import locks as row_locks
    from flask_geneva.ext.app_state import current_context

    table = geneva.StepExecution.__table__
    with db.engine.begin() as connection:
        connection.exec_driver_sql(f"ANALYZE TABLE {table.name}")  # empty
    operator = EmptyTwoSteps.create(hero=make_user("operator@example.com"))
    other = EmptyTwoSteps.create(hero=make_user("other@example.com"))
    operator_id, other_execution_id = operator.id, other.current_execution.id
    db.session.remove()
    add_reattempted_executions(operator_id, 60)
    now = clock.now()
    session = current_context().bind(db.session())
    row_locks.lock_workflow(session, operator_id)
    if locking == "lock_active_executions":
        assert len(row_locks.lock_active_executions(session, operator_id)) == 1
    else:
        assert row_locks.cancel_scheduled_executions(session, operator_id, now) == 1
    try:
        # Another workflow's claim (R-EXE-17).
        return move_state_with_short_lock_wait(
            other_execution_id, "scheduled", "in_progress"
        )
    finally:
        session.rollback()


@pytest.mark.backends("mysql")
@pytest.mark.parametrize("locking", ["lock_active_executions", "cancel_scheduled"])
def test_an_operators_lock_on_its_executions_never_blocks_another_workflow(
    app, geneva_jobs, locking
):
    """MariaDB/MySQL: the locking read of a workflow's active executions (every
    operator operation under the workflow lock, R-EXT-01..27) and the UPDATE that
    cancels its scheduled ones (R-SCH-03; also finalize's preserved next step
    under a pause, R-EXE-42) lock only that workflow's rows, so another
    workflow's worker can claim or finish its step meanwhile. Under InnoDB's
    REPEATABLE READ they locked index ranges: with the table's statistics taken
    while it was nearly empty (a new install, a table emptied) the whole
    ``state`` index, else the gap before the next workflow's ``(workflow_id,
    state)`` entries; under load, operators deadlocked with other workflows'
    claims and finalizes (inline continuation included, R-EXE-70) five times in
    a row, and a completed step was left in_progress for recovery to run again
    (R-EXE-80; the precedent of R-WSIG-30). ``init_app`` makes the engine READ
    COMMITTED, which locks only the rows matched (R-CFG-04)."""
    assert _claim_another_workflow_while_an_operator_locks(locking) == 1


@pytest.mark.backends("mysql")
@pytest.mark.parametrize("app_config", [{"GENEVA_MYSQL_READ_COMMITTED": False}])
@pytest.mark.parametrize("locking", ["lock_active_executions", "cancel_scheduled"])
def test_under_repeatable_read_an_operators_lock_blocks_another_workflow(
    app, geneva_jobs, locking
):
    """The counter-proof of the test above: with ``GENEVA_MYSQL_READ_COMMITTED``
    False the engine keeps InnoDB's REPEATABLE READ, and the same operator lock
    makes the other workflow's claim wait until its lock wait timeout (1205),
    which is why ``init_app`` makes MySQL/MariaDB engines READ COMMITTED
    (R-CFG-04)."""
    with pytest.raises(sa.exc.OperationalError) as raised:
        _claim_another_workflow_while_an_operator_locks(locking)
    assert raised.value.orig.args[0] == 1205
