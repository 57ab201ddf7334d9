"""A deadlock inside ``create()`` is retried or raised as itself (issue 13.4, R-UNQ-03).

MariaDB only: InnoDB rolls the whole transaction back on a deadlock, savepoints
included, so the ``ROLLBACK TO SAVEPOINT`` of ``create()``'s savepoint failed with
"SAVEPOINT sa_savepoint_1 does not exist" and hid the deadlock. Each test builds a
real lock cycle between ``create()`` in a thread and a second connection that
has written many rows, so that InnoDB picks ``create()``'s transaction as the victim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.innodb_locks import MYSQL_DEADLOCK
from tests.support.innodb_locks import WAIT_SECONDS
from tests.support.innodb_locks import heavy_transaction
from tests.support.innodb_locks import run_in_thread
from tests.support.innodb_locks import wait_until_blocked

pytestmark = pytest.mark.backends("mysql")


class DeadlockCreateWorkflow(geneva.Workflow):
    __geneva_type__ = "DeadlockCreateWorkflow"

    @step
    def first(self):
        pass


@pytest.fixture
def other_connection(app: Any) -> Iterator[sa.Connection]:
    """A second, heavier transaction (see tests/support/innodb_locks.py)."""
    with heavy_transaction(app) as connection:
        yield connection


def _insert_same_hero_workflow(connection: sa.Connection, hero_id: int) -> None:
    now = datetime.now(UTC)
    connection.execute(
        sa.insert(geneva.Workflow.__table__).values(
            type="DeadlockCreateWorkflow",
            hero_type="User",
            hero_id=hero_id,
            state="ready",
            allow_multiple=False,
            created_at=now,
            updated_at=now,
        )
    )


@pytest.mark.parametrize("explicit", [False, True], ids=["autobegun", "begin-block"])
def test_deadlock_in_callers_transaction_is_raised_as_itself(
    app, other_connection, explicit
):
    """A deadlock while create() shares the caller's transaction surfaces as the deadlock, not a savepoint error (issue 13.4)."""
    with app.app_context():
        hero, locked = User(email="hero@example.com"), User(email="lock@example.com")
        db.session.add_all([hero, locked])
        db.session.commit()
        hero_id, locked_id = hero.id, locked.id
        db.session.remove()

    _insert_same_hero_workflow(other_connection, hero_id)
    outcome: dict[str, Any] = {}

    def create_in_callers_transaction() -> None:
        with app.app_context():
            try:
                with db.session.begin() if explicit else contextlib.nullcontext():
                    # The caller's own work first: a row lock the other side wants.
                    db.session.execute(
                        sa.select(User.id).where(User.id == locked_id).with_for_update()
                    )
                    DeadlockCreateWorkflow.create(
                        hero=db.session.get(User, hero_id), commit=False
                    )
            except sa.exc.DBAPIError as error:
                outcome["error"] = error
                db.session.rollback()
                # The session is usable again.
                outcome["after"] = db.session.scalar(sa.select(sa.literal(1)))
            db.session.remove()

    thread, errors = run_in_thread(create_in_callers_transaction)
    wait_until_blocked(app)
    # Closes the cycle: InnoDB rolls back the lighter transaction, create()'s.
    other_connection.execute(
        sa.select(User.id).where(User.id == locked_id).with_for_update()
    )
    other_connection.rollback()
    thread.join(timeout=WAIT_SECONDS)

    assert errors == []
    error = outcome["error"]
    assert isinstance(error, sa.exc.OperationalError)
    assert error.orig.args[0] == MYSQL_DEADLOCK
    assert "SAVEPOINT" not in str(error)
    assert outcome["after"] == 1
    with app.app_context():
        assert db.session.scalars(sa.select(geneva.Workflow)).all() == []


def test_deadlock_in_creates_own_transaction_is_retried(app, other_connection):
    """create() retries its own transaction after a deadlock and then succeeds (issue 13.4)."""
    with app.app_context():
        hero = User(email="hero@example.com")
        db.session.add(hero)
        db.session.commit()
        hero_id = hero.id
        db.session.remove()

    # A gap lock at the end of the workflow_id index: create()'s first execution
    # must wait for it.
    other_connection.execute(
        sa.text(
            "SELECT id FROM geneva_drive_step_executions "
            "FORCE INDEX (index_geneva_drive_step_executions_on_workflow_id) "
            "WHERE workflow_id > :last FOR UPDATE"
        ),
        {"last": 2**62},
    )
    created: dict[str, Any] = {}

    def create_alone() -> None:
        with app.app_context():
            hero = db.session.get(User, hero_id)
            db.session.commit()
            created["workflow_id"] = DeadlockCreateWorkflow.create(hero=hero).id
            db.session.remove()

    thread, errors = run_in_thread(create_alone)
    wait_until_blocked(app)
    # Waits for create()'s unique key: a cycle, and create() is the victim.
    _insert_same_hero_workflow(other_connection, hero_id)
    other_connection.rollback()
    thread.join(timeout=WAIT_SECONDS)

    assert errors == []
    with app.app_context():
        workflows = db.session.scalars(sa.select(geneva.Workflow)).all()
        assert [(w.id, w.hero_id, w.state) for w in workflows] == [
            (created["workflow_id"], hero_id, "ready")
        ]
        executions = db.session.scalars(sa.select(geneva.StepExecution)).all()
        assert [(e.step_name, e.state) for e in executions] == [("first", "scheduled")]
