"""The executor's Core reads and writes leave rows and session as the ORM would.

``flask_geneva.db.write_path`` replaces the ORM load, flush and insert on the step
hot path (SPEC §7 phases; locks R-EXE-10, one active execution R-DM-09). These
tests pin what must not change: the stored rows, the instances' state in the
session, the rollback behaviour, that host listeners on ORM flush and mapper
events do not turn the Core writes off (R-DM-41), and the ORM load where load
or attach events are listened to.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm.exc import StaleDataError

from flask_geneva import Executor
from flask_geneva import reset_column_caches
from flask_geneva import step
from flask_geneva.db import locks as row_locks
from flask_geneva.db import session_transactions
from flask_geneva.db import write_path
from flask_geneva.engine import scheduling
from flask_geneva.engine.transitions import apply as transition_apply
from flask_geneva.models import StepExecutionState
from tests.apps import extra_column_app
from tests.apps import uuid_app
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.conftest import dialect_name
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import hero_counter
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row


@contextlib.contextmanager
def listening(target, name: str, calls: list[str]) -> Iterator[None]:
    """Listen to ORM event ``name`` on ``target`` inside the block."""

    def listener(*args, **kwargs):
        calls.append(name)

    sa.event.listen(target, name, listener)
    try:
        yield
    finally:
        sa.event.remove(target, name, listener)


def _writes(statements: list[str]) -> list[str]:
    return [
        s.split()[0].upper()
        for s in statements
        if s.split()[0].upper() in {"UPDATE", "INSERT", "WITH", "DELETE"}
    ]


def test_a_step_run_stores_its_rows_and_leaves_clean_persistent_instances(
    app, user, geneva_jobs
):
    """After a step the rows hold the new states and the instances hold the rows."""
    workflow = EmptyTwoSteps.create(hero=user)
    first = workflow.current_execution
    Executor.execute(first.id)

    session = geneva.session
    assert not session.dirty
    assert not session.new
    stored = execution_rows(workflow.id)
    assert [(row["step_name"], row["state"]) for row in stored] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    stored_workflow = workflow_row(workflow.id)
    assert stored_workflow["state"] == "ready"
    assert stored_workflow["next_step_name"] == "second"
    assert stored_workflow["current_step_name"] is None
    # updated_at moved with each write, as its onupdate would have set it
    assert stored[0]["updated_at"] >= stored[0]["started_at"]

    successor = session.scalars(
        sa.select(geneva.StepExecution).where(
            geneva.StepExecution.step_name == "second"
        )
    ).one()
    state = sa.inspect(successor)
    assert state.persistent
    assert not state.modified
    with recorded_statements() as statements:
        # Every column is loaded: reading them sends no SQL.
        seen = {
            "state": successor.state,
            "job_id": successor.job_id,
            "scheduled_for": successor.scheduled_for,
            "created_at": successor.created_at,
            "started_at": successor.started_at,
            "error_message": successor.error_message,
        }
    assert statements == []
    row = execution_row(successor.id)
    assert seen == {key: row[key] for key in seen}
    assert geneva_jobs.enqueued[-1].step_execution_id == successor.id
    assert geneva_jobs.enqueued[-1].task_id == row["job_id"]


@pytest.mark.backends("postgresql", "mysql")
def test_each_pair_of_updates_is_one_statement(app, user):
    """Claim: lock + one UPDATE statement; finalize: lock + one + the INSERT.

    On PostgreSQL finalize's pair and the INSERT are one statement (R-EXE-79),
    sent without finalize's lock: its guard stands in for it (R-EXE-81).
    """
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.remove()
    with recorded_statements() as statements:
        Executor.execute(execution_id)
    if dialect_name() == "postgresql":
        assert _writes(statements) == ["WITH", "WITH"]
        pair, merged = [s for s in statements if s.lstrip().upper().startswith("WITH")]
        assert "INSERT INTO" not in pair
        assert "INSERT INTO geneva_drive_step_executions" in merged
    else:
        assert _writes(statements) == ["UPDATE", "UPDATE", "INSERT"]
    # the locks: one joined statement per phase, two on MySQL/MariaDB (SPEC §7);
    # PostgreSQL's finalize of a body that returned locks nothing (R-EXE-81)
    locks = 1 if dialect_name() == "postgresql" else 4
    assert sum("FOR UPDATE" in s.upper() for s in statements) == locks


@pytest.mark.backends("sqlite")
def test_sqlite_sends_one_update_per_row(app, user):
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.remove()
    with recorded_statements() as statements:
        Executor.execute(execution_id)
    assert _writes(statements) == ["UPDATE", "UPDATE", "UPDATE", "UPDATE", "INSERT"]


def _new_workflow(user) -> tuple[object, object]:
    """A fresh workflow's id and its first execution's id, session removed."""
    workflow = EmptyTwoSteps.create(hero=user, allow_multiple=True)
    ids = (workflow.id, workflow.current_execution.id)
    db.session.remove()
    return ids


def _step_writes(workflow_id, execution_id) -> list[str]:
    """The write statements of one step run."""
    with recorded_statements() as statements:
        Executor.execute(execution_id)
    assert [row["state"] for row in execution_rows(workflow_id)] == [
        "completed",
        "scheduled",
    ]
    return _writes(statements)


def test_mapper_listeners_do_not_turn_the_core_writes_off(app, user):
    """Geneva's rows are written with Core even when mapper events have listeners.

    The ORM's before/after update and insert events do not fire for them
    (R-DM-41); the statements are those of a run without listeners.
    """
    first, second = _new_workflow(user), _new_workflow(user)
    without = _step_writes(*first)
    calls: list[str] = []
    with contextlib.ExitStack() as stack:
        for target in (geneva.StepExecution, geneva.Workflow):
            for name in ("before_update", "after_update", "before_insert"):
                stack.enter_context(listening(target, name, calls))
        with_listeners = _step_writes(*second)
    assert with_listeners == without
    assert calls == []


def test_a_session_flush_listener_does_not_turn_the_core_writes_off(app, user):
    """Flask-SQLAlchemy's modification tracking listens to flush events like this.

    The step's writes stay Core statements, the same as without the listener, so
    its speed does not depend on the host's session listeners (R-DM-41).
    """
    first, second = _new_workflow(user), _new_workflow(user)
    without = _step_writes(*first)
    calls: list[str] = []
    with (
        listening(orm.Session, "before_flush", calls),
        listening(orm.Session, "after_flush", calls),
    ):
        with_listeners = _step_writes(*second)
    assert with_listeners == without
    assert "after_flush" not in calls  # no ORM flush wrote anything


def test_a_load_listener_gets_an_orm_load(app, user):
    """A load listener (e.g. an @orm.reconstructor) sees the lock's ORM load."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.remove()
    calls: list[str] = []
    with listening(geneva.StepExecution, "load", calls):
        session = geneva.session
        locked_workflow, execution = row_locks.lock_workflow_and_execution(
            session, execution_id
        )
        session.rollback()
    assert calls == ["load"]
    assert execution.id == execution_id
    assert locked_workflow.id == workflow.id


