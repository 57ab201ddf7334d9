"""Every state write is guarded by the state read before it (R-DM-40).

The row's state is changed underneath the session after it was read: by a
second connection on PostgreSQL and MySQL/MariaDB (a plain read takes no lock
there), by a Core UPDATE in the session's own transaction on SQLite (whose
transactions hold the database write lock, BTR-13). The write is then refused
with ``StateConflictError``, nothing is overwritten, and the caller rolls back.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import StateConflictError
from flask_geneva.db import write_path
from flask_geneva.engine import scheduling
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.conftest import dialect_name
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


def _change_underneath(session: Any, table: sa.Table, row_id: Any, state: str) -> None:
    statement = sa.update(table).where(table.c.id == row_id).values(state=state)
    if dialect_name() == "sqlite":
        session.connection().execute(statement)
    else:
        with db.engine.begin() as connection:
            connection.execute(statement)


def _held(session: Any, table: sa.Table, row_id: Any) -> str:
    """The row's state as the session's transaction sees it now (a locking read)."""
    return session.connection().scalar(
        sa.select(table.c.state).where(table.c.id == row_id).with_for_update()
    )


def _after_rollback(changed: str, original: str) -> str:
    """What the row holds after the rollback: on SQLite the change was ours too."""
    return original if dialect_name() == "sqlite" else changed


def _loaded(user: Any) -> tuple[Any, Any, Any]:
    """A workflow and its first execution, freshly read in an open transaction."""
    created = EmptyTwoSteps.create(hero=user)
    workflow_id, execution_id = created.id, created.current_execution.id
    db.session.remove()
    session = db.session()
    workflow = session.get(geneva.Workflow, workflow_id)
    execution = session.get(geneva.StepExecution, execution_id)
    assert (workflow.state, execution.state) == ("ready", "scheduled")
    return session, workflow, execution


def test_an_execution_state_write_is_refused_when_the_row_changed(app, user):
    session, _, execution = _loaded(user)
    execution_id = execution.id
    _change_underneath(
        session, geneva.StepExecution.__table__, execution_id, "canceled"
    )
    execution.state = "in_progress"
    with pytest.raises(StateConflictError) as refused:
        write_path.flush(session, geneva)
    error = refused.value
    assert (error.row, error.row_id, error.expected, error.actual) == (
        "step execution",
        execution_id,
        "scheduled",
        "canceled",
    )
    executions = geneva.StepExecution.__table__
    assert _held(session, executions, execution_id) == "canceled"
    session.rollback()
    assert execution_row(execution_id)["state"] == _after_rollback(
        "canceled", "scheduled"
    )


def test_a_plain_commit_is_guarded_too(app, user):
    """The host's own ``session.commit()`` writes geneva's rows the same way."""
    session, workflow, _ = _loaded(user)
    workflow_id = workflow.id
    _change_underneath(session, geneva.Workflow.__table__, workflow_id, "paused")
    workflow.state = "canceled"
    with pytest.raises(StateConflictError, match="'paused', not 'ready'"):
        session.commit()
    assert _held(session, geneva.Workflow.__table__, workflow_id) == "paused"
    session.rollback()
    assert workflow_row(workflow_id)["state"] == _after_rollback("paused", "ready")


def test_the_pair_update_is_refused_when_the_workflow_changed(app, user):
    """The executor's pair (one statement on PostgreSQL and MySQL) is guarded."""
    session, workflow, execution = _loaded(user)
    workflow_id, execution_id = workflow.id, execution.id
    _change_underneath(session, geneva.Workflow.__table__, workflow_id, "paused")
    execution.state = "in_progress"
    workflow.state = "performing"
    with pytest.raises(StateConflictError) as refused:
        write_path.flush(session, geneva)
    assert (refused.value.row, refused.value.actual) == ("workflow", "paused")
    assert _held(session, geneva.Workflow.__table__, workflow_id) == "paused"
    session.rollback()
    assert execution_row(execution_id)["state"] == "scheduled"
    assert workflow_row(workflow_id)["state"] == _after_rollback("paused", "ready")


