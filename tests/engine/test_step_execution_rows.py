"""StepExecution row helpers: start() and mark_*() (R-SE-47, issue 13.5).

Each helper locks the row and persists: the stored row, read through a separate
connection, shows the change.
"""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from flask_geneva import InvalidStateError
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.workflow import execution_row
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer
from tests.support.workflow import update_execution

CONTENDERS = 6


@pytest.fixture
def execution(user):
    """The scheduled first execution of a new workflow."""
    return EmptyTwoSteps.create(hero=user).current_execution


def test_start_moves_a_scheduled_execution_to_in_progress(execution):
    """start() returns True, sets in_progress and started_at, and persists (R-SE-47)."""
    assert execution.start() is True

    row = execution_row(execution.id)
    assert row["state"] == "in_progress"
    assert row["started_at"] is not None
    assert row["outcome"] is None
    assert execution.is_in_progress


@pytest.mark.parametrize("state", ["in_progress", "completed", "canceled"])
def test_start_refuses_unless_scheduled(execution, state):
    """start() returns False and changes nothing unless the row is scheduled (R-SE-47)."""
    update_execution(execution.id, state=state)

    assert execution.start() is False

    row = execution_row(execution.id)
    assert row["state"] == state
    assert row["started_at"] is None


def test_start_under_contention_succeeds_once(app, execution):
    """Six threads call start() at once: exactly one gets True (R-SE-47, row lock)."""
    execution_id = execution.id
    db.session.remove()
    barrier = threading.Barrier(CONTENDERS)
    results: list[object] = []
    lock = threading.Lock()

    def contend() -> None:
        with app.app_context():
            try:
                mine = db.session.get(geneva.StepExecution, execution_id)
                db.session.commit()
                barrier.wait(timeout=30)
                outcome: object = mine.start()
            except Exception as error:  # noqa: BLE001 - collected and asserted
                outcome = error
            finally:
                db.session.remove()
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=contend) for _ in range(CONTENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(results, key=str) == [False] * (CONTENDERS - 1) + [True]
    assert execution_row(execution_id)["state"] == "in_progress"


@pytest.mark.parametrize(
    ("helper", "state", "outcome", "timestamp"),
    [
        ("mark_completed", "completed", "success", "completed_at"),
        ("mark_skipped", "skipped", "skipped", "skipped_at"),
        ("mark_canceled", "canceled", "canceled", "canceled_at"),
    ],
)
def test_mark_helpers_set_state_outcome_and_timestamps(
    execution, helper, state, outcome, timestamp
):
    """mark_completed/skipped/canceled set state, default outcome, timestamp and finished_at (R-SE-47, R-SE-02/03)."""
    getattr(execution, helper)()

    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == (state, outcome)
    assert row[timestamp] is not None
    assert row["finished_at"] == row[timestamp]


def test_mark_completed_takes_an_outcome_and_skips_validation(execution):
    """A terminal execution can be re-marked with another outcome: no validation (R-SE-47)."""
    execution.mark_canceled()
    execution.mark_completed(outcome="reattempted")

    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("completed", "reattempted")
    assert row["finished_at"] == row["completed_at"]


def test_mark_failed_records_the_error(execution):
    """mark_failed(error) records message, backtrace, class and metadata (R-SE-47, R-SE-20)."""
    try:
        raise KeyError("card declined")
    except KeyError as error:
        execution.mark_failed(error)

    row = execution_row(execution.id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert row["finished_at"] == row["failed_at"] is not None
    assert row["error_message"] == "'card declined'"
    assert "KeyError" in row["error_backtrace"]
    assert row["error_class_name"] == "KeyError"
    assert execution.read_metadata("exception")["class"] == "KeyError"


def test_mark_rejects_an_unknown_outcome(execution):
    """A bad outcome is refused with the allowed ones and changes nothing (R-SE-47)."""
    with pytest.raises(ValueError, match=r"'success'.*got 'done'"):
        execution.mark_completed(outcome="done")

    assert execution_row(execution.id)["state"] == "scheduled"


def test_helpers_join_an_explicit_transaction(execution):
    """Inside ``with db.session.begin():`` a helper commits nothing itself (R-SE-47, R-WF-14)."""
    execution_id = execution.id
    db.session.commit()

    with db.session.begin():
        execution.mark_canceled()
        assert execution_row(execution_id)["state"] == "scheduled"

    assert execution_row(execution_id)["state"] == "canceled"


def test_helpers_refuse_a_deleted_row(execution):
    """A helper on a row deleted meanwhile raises InvalidStateError (R-SE-47)."""
    execution_id = execution.id
    with external_writer() as connection:
        connection.execute(
            sa.delete(executions_table()).where(executions_table().c.id == execution_id)
        )

    with pytest.raises(InvalidStateError, match=f"step execution {execution_id} no"):
        execution.start()


def test_helpers_refuse_an_unsaved_execution(execution):
    """A helper on an execution that was never stored raises InvalidStateError (R-SE-47)."""
    unsaved = geneva.StepExecution(workflow_id=execution.workflow_id, step_name="first")

    with pytest.raises(InvalidStateError, match="never saved"):
        unsaved.mark_completed()