class CoreRowsOwnInit(geneva.Workflow):
    """A workflow class with an ``__init__`` of its own, counting its calls."""

    inits = 0

    def __init__(self, **kwargs):
        type(self).inits += 1
        super().__init__(**kwargs)

    @step
    def only(self):
        pass


def test_a_locked_row_never_calls_the_classs_own_init(app, user):
    """Reading a locked row never runs a workflow's own __init__; the ORM loads it (R-DM-41).

    As with an ORM load, ``__init__`` runs when the workflow is created, never
    when its row is read again (a fresh session, as a worker's).
    """
    workflow = CoreRowsOwnInit.create(hero=user)
    execution_id = workflow.current_execution.id
    assert CoreRowsOwnInit.inits == 1
    db.session.remove()
    session = geneva.session
    locked_workflow, execution = row_locks.lock_workflow_and_execution(
        session, execution_id
    )
    assert isinstance(locked_workflow, CoreRowsOwnInit)
    assert execution.id == execution_id
    session.rollback()
    db.session.remove()
    Executor.execute(execution_id)
    assert CoreRowsOwnInit.inits == 1
    assert workflow_row(workflow.id)["state"] == "finished"


def test_the_lock_overwrites_unflushed_changes_like_populate_existing(app, user):
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    session.commit()
    execution.state = "in_progress"
    workflow.state = "paused"
    with session.no_autoflush:
        locked_workflow, locked_execution = row_locks.lock_workflow_and_execution(
            session, execution.id
        )
    assert locked_execution is execution
    assert locked_workflow is workflow
    assert execution.state == "scheduled"
    assert workflow.state == "ready"
    assert not sa.inspect(execution).modified
    assert not sa.inspect(workflow).modified
    session.rollback()