def test_the_pair_update_is_refused_when_the_execution_changed(app, user):
    session, workflow, execution = _loaded(user)
    workflow_id, execution_id = workflow.id, execution.id
    _change_underneath(session, geneva.StepExecution.__table__, execution_id, "skipped")
    execution.state = "in_progress"
    workflow.state = "performing"
    with pytest.raises(StateConflictError) as refused:
        write_path.flush(session, geneva)
    assert (refused.value.row, refused.value.expected, refused.value.actual) == (
        "step execution",
        "scheduled",
        "skipped",
    )
    executions = geneva.StepExecution.__table__
    assert _held(session, executions, execution_id) == "skipped"
    session.rollback()
    assert execution_row(execution_id)["state"] == _after_rollback(
        "skipped", "scheduled"
    )
    assert workflow_row(workflow_id)["state"] == "ready"


def test_a_write_that_leaves_the_state_alone_is_not_guarded(app, user):
    """Only state changes carry the guard; other columns are written as before."""
    session, _, execution = _loaded(user)
    execution_id = execution.id
    _change_underneath(
        session, geneva.StepExecution.__table__, execution_id, "canceled"
    )
    execution.error_message = "noted"
    write_path.flush(session, geneva)
    session.commit()
    row = execution_row(execution_id)
    assert (row["state"], row["error_message"]) == ("canceled", "noted")


def test_the_refusal_pickles_and_names_row_and_states():
    error = StateConflictError("workflow", 17, "ready", "canceled")
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (copy.row, copy.row_id, copy.expected, copy.actual) == (
        "workflow",
        17,
        "ready",
        "canceled",
    )
    assert str(copy) == str(error)
    assert "workflow 17" in str(error)
    assert "'canceled'" in str(error)
    assert "'ready'" in str(error)


def _rows_in_transaction(session: Any, workflow_id: Any) -> list[str]:
    """The workflow's execution states as the session's own transaction sees them."""
    table = geneva.StepExecution.__table__
    return list(
        session.connection().scalars(
            sa.select(table.c.state)
            .where(table.c.workflow_id == workflow_id)
            .order_by(table.c.id)
        )
    )


@pytest.mark.parametrize(
    ("changed", "row", "expected", "actual"),
    [
        ("execution", "step execution", "scheduled", "skipped"),
        ("workflow", "workflow", "ready", "paused"),
    ],
)
def test_a_lost_race_before_an_insert_inserts_nothing(
    app, user, changed, row, expected, actual
):
    """The pending UPDATEs and the next execution's INSERT: no row when a guard fails.

    On PostgreSQL the UPDATEs and the INSERT are one statement whose INSERT reads
    the UPDATEs' ``RETURNING`` (R-EXE-79): a row changed underneath makes its
    UPDATE match nothing, so nothing is inserted, even inside the transaction,
    and the refusal is the one of two statements (R-DM-40).
    """
    session, workflow, execution = _loaded(user)
    current_context().bind(session)  # create_step_execution reads the settings
    workflow_id, execution_id = workflow.id, execution.id
    if changed == "execution":
        table, row_id = geneva.StepExecution.__table__, execution_id
    else:
        table, row_id = geneva.Workflow.__table__, workflow_id
    _change_underneath(session, table, row_id, actual)
    execution.state = "completed"
    workflow.state = "performing"
    with (
        recorded_statements() as statements,
        pytest.raises(StateConflictError) as refused,
        # As in finalize, nothing loads a column meanwhile (no autoflush first).
        session.no_autoflush,
    ):
        scheduling.create_step_execution(
            session,
            workflow,
            workflow.steps.named("second"),
            wait=None,
            cancel_stray=False,
        )
    error = refused.value
    assert (error.row, error.expected, error.actual) == (row, expected, actual)
    if dialect_name() == "postgresql":
        merged = [s for s in statements if s.lstrip().upper().startswith("WITH")]
        assert len(merged) == 1
        assert "INSERT INTO geneva_drive_step_executions" in merged[0]
        assert not any(s.lstrip().upper().startswith("INSERT") for s in statements)
    # Nothing was inserted, not even in the transaction that is rolled back.
    assert len(_rows_in_transaction(session, workflow_id)) == 1
    assert _held(session, table, row_id) == actual
    session.rollback()
    assert [r["state"] for r in execution_rows(workflow_id)] == [
        actual if changed == "execution" and dialect_name() != "sqlite" else "scheduled"
    ]
