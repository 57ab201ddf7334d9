"""The executor locks the workflow row before the execution row (R-EXE-10, SPEC §7).

On PostgreSQL one joined ``SELECT … FOR UPDATE`` takes both locks; on MariaDB two
statements do. Either way, a transaction that has to wait for the execution row
must already hold the workflow row, or it could deadlock with external flow
control (which locks the workflow, then its executions).
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from flask_geneva.db import locks as row_locks
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyOneStep

pytestmark = pytest.mark.backends("postgresql", "mysql")


def _workflow_is_locked(engine: sa.Engine, workflow_id: int) -> bool:
    """Whether another transaction holds the workflow row lock (probe with NOWAIT)."""
    with engine.connect() as probe:
        try:
            probe.exec_driver_sql(
                "SELECT id FROM geneva_drive_workflows "
                f"WHERE id = {int(workflow_id)} FOR UPDATE NOWAIT"
            )
        except sa.exc.OperationalError:
            return True
        finally:
            probe.rollback()
    return False


def test_waiting_for_the_execution_row_already_holds_the_workflow_row(
    app, user, geneva_jobs
):
    """Blocked on the execution lock, the executor's lock holds the workflow (R-EXE-10)."""
    workflow = EmptyOneStep.create(hero=user)
    workflow_id, execution_id = workflow.id, workflow.current_execution.id
    db.session.remove()
    engine = db.engine
    result: dict[str, object] = {}

    with engine.connect() as holder:
        # Another transaction holds only the execution row.
        holder.exec_driver_sql(
            "SELECT id FROM geneva_drive_step_executions "
            f"WHERE id = {int(execution_id)} FOR UPDATE"
        )
        assert not _workflow_is_locked(engine, workflow_id)

        def lock() -> None:
            with app.app_context():
                session = geneva.session
                locked = row_locks.lock_workflow_and_execution(session, execution_id)
                result["ids"] = (locked[0].id, locked[1].id)
                session.rollback()
                db.session.remove()

        thread = threading.Thread(target=lock)
        thread.start()
        deadline = time.monotonic() + 10
        workflow_locked = False
        while time.monotonic() < deadline and not workflow_locked:
            workflow_locked = _workflow_is_locked(engine, workflow_id)
            time.sleep(0.05)
        assert thread.is_alive(), "the lock did not wait for the execution row"
        holder.rollback()
    thread.join(timeout=30)

    assert workflow_locked, "the workflow row was not locked while waiting"
    assert result["ids"] == (workflow_id, execution_id)
