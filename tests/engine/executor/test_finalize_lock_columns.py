"""Finalize's lock after a completed body reads few execution columns (R-EXE-48).

The columns it does not re-read are expired on the instance, so what another
session wrote to them while the body ran is what the instance shows, as it was
when the lock re-read every column.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_rows
from tests.support.workflow import executions_table
from tests.support.workflow import in_other_thread
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row


def _note_from_outside(execution_id):
    """Another session writes ``error_message`` of the running execution."""
    table = executions_table()

    def action():
        db.session.execute(
            sa.update(table)
            .where(table.c.id == execution_id)
            .values(error_message="written meanwhile")
        )
        db.session.commit()

    in_other_thread(action)


class NarrowNoted(geneva.Workflow):
    """The first step's row gets a column written by another session."""

    held: list[object] = []  # the executions the hooks saw, held by the test
    seen: list[object] = []  # what the second step reads of the first execution

    def before_step_execution(self, execution):
        NarrowNoted.held.append(execution)

    @step
    def first(self):
        _note_from_outside(NarrowNoted.held[0].id)

    @step
    def second(self):
        # The first step's instance, which finalize locked and wrote.
        NarrowNoted.seen.append(NarrowNoted.held[0].error_message)


class NarrowNoOp(geneva.Workflow):
    @step
    def first(self):
        pass


class NarrowFailing(geneva.Workflow):
    @step
    def first(self):
        raise RuntimeError("boom")


def _finalize_locks(statements):
    """The joined locking reads (``FOR UPDATE`` on PostgreSQL; SQLite's is plain)."""
    return [
        s
        for s in statements
        if s.startswith("SELECT geneva_drive_workflows.id") and " JOIN " in s
    ]


def test_a_column_written_meanwhile_is_read_from_the_row(app, user, geneva_jobs):
    """Not re-read under the lock, yet not stale: the instance reads the row (R-EXE-48)."""
    workflow_id, first_id = start_without_jobs(NarrowNoted, user, geneva_jobs)
    NarrowNoted.held.clear()
    NarrowNoted.seen.clear()
    Executor.execute(first_id)
    assert db.session.get(geneva.StepExecution, first_id).state == "completed"
    second_id = execution_rows(workflow_id)[1]["id"]
    Executor.execute(second_id)
    assert NarrowNoted.seen == ["written meanwhile"]
    assert execution_rows(workflow_id)[0]["error_message"] == "written meanwhile"


def test_inline_chain_reads_a_column_written_meanwhile(app, user, geneva_jobs):
    """The next step run inline sees the row's value, not the claim's (R-EXE-48, R-EXE-70)."""
    workflow_id, first_id = start_without_jobs(NarrowNoted, user, geneva_jobs)
    NarrowNoted.held.clear()
    NarrowNoted.seen.clear()
    perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert NarrowNoted.seen == ["written meanwhile"]


@pytest.mark.backends("postgresql", "sqlite")
def test_the_lock_of_a_completed_body_names_few_columns(app, user, geneva_jobs):
    """Completed: finalize's lock leaves out e.g. ``error_backtrace``; a failure's reads all (R-EXE-48)."""
    _, first_id = start_without_jobs(NarrowNoOp, user, geneva_jobs)
    with recorded_statements() as completed:
        Executor.execute(first_id)
    _, failing_id = start_without_jobs(NarrowFailing, user, geneva_jobs)
    with recorded_statements() as failed, pytest.raises(RuntimeError):
        Executor.execute(failing_id)
    # Phase 1's lock first, finalize's last.
    assert len(_finalize_locks(completed)) == len(_finalize_locks(failed)) == 2
    assert "error_backtrace" in _finalize_locks(completed)[0]
    assert "error_backtrace" not in _finalize_locks(completed)[-1]
    assert "error_backtrace" in _finalize_locks(failed)[-1]
