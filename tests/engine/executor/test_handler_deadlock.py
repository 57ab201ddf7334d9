"""A deadlock inside an imperative exception handler is raised as itself (issue 13.4).

MariaDB only. The handler runs in a savepoint of the executor's locked finalize
transaction (R-POL-11); an InnoDB deadlock rolls that whole transaction back,
savepoint included, so rolling back to the savepoint failed with "SAVEPOINT ...
does not exist" and hid the deadlock. The finalize transaction is gone, so the
deadlock propagates (R-EXE-51) and the execution stays ``in_progress`` for
housekeeping to recover.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.innodb_locks import MYSQL_DEADLOCK
from tests.support.innodb_locks import execute_into_a_workflow_row_cycle
from tests.support.innodb_locks import heavy_transaction
from tests.support.workflow import execution_row
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.backends("mysql")

#: The user row the handler locks; set by the test.
LOCKED_USER: dict[str, int] = {}


def lock_the_contested_row(workflow: Any, error: BaseException) -> None:
    """An imperative handler whose database work waits for another transaction."""
    db.session.execute(
        sa.select(User.id).where(User.id == LOCKED_USER["id"]).with_for_update()
    )


class HandlerDeadlockWorkflow(geneva.Workflow):
    __geneva_type__ = "HandlerDeadlockWorkflow"

    @step(on_exception=lock_the_contested_row)
    def charge(self):
        raise RuntimeError("card declined")


def test_deadlock_in_an_imperative_handler_is_raised_as_itself(app, user):
    """The handler's deadlock surfaces as the deadlock, not as a savepoint error (R-EXE-51, R-POL-11)."""
    locked = User(email="contested@example.com")
    db.session.add(locked)
    db.session.commit()
    LOCKED_USER["id"] = locked.id
    workflow = HandlerDeadlockWorkflow.create(hero=user)
    workflow_id, execution_id = workflow.id, workflow.current_execution.id
    db.session.remove()

    with heavy_transaction(app) as other:
        other.execute(
            sa.select(User.id).where(User.id == LOCKED_USER["id"]).with_for_update()
        )
        errors = execute_into_a_workflow_row_cycle(
            app, other, execution_id, workflow_id
        )

    [error] = errors
    assert isinstance(error, sa.exc.OperationalError)
    assert error.orig.args[0] == MYSQL_DEADLOCK
    assert "SAVEPOINT" not in str(error)
    assert execution_row(execution_id)["state"] == "in_progress"
    assert workflow_row(workflow_id)["state"] == "performing"
