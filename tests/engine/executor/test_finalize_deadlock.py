"""A real InnoDB deadlock in finalize is retried; the body ran once (R-EXE-80).

MariaDB only. A second, heavier transaction holds the gap at the end of the
``workflow_id`` index of the step executions, so finalize's INSERT of the next
execution waits there while finalize holds the workflow row; the second
transaction then asks for that row: a cycle, and InnoDB rolls back finalize's
lighter transaction. Before R-EXE-80 the worker raised 1213 and the execution
stayed ``in_progress``, for housekeeping to release and run the body again.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.innodb_locks import execute_into_a_workflow_row_cycle
from tests.support.innodb_locks import heavy_transaction
from tests.support.step_bodies import recording_steps
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.backends("mysql")

RUNS: list[str] = []


class FinalizeDeadlockWorkflow(geneva.Workflow):
    __geneva_type__ = "FinalizeDeadlockWorkflow"

    _steps = recording_steps(RUNS, "first", "second")


def test_a_deadlocked_finalize_is_retried_and_the_body_runs_once(app, user):
    """finalize chosen as the deadlock victim starts over, re-locks and commits:
    ``first`` ran once, ``second`` is scheduled, the worker raised nothing
    (R-EXE-80, R-EXE-79, R-WRK-18).
    """
    RUNS.clear()
    workflow = FinalizeDeadlockWorkflow.create(hero=user)
    workflow_id, execution_id = workflow.id, workflow.current_execution.id
    db.session.remove()

    with heavy_transaction(app) as other:
        # The gap after the last entry of the workflow_id index: the INSERT of
        # this workflow's next execution lands there.
        other.execute(
            sa.text(
                "SELECT id FROM geneva_drive_step_executions "
                "FORCE INDEX (index_geneva_drive_step_executions_on_workflow_id) "
                "WHERE workflow_id > :last FOR UPDATE"
            ),
            {"last": workflow_id},
        )
        errors = execute_into_a_workflow_row_cycle(
            app, other, execution_id, workflow_id
        )

    assert errors == []
    assert RUNS == ["first"]
    states = [(r["step_name"], r["state"]) for r in execution_rows(workflow_id)]
    assert states == [("first", "completed"), ("second", "scheduled")]
    assert workflow_row(workflow_id)["state"] == "ready"