def test_a_scoped_session_is_accepted(app, user):
    """``db.session`` (a scoped session) works wherever a session does."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.commit()
    locked_workflow, execution = row_locks.lock_workflow_and_execution(
        db.session, execution_id
    )
    assert (locked_workflow.id, execution.id) == (workflow.id, execution_id)
    execution.error_message = "via the scoped session"
    write_path.flush(db.session, geneva)
    db.session.commit()
    assert execution_row(execution_id)["error_message"] == "via the scoped session"


def test_the_lock_reads_changes_made_by_another_connection(app, user):
    """Instances the session holds get the locked row's current values."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    session.commit()
    assert execution.error_message is None
    update_execution(execution.id, error_message="set elsewhere")
    _, locked = row_locks.lock_workflow_and_execution(session, execution.id)
    assert locked is execution
    assert execution.error_message == "set elsewhere"
    session.rollback()


def test_an_unknown_workflow_type_locks_as_the_base_class(app, user):
    """R-STI-02 holds on the Core path too: the row loads as ``geneva.Workflow``."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.remove()
    table = geneva.Workflow.__table__
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(table).where(table.c.id == workflow.id).values(type="Gone")
        )
    session = geneva.session
    locked_workflow, _ = row_locks.lock_workflow_and_execution(session, execution_id)
    assert type(locked_workflow) is geneva.Workflow
    assert locked_workflow.type == "Gone"
    session.rollback()


def test_a_rolled_back_insert_leaves_no_instance_behind(app, user):
    """As after an ORM flush: a rollback expunges the inserted execution."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    session.commit()
    locked_workflow, locked_execution = row_locks.lock_workflow_and_execution(
        session, execution.id
    )
    transition_apply.set_execution_state(
        locked_execution, StepExecutionState.COMPLETED, locked_execution.created_at
    )
    new = scheduling.create_step_execution(
        session,
        locked_workflow,
        locked_workflow.steps.named("second"),
        wait=None,
        cancel_stray=False,
    )
    assert sa.inspect(new).persistent
    new_id = new.id
    session.rollback()
    assert sa.inspect(new).transient
    assert execution_row(new_id) is None
    assert [row["state"] for row in execution_rows(workflow.id)] == ["scheduled"]


def test_an_update_of_a_deleted_row_raises_stale_data(app, user):
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    assert execution.state == "scheduled"
    assert workflow.next_step_name == "first"
    execution_id = execution.id
    table = geneva.StepExecution.__table__
    with external_writer() as connection:  # commits the session first
        connection.execute(sa.delete(table).where(table.c.id == execution_id))
    execution.error_message = "too late"
    workflow.next_step_name = "second"  # a pair: one statement on PostgreSQL
    with pytest.raises(StaleDataError, match="0 were matched"):
        write_path.flush(session, geneva)
    session.rollback()


def test_setting_a_column_back_to_its_value_writes_nothing(app, user):
    workflow = EmptyTwoSteps.create(hero=user)
    session = geneva.session
    session.commit()
    stored_before = workflow_row(workflow.id)["updated_at"]
    original = workflow.current_step_name
    workflow.current_step_name = "first"
    workflow.current_step_name = original
    with recorded_statements() as statements:
        write_path.flush(session, geneva)
    assert _writes(statements) == []
    assert not session.dirty
    session.commit()
    assert workflow_row(workflow.id)["updated_at"] == stored_before


def test_a_core_write_keeps_the_instance_in_the_session(app, user):
    """A written instance is marked clean in place, as a flush leaves it (R-DM-41).

    It never leaves the session on the way: a host listener on detach or
    transient events sees nothing, and the identity map holds the same object.
    """
    workflow = EmptyTwoSteps.create(hero=user)
    session = geneva.session
    session.commit()
    execution = workflow.current_execution
    workflow.next_step_name = "second"
    execution.job_id = "job-kept"
    calls: list[str] = []
    with (
        listening(session, "persistent_to_transient", calls),
        listening(session, "persistent_to_detached", calls),
    ):
        write_path.flush(session, geneva)
    assert calls == []
    for instance in (workflow, execution):
        state = sa.inspect(instance)
        assert state.persistent
        assert not state.modified
        assert instance not in session.dirty
        assert session.identity_map.get(state.key) is instance
    assert not session.dirty
    with recorded_statements() as statements:
        assert (workflow.next_step_name, execution.job_id) == ("second", "job-kept")
    assert statements == []
    session.commit()
    assert workflow_row(workflow.id)["next_step_name"] == "second"
    assert execution_row(execution.id)["job_id"] == "job-kept"


