"""The hero check of a delivered step's claim rides on its lock (R-EXE-13, R-EXE-83).

Each step is delivered on its own (``continue_inline=False``): the first claim
on the test's database loads its hero and learns the hero type; later claims
probe it in their locking statement.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import orm

from flask_geneva import Executor
from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import assert_row_update_not_blocked
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_rows
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row


class ClaimProbeSteps(geneva.Workflow):
    """Two steps that do nothing."""

    _steps = step.repeat(2, lambda wf: None)


def _hero_reads(statements):
    """Statements that read the users table on their own (not inside the lock)."""
    return [s for s in statements if "users" in s and "step_executions" not in s]


def _probing_locks(statements):
    """Locking statements that carry an EXISTS on the users table."""
    return [
        s
        for s in statements
        if "step_executions" in s and "users" in s and "EXISTS" in s.upper()
    ]


def _skip_on_mysql():
    dialect = db.engine.dialect
    if dialect.name == "mysql" and not getattr(dialect, "is_mariadb", False):
        pytest.skip("MySQL (not MariaDB) loads the hero with a statement of its own")


def _new_user(email):
    user = User(email=email)
    db.session.add(user)
    db.session.commit()
    return user


def _deliver(execution_id):
    Executor.execute(execution_id, continue_inline=False)
    db.session.remove()


def test_a_learned_hero_type_is_probed_in_the_claims_lock(app, user, geneva_jobs):
    """The first claim loads the hero; the next ones send no statement for it (R-EXE-83)."""
    _skip_on_mysql()
    _, first_id = start_without_jobs(ClaimProbeSteps, user, geneva_jobs)
    with recorded_statements() as first_claim:
        _deliver(first_id)
    assert len(_hero_reads(first_claim)) == 1
    assert _probing_locks(first_claim) == []

    other = _new_user("other@example.com")
    workflow_id, other_first_id = start_without_jobs(
        ClaimProbeSteps, other, geneva_jobs
    )
    with recorded_statements() as later_claims:
        _deliver(other_first_id)
        second_id = execution_rows(workflow_id)[1]["id"]
        _deliver(second_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert _hero_reads(later_claims) == []
    assert len(_probing_locks(later_claims)) == 2


def test_a_hero_deleted_before_its_claim_cancels_by_the_probe(app, user, geneva_jobs):
    """A probe that finds no hero row cancels the workflow with the reason (R-EXE-13, R-HERO-07)."""
    _skip_on_mysql()
    _, first_id = start_without_jobs(ClaimProbeSteps, user, geneva_jobs)
    _deliver(first_id)  # learns the hero type
    gone = _new_user("gone@example.com")
    gone_id = gone.id
    workflow_id, gone_first_id = start_without_jobs(ClaimProbeSteps, gone, geneva_jobs)
    db.session.execute(sa.delete(User).where(User.id == gone_id))
    db.session.commit()
    db.session.remove()
    with recorded_statements() as statements:
        _deliver(gone_first_id)
    assert _hero_reads(statements) == []
    assert workflow_row(workflow_id)["state"] == "canceled"
    [execution] = execution_rows(workflow_id)
    assert execution["state"] == "canceled"
    assert f"hero User#{gone_id} no longer exists" in execution["error_message"]


def test_a_session_with_load_criteria_loads_the_hero(app, user, geneva_jobs):
    """A do_orm_execute listener's criteria apply to the hero's load, so nothing is probed (R-EXE-83)."""
    _, first_id = start_without_jobs(ClaimProbeSteps, user, geneva_jobs)
    _deliver(first_id)  # learns the hero type
    archived = _new_user("archived@example.com")
    archived.archived = True
    db.session.commit()
    workflow_id, archived_first_id = start_without_jobs(
        ClaimProbeSteps, archived, geneva_jobs
    )

    def hide_archived(state):
        if state.is_select:
            state.statement = state.statement.options(
                orm.with_loader_criteria(User, User.archived.is_(False))
            )

    event.listen(orm.Session, "do_orm_execute", hide_archived)
    try:
        with recorded_statements() as statements:
            _deliver(archived_first_id)
    finally:
        event.remove(orm.Session, "do_orm_execute", hide_archived)
    assert _probing_locks(statements) == []
    assert len(_hero_reads(statements)) == 1
    # The host's criteria hide the archived hero: it counts as gone.
    assert workflow_row(workflow_id)["state"] == "canceled"


@pytest.mark.backends("postgresql", "mysql")
def test_the_claims_probe_locks_no_hero_row(app, user):
    """Another session updates the hero while the probing lock is held (R-EXE-83)."""
    _skip_on_mysql()
    from flask_geneva.db import locks as row_locks
    from flask_geneva.ext.app_state import current_context

    workflow = ClaimProbeSteps.create(hero=user)
    execution_id, user_id = workflow.current_execution.id, user.id
    db.session.remove()
    session = current_context().bind(db.session())
    locked, _, present = row_locks.lock_workflow_and_execution_probing_heroes(
        session, execution_id, (("User", User),)
    )
    assert locked is not None
    assert present is True
    try:
        # A lock on the hero row would time out here.
        assert_row_update_not_blocked(User.__table__, user_id, {"email": "x@y.z"})
    finally:
        session.rollback()


def test_an_unlisted_hero_type_is_not_answered(app, user):
    """The probe answers only for the listed hero types (R-EXE-83)."""
    _skip_on_mysql()
    from flask_geneva.db import locks as row_locks
    from flask_geneva.ext.app_state import current_context

    workflow = ClaimProbeSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.remove()
    session = current_context().bind(db.session())
    try:
        locked, _, present = row_locks.lock_workflow_and_execution_probing_heroes(
            session, execution_id, (("Account", User),)
        )
        assert locked is not None
        assert present is None
    finally:
        session.rollback()


@pytest.mark.backends("sqlite")
def test_a_hero_on_another_bind_is_loaded_there_never_probed(tmp_path):
    """A hero model of another bind lives on another database: delivered claims and
    inline continuations load it there and never probe it in the workflows'
    statements (R-EXE-78, R-EXE-83)."""
    from flask_sqlalchemy import SQLAlchemy

    from flask_geneva import Geneva
    from tests.apps.basic import create_app_for

    bind_db = SQLAlchemy()
    bind_geneva = Geneva(bind_db)

    class BindCustomer(bind_db.Model):  # type: ignore[name-defined, misc]
        __bind_key__ = "customers"
        __tablename__ = "bind_customers"

        id: orm.Mapped[int] = orm.mapped_column(sa.Integer, primary_key=True)

    class BindCustomerSteps(bind_geneva.Workflow):
        __geneva_type__ = "BindCustomerSteps"

        _steps = step.repeat(3, lambda wf: None)

    app = create_app_for(
        bind_db,
        bind_geneva,
        f"sqlite:///{tmp_path / 'workflows.sqlite3'}",
        SQLALCHEMY_BINDS={"customers": f"sqlite:///{tmp_path / 'customers.sqlite3'}"},
    )
    with app.app_context():
        bind_db.create_all()
        customers = [BindCustomer(), BindCustomer()]
        bind_db.session.add_all(customers)
        bind_db.session.commit()
        one_by_one = BindCustomerSteps.create(hero=customers[0])
        inline = BindCustomerSteps.create(hero=customers[1])
        ids = {
            one_by_one.id: one_by_one.current_execution.id,
            inline.id: inline.current_execution.id,
        }
        backend = app.extensions["geneva"].recording_backend
        backend.clear()
        bind_db.session.remove()
        with recorded_statements(bind_db.engine) as statements:
            pending = [ids[one_by_one.id]]
            while pending:
                Executor.execute(pending.pop(), continue_inline=False)
                pending = [p.step_execution_id for p in backend.enqueued]
                backend.clear()
                bind_db.session.remove()
            Executor.execute(ids[inline.id], continue_inline=True)
            bind_db.session.remove()
        workflows = bind_geneva.Workflow.__table__
        states = dict(
            bind_db.session.execute(sa.select(workflows.c.id, workflows.c.state)).all()
        )
        assert states == {one_by_one.id: "finished", inline.id: "finished"}
        assert [s for s in statements if "bind_customers" in s] == []
