"""``create()`` inside the caller's transaction (R-WF-14, R-TXN-02/03, issue 13.6).

Inside a transaction the caller began explicitly (``with db.session.begin():`` or
a ``begin_nested()`` savepoint) ``create()`` joins it, as the gem's ``create!``
joins an outer transaction: nothing is committed, and the first step is published
after the caller's commit. Outside one, ``create()`` commits the session as before.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva

DEFERRED = {"GENEVA_ENQUEUE_AFTER_COMMIT": True}


class JoiningWorkflow(geneva.Workflow):
    __geneva_type__ = "JoiningWorkflow"

    @step
    def first(self):
        pass


class CallerRollback(Exception):
    """Raised by a test to make its ``with db.session.begin():`` roll back."""


def _emails() -> list[str]:
    return sorted(db.session.scalars(sa.select(User.email)))


def _workflow_count() -> int:
    return int(
        db.session.scalar(sa.select(sa.func.count()).select_from(geneva.Workflow))
    )


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_create_joins_an_explicit_transaction_that_rolls_back(user, geneva_jobs):
    """A rolled-back ``with db.session.begin():`` takes the workflow and the caller's row with it (R-WF-14)."""
    created = []

    def create_then_fail() -> None:
        with db.session.begin():
            db.session.add(User(email="unrelated@example.com"))
            created.append(JoiningWorkflow.create(hero=user))
            raise CallerRollback

    with pytest.raises(CallerRollback):
        create_then_fail()

    assert created[0].state == "ready"
    assert geneva_jobs.enqueued == []
    assert _workflow_count() == 0
    assert _emails() == ["hero@example.com"]


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_create_in_an_explicit_transaction_publishes_after_its_commit(
    user, geneva_jobs
):
    """create() leaves the commit to the caller's block, then publishes once (R-TXN-02)."""
    with db.session.begin():
        db.session.add(User(email="unrelated@example.com"))
        workflow = JoiningWorkflow.create(hero=user)
        assert geneva_jobs.enqueued == []
        execution_id = workflow.current_execution.id

    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [execution_id]
    db.session.rollback()
    assert _workflow_count() == 1
    assert _emails() == ["hero@example.com", "unrelated@example.com"]


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_create_joins_the_callers_savepoint(user, geneva_jobs):
    """Inside ``begin_nested()`` create() commits nothing; the root commit or rollback decides (R-TXN-03)."""
    db.session.add(User(email="unrelated@example.com"))
    with db.session.begin_nested():
        JoiningWorkflow.create(hero=user)
    assert geneva_jobs.enqueued == []

    db.session.rollback()

    assert geneva_jobs.enqueued == []
    assert _workflow_count() == 0
    assert _emails() == ["hero@example.com"]


@pytest.mark.parametrize("app_config", [DEFERRED])
def test_create_outside_an_explicit_transaction_commits_the_session(user, geneva_jobs):
    """Without an explicit transaction create() commits the whole session, as documented (R-WF-14)."""
    db.session.add(User(email="unrelated@example.com"))
    JoiningWorkflow.create(hero=user)
    assert len(geneva_jobs.enqueued) == 1

    db.session.rollback()

    assert _workflow_count() == 1
    assert _emails() == ["hero@example.com", "unrelated@example.com"]
