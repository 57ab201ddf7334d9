"""No row lock is held while the step body runs (SPEC §7, STYLE §7)."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.conftest import dialect_name

OBSERVED: dict[str, object] = {}


def _lock_from_another_connection(engine: sa.Engine, workflow_id: int) -> None:
    """Try to write-lock the workflow row from a second connection, without waiting."""
    try:
        with engine.connect() as connection:
            if dialect_name() == "sqlite":
                connection.exec_driver_sql("PRAGMA busy_timeout = 0")
                connection.exec_driver_sql(
                    "UPDATE users SET counter = counter WHERE 1 = 0"
                )
            else:
                nowait = " NOWAIT" if dialect_name() in ("postgresql", "mysql") else ""
                connection.exec_driver_sql(
                    "SELECT id FROM geneva_drive_workflows "
                    f"WHERE id = {int(workflow_id)} FOR UPDATE{nowait}"
                )
            connection.rollback()
        OBSERVED["locked"] = False
    except sa.exc.OperationalError as error:
        OBSERVED["locked"] = str(error)


class NoLockDuringBody(geneva.Workflow):
    @step
    def probe(self):
        engine = db.engine
        # Another thread, as another worker would be.
        thread = threading.Thread(
            target=_lock_from_another_connection, args=(engine, self.id)
        )
        thread.start()
        thread.join(timeout=30)


def test_body_runs_without_holding_the_workflow_lock(user, geneva_jobs):
    """While the body runs, another connection can lock the workflow row at once (R-EXE-17, R-EXE-38)."""
    OBSERVED.clear()
    workflow = NoLockDuringBody.create(hero=user)
    from flask_geneva.testing import perform_next_step

    perform_next_step(workflow)
    assert OBSERVED == {"locked": False}
    assert workflow.state == "finished"
