"""The hero check of an inline claim rides on finalize's lock (R-EXE-73, R-EXE-78).

The Celery task path (``perform_step_execution``) runs against the recording
backend: a publication recorded means the chain ended there.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import assert_row_update_not_blocked
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_rows
from tests.support.workflow import in_other_thread
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row


class ProbeNoOps(geneva.Workflow):
    """Four steps that do nothing."""

    _steps = step.repeat(4, lambda wf: None)


def _delete_user(user_id):
    def action():
        db.session.execute(sa.delete(User).where(User.id == user_id))
        db.session.commit()

    in_other_thread(action)


class ProbeHeroDeletedMeanwhile(geneva.Workflow):
    """The first step's hero is deleted by another session while the step runs."""

    @step
    def first(self):
        _delete_user(self.hero_id)

    @step
    def second(self):
        pass


class ProbeHeroReplaced(geneva.Workflow):
    """The first step gives the workflow a new hero and deletes the old one."""

    @step
    def first(self):
        old_id = self.hero_id
        replacement = User(email="replacement@example.com")
        db.session.add(replacement)
        db.session.flush()
        self.hero = replacement
        db.session.commit()
        _delete_user(old_id)

    @step
    def second(self):
        pass


def _hero_reads(statements):
    """Statements that read the users table on their own (not inside the lock)."""
    return [s for s in statements if "users" in s and "step_executions" not in s]


def test_continued_steps_send_no_statement_for_the_hero(app, user, geneva_jobs):
    """Only the delivered step's Phase 1 loads the hero; continued ones probe it (R-EXE-78)."""
    dialect = db.engine.dialect
    if dialect.name == "mysql" and not getattr(dialect, "is_mariadb", False):
        pytest.skip("MySQL (not MariaDB) loads the hero with a statement of its own")
    workflow_id, first_id = start_without_jobs(ProbeNoOps, user, geneva_jobs)
    with recorded_statements() as statements:
        perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert geneva_jobs.enqueued == []
    # Phase 1 of the delivered step loads the hero once (R-EXE-13).
    assert len(_hero_reads(statements)) == 1
    # Each finalize that claimed the next step carried the probe (on MariaDB in
    # the execution's locking statement, the second).
    assert sum("EXISTS" in s.upper() and "users" in s for s in statements) >= 3


@pytest.mark.backends("postgresql", "mysql")
def test_the_probe_locks_no_hero_row(app, user):
    """Another session updates the hero while the probing lock is held (R-EXE-78)."""
    from flask_geneva.db import locks as row_locks
    from flask_geneva.ext.app_state import current_context

    workflow = ProbeNoOps.create(hero=user)
    execution_id, user_id = workflow.current_execution.id, user.id
    db.session.remove()
    session = current_context().bind(db.session())
    locked, _, present = row_locks.lock_workflow_and_execution_probing_hero(
        session, execution_id, User, user_id
    )
    assert locked is not None
    assert present is True
    try:
        # A lock on the hero row would time out here.
        assert_row_update_not_blocked(User.__table__, user_id, {"email": "x@y.z"})
    finally:
        session.rollback()


def test_a_hero_deleted_during_the_step_ends_the_chain(app, user, geneva_jobs):
    """The next step is published, and its delivery cancels the workflow (R-EXE-73, R-EXE-78)."""
    workflow_id, first_id = start_without_jobs(
        ProbeHeroDeletedMeanwhile, user, geneva_jobs
    )
    perform_step_execution(first_id)
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [rows[1]["id"]]
    geneva_jobs.drain()
    assert workflow_row(workflow_id)["state"] == "canceled"


def test_a_hero_set_by_the_step_is_checked_itself(app, user, geneva_jobs):
    """The probe was for the old hero: the new one is loaded, and it exists (R-EXE-78)."""
    workflow_id, first_id = start_without_jobs(ProbeHeroReplaced, user, geneva_jobs)
    perform_step_execution(first_id)
    assert [(r["step_name"], r["state"]) for r in execution_rows(workflow_id)] == [
        ("first", "completed"),
        ("second", "completed"),
    ]
    assert geneva_jobs.enqueued == []
    assert workflow_row(workflow_id)["state"] == "finished"


def test_an_application_orm_execute_listener_turns_the_probe_off(
    app, user, geneva_jobs
):
    """With a ``do_orm_execute`` listener of the application's (its criteria would
    apply to an ORM load of the hero), every continued step loads the hero itself;
    geneva's own write-noting listener never turns the probe off (R-EXE-78, R-EXE-80).
    """
    seen: list[Any] = []

    def application_listener(execute_state):
        seen.append(execute_state.is_select)

    workflow_id, first_id = start_without_jobs(ProbeNoOps, user, geneva_jobs)
    event.listen(orm.Session, "do_orm_execute", application_listener)
    try:
        with recorded_statements() as statements:
            perform_step_execution(first_id)
    finally:
        event.remove(orm.Session, "do_orm_execute", application_listener)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert seen, "the application's listener never ran"
    assert sum("EXISTS" in s.upper() and "users" in s for s in statements) == 0