def test_other_pending_objects_go_through_the_orm_flush(app, user):
    """A hero changed in the same transaction is flushed too (by the ORM)."""
    workflow = EmptyTwoSteps.create(hero=user)
    session = geneva.session
    session.commit()
    workflow.next_step_name = "second"
    user.counter = 41
    user_id = user.id
    write_path.flush(session, geneva)
    assert not session.dirty
    session.commit()
    assert workflow_row(workflow.id)["next_step_name"] == "second"
    assert hero_counter(user_id) == 41


def test_uuid_keys_are_generated_for_inserted_executions(tmp_path):
    """With ``key_type="uuid"`` the Core INSERT evaluates the uuid4 default (R-DM-21)."""
    app = uuid_app.create_app(f"sqlite:///{tmp_path / 'uuid.sqlite3'}")
    with app.app_context():
        uuid_app.db.create_all()
        reset_column_caches()
        workflow = uuid_app.UuidTwoSteps.create()
        first_id = workflow.current_execution.id
        Executor.execute(first_id)
        session = uuid_app.db.session()
        executions = session.scalars(
            sa.select(uuid_app.geneva.StepExecution).order_by(
                uuid_app.geneva.StepExecution.created_at
            )
        ).all()
        assert [e.state for e in executions] == ["completed", "scheduled"]
        assert all(isinstance(e.id, uuid.UUID) for e in executions)
        assert len({e.id for e in executions}) == 2
        assert executions[1].workflow_id == workflow.id
        Executor.execute(executions[1].id)
        session.expire_all()
        assert uuid_app.db.session.get(uuid_app.geneva.Workflow, workflow.id).state == (
            "finished"
        )
        uuid_app.db.session.remove()
        uuid_app.db.engine.dispose()


def test_a_rolled_back_savepoint_expires_what_the_core_flush_wrote(app, user):
    """As after an ORM flush, a savepoint rollback leaves no stale values behind."""
    workflow = EmptyTwoSteps.create(hero=user)
    workflow_id = workflow.id
    session = geneva.session
    session.commit()
    assert workflow.next_step_name == "first"
    savepoint = session.begin_nested()
    workflow.next_step_name = "second"
    write_path.flush(session, geneva)
    savepoint.rollback()
    assert workflow.next_step_name == "first"
    session.commit()
    assert workflow_row(workflow_id)["next_step_name"] == "first"


def test_two_changed_executions_are_written_one_by_one(app, user):
    """Only an execution and its own workflow share a statement."""
    first = EmptyTwoSteps.create(hero=user, allow_multiple=True)
    second = EmptyTwoSteps.create(hero=user, allow_multiple=True)
    executions = [first.current_execution, second.current_execution]
    ids = [execution.id for execution in executions]
    session = geneva.session
    session.commit()
    for execution in executions:
        execution.error_message = f"note {execution.id}"
    write_path.flush(session, geneva)
    session.commit()
    assert [execution_row(i)["error_message"] for i in ids] == [
        f"note {i}" for i in ids
    ]


def _three_committed_executions(user) -> tuple[list[object], list[object]]:
    """Three workflows' first executions and their ids, committed."""
    workflows = [EmptyTwoSteps.create(hero=user, allow_multiple=True) for _ in range(3)]
    executions = [workflow.current_execution for workflow in workflows]
    ids = [execution.id for execution in executions]
    geneva.session.commit()
    return executions, ids


def test_changed_executions_of_one_shape_go_out_as_one_executemany(app, user):
    """Unguarded UPDATEs of one table and column set: one ``executemany``, in order (R-DM-42)."""
    executions, ids = _three_committed_executions(user)
    session = geneva.session
    for execution, execution_id in zip(executions, ids, strict=True):
        # Each read before any change: a load would autoflush the changes.
        assert execution.error_message is None
        assert execution.id == execution_id
    for execution, execution_id in zip(executions, ids, strict=True):
        execution.error_message = f"note {execution_id}"
    assert len(session.dirty) == 3
    with recorded_statements() as statements:
        write_path.flush(session, geneva)
    session.commit()
    assert _writes(statements) == ["UPDATE"], statements
    assert [execution_row(i)["error_message"] for i in ids] == [
        f"note {i}" for i in ids
    ]


def test_a_deleted_row_in_an_executemany_raises_stale_data_naming_it(app, user):
    """One row of the run is gone: nothing is kept, the gone row is named (R-DM-42)."""
    executions, ids = _three_committed_executions(user)
    session = geneva.session
    table = geneva.StepExecution.__table__
    with external_writer() as connection:
        connection.execute(sa.delete(table).where(table.c.id == ids[1]))
    for execution in (executions[0], executions[2]):
        assert execution.error_message is None  # loaded before any change
    for execution in executions:
        execution.error_message = "too late"
    with pytest.raises(StaleDataError, match=f"id={ids[1]!r}"):
        write_path.flush(session, geneva)
    session.rollback()
    assert [
        execution_row(ids[0])["error_message"],
        execution_row(ids[2])["error_message"],
    ] == [None, None]


def test_an_attach_listener_gets_an_orm_load(app, user):
    """A fresh lock attaches no instance behind an attach listener's back."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.remove()
    calls: list[str] = []
    with listening(orm.Session, "after_attach", calls):
        session = geneva.session
        row_locks.lock_workflow_and_execution(session, execution_id)
        session.rollback()
    # The ORM load attaches without the attach events, as before the Core path.
    assert calls == []


def test_a_refresh_flush_listener_does_not_turn_the_core_writes_off(app, user):
    """The written values are in memory already: nothing is refreshed (R-DM-41)."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution_id = workflow.current_execution.id
    calls: list[str] = []
    with listening(geneva.StepExecution, "refresh_flush", calls):
        Executor.execute(execution_id)
    assert calls == []
    execution = db.session.get(geneva.StepExecution, execution_id)
    assert execution.state == "completed"
    assert execution.updated_at == execution_row(execution_id)["updated_at"]


def test_the_lock_resets_a_loaded_relationship_like_populate_existing(app, user):
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    session.commit()
    assert execution.workflow is workflow
    session.expunge(workflow)
    locked_workflow, locked_execution = row_locks.lock_workflow_and_execution(
        session, execution.id
    )
    assert locked_execution is execution
    assert locked_workflow is not workflow
    assert execution.workflow is locked_workflow
    session.rollback()


def test_a_column_with_its_own_onupdate_reads_back_what_was_stored(tmp_path):
    """A subclass column updated by ``onupdate`` is written and read back by the ORM."""
    app = extra_column_app.create_app(f"sqlite:///{tmp_path / 'extra.sqlite3'}")
    with app.app_context():
        extra_column_app.db.create_all()
        reset_column_caches()
        workflow = extra_column_app.TouchedWorkflow.create()
        workflow_id = workflow.id
        session = extra_column_app.db.session()
        workflow.next_step_name = "second"
        write_path.flush(session, extra_column_app.geneva)
        in_memory = workflow.touches  # before the commit expires anything
        session.commit()
        table = extra_column_app.geneva.Workflow.__table__
        with extra_column_app.db.engine.connect() as connection:
            stored = connection.scalar(
                sa.select(table.c.touches).where(table.c.id == workflow_id)
            )
        assert stored is not None
        assert stored > 0
        assert in_memory == stored
        extra_column_app.db.session.remove()
        extra_column_app.db.engine.dispose()


class _Undone(Exception):
    pass


def _schedule_second(session, execution_id):
    """Lock, complete the execution and INSERT its successor (Core writes)."""
    locked_workflow, locked_execution = row_locks.lock_workflow_and_execution(
        session, execution_id
    )
    transition_apply.set_execution_state(
        locked_execution, StepExecutionState.COMPLETED, locked_execution.created_at
    )
    return scheduling.create_step_execution(
        session,
        locked_workflow,
        locked_workflow.steps.named("second"),
        wait=None,
        cancel_stray=False,
    )


def test_a_rolled_back_store_savepoint_undoes_its_core_writes(app, user):
    """Inside ``session_transactions.savepoint``: written rows expire, the inserted one is dropped."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    session.commit()
    created = []

    def schedule_then_fail() -> None:
        with session_transactions.savepoint(session):
            created.append(_schedule_second(session, execution.id))
            assert sa.inspect(created[0]).persistent
            raise _Undone

    with pytest.raises(_Undone):
        schedule_then_fail()
    new = created[0]
    assert sa.inspect(new).transient
    assert new not in session
    # The completed state was written inside the savepoint: it reads as stored.
    assert execution.state == "scheduled"
    assert workflow.next_step_name == "first"
    session.commit()
    assert [row["state"] for row in execution_rows(workflow.id)] == ["scheduled"]


def test_a_released_savepoint_is_undone_by_the_outer_rollback(app, user):
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    session = geneva.session
    session.commit()
    with session_transactions.savepoint(session):
        new = _schedule_second(session, execution.id)
    assert sa.inspect(new).persistent
    session.rollback()
    assert sa.inspect(new).transient
    assert execution.state == "scheduled"
    assert [row["state"] for row in execution_rows(workflow.id)] == ["scheduled"]
