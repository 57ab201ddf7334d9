"""A database-chosen deadlock victim is retried, never re-running a body (R-EXE-80).

The conflict is injected (tests/support/conflict_injection.py) into one statement
of finalize or of an operator's transaction, on every backend; the MariaDB lock
cycle itself is in test_finalize_deadlock.py.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.core import transactions
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.conflict_injection import inject_conflicts
from tests.support.conflict_injection import writes
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

EXECUTIONS = "geneva_drive_step_executions"
WORKFLOWS = "geneva_drive_workflows"

#: Step names, one per body run.
RUNS: list[str] = []
#: The injector a body arms, so that only finalize's statements fail.
ARM: dict[str, Any] = {}


def _ran(name: str) -> None:
    RUNS.append(name)
    injector = ARM.get("injector")
    if injector is not None:
        injector.armed = True


class ConflictChain(geneva.Workflow):
    @step
    def first(self):
        _ran("first")

    @step
    def second(self):
        _ran("second")


class ConflictWaiting(geneva.Workflow):
    @step(wait=timedelta(hours=1))
    def later(self):
        _ran("later")


class ConflictFailing(geneva.Workflow):
    @step(on_exception="pause")
    def failing(self):
        _ran("failing")
        raise RuntimeError("card declined")


def record_and_skip(workflow: Any, error: BaseException) -> None:
    """An imperative handler: user code inside the finalize transaction."""
    RUNS.append("handler")
    workflow.skip()


class ConflictHandled(geneva.Workflow):
    @step(on_exception=record_and_skip)
    def failing(self):
        _ran("failing")
        raise RuntimeError("card declined")

    @step
    def tail(self):
        _ran("tail")


@pytest.fixture(autouse=True)
def _clear():
    RUNS.clear()
    ARM.clear()
    yield
    RUNS.clear()
    ARM.clear()


def _start(workflow_cls: Any, user: Any) -> tuple[Any, Any]:
    workflow = workflow_cls.create(hero=user)
    ids = workflow.id, workflow.current_execution.id
    db.session.remove()
    return ids


def _states(workflow_id: Any) -> list[tuple[str, str]]:
    return [(r["step_name"], r["state"]) for r in execution_rows(workflow_id)]


def _write_on_connection(user_id: Any) -> None:
    """Write through ``session.connection()`` directly: no session event sees it."""
    db.session.connection().execute(
        sa.update(User.__table__)
        .where(User.__table__.c.id == user_id)
        .values(email="sent@example.com")
    )


def _assert_raised_and_nothing_committed(
    error: BaseException, injector: Any, workflow_id: Any, user_id: Any
) -> None:
    """The operator's one injected conflict was raised as itself, not retried:
    the workflow is still ``ready`` and the caller's connection write to the
    user row was rolled back with it (R-EXE-80)."""
    assert transactions.transaction_conflict(error) is not None
    assert len(injector.injected) == 1
    db.session.remove()
    assert workflow_row(workflow_id)["state"] == "ready"
    assert db.session.get(User, user_id).email != "sent@example.com"


def test_a_conflict_in_finalize_is_retried_and_the_body_runs_once(app, user):
    """finalize's INSERT of the next execution is a deadlock victim once: the
    retry re-locks the rows and commits; ``first`` ran once (R-EXE-80, R-EXE-79).
    """
    workflow_id, execution_id = _start(ConflictChain, user)
    with inject_conflicts(writes(EXECUTIONS, "INSERT"), armed=False) as injector:
        ARM["injector"] = injector
        Executor.execute(execution_id)
    assert len(injector.injected) == 1
    assert RUNS == ["first"]
    assert _states(workflow_id) == [("first", "completed"), ("second", "scheduled")]
    assert workflow_row(workflow_id)["state"] == "ready"


def test_a_conflict_in_the_claim_is_retried_before_the_body_runs(app, user):
    """The claim's UPDATE is a deadlock victim once: the retry re-locks and
    re-checks the execution, claims it and runs the body once (R-EXE-80, R-EXE-11).
    """
    workflow_id, execution_id = _start(ConflictChain, user)
    with inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector:
        Executor.execute(execution_id)
        assert RUNS == ["first"]
        injector.armed = False
    assert len(injector.injected) == 1
    assert _states(workflow_id) == [("first", "completed"), ("second", "scheduled")]


def test_a_conflict_recording_a_failure_is_retried(app, user):
    """The UPDATE recording a policy's pause is a deadlock victim once: the
    retry records the failure once and the body ran once (R-EXE-80, R-EXE-45).
    """
    workflow_id, execution_id = _start(ConflictFailing, user)
    with inject_conflicts(writes(WORKFLOWS, "UPDATE"), armed=False) as injector:
        ARM["injector"] = injector
        with pytest.raises(RuntimeError, match="card declined"):
            Executor.execute(execution_id)
    assert len(injector.injected) == 1
    assert RUNS == ["failing"]
    assert _states(workflow_id) == [("failing", "failed")]
    assert workflow_row(workflow_id)["state"] == "paused"


def test_a_conflict_on_every_finalize_attempt_is_raised_as_itself(app, user):
    """A conflict that outlasts the attempts is raised as the conflict; the body
    ran once and the execution stays in_progress for recovery (R-EXE-80, R-WRK-18).
    """
    workflow_id, execution_id = _start(ConflictChain, user)
    with inject_conflicts(
        writes(EXECUTIONS, "INSERT"), times=None, armed=False
    ) as injector:
        ARM["injector"] = injector
        with pytest.raises(sa.exc.DBAPIError) as raised:
            Executor.execute(execution_id)
    assert transactions.transaction_conflict(raised.value) is raised.value
    assert len(injector.injected) == transactions.CONFLICT_ATTEMPTS
    assert RUNS == ["first"]
    assert _states(workflow_id) == [("first", "in_progress")]


def test_a_finalize_given_up_on_rolls_back_and_names_the_unrecorded_error(
    app, user, caplog
):
    """Recording a failure meets a conflict on every attempt: each retry is
    logged, the session is rolled back when finalize gives up, and the body's
    exception, never recorded, is logged once before the conflict propagates
    (R-EXE-80, R-WRK-18).
    """
    workflow_id, execution_id = _start(ConflictFailing, user)
    with inject_conflicts(
        writes(WORKFLOWS, "UPDATE"), times=None, armed=False
    ) as injector:
        ARM["injector"] = injector
        with (
            caplog.at_level(logging.WARNING, logger="flask_geneva"),
            pytest.raises(sa.exc.DBAPIError) as raised,
        ):
            Executor.execute(execution_id)
        assert not db.session().in_transaction()
    assert transactions.transaction_conflict(raised.value) is raised.value
    messages = [r.getMessage() for r in caplog.records]
    retries = [m for m in messages if "retrying finalize of step" in m]
    assert len(retries) == transactions.CONFLICT_ATTEMPTS - 1
    unrecorded = [m for m in messages if "recording the outcome failed" in m]
    assert len(unrecorded) == 1
    assert unrecorded[0].endswith(
        "encountered RuntimeError: card declined; recording the outcome failed"
    )
    assert RUNS == ["failing"]
    assert _states(workflow_id) == [("failing", "in_progress")]


def test_a_conflict_after_an_imperative_handler_is_not_retried(app, user):
    """Once a handler (user code) ran in the finalize transaction, a conflict is
    raised, not retried: the handler never runs twice (R-EXE-80, R-POL-11).
    """
    workflow_id, execution_id = _start(ConflictHandled, user)
    with inject_conflicts(writes(EXECUTIONS, "INSERT"), armed=False) as injector:
        ARM["injector"] = injector
        with pytest.raises(sa.exc.DBAPIError) as raised:
            Executor.execute(execution_id)
    assert transactions.transaction_conflict(raised.value) is raised.value
    assert len(injector.injected) == 1
    assert RUNS == ["failing", "handler"]
    assert _states(workflow_id) == [("failing", "in_progress")]


OPERATIONS = [
    ("pause", {}, "paused", WORKFLOWS),
    ("cancel", {}, "canceled", EXECUTIONS),
    ("skip", {}, "ready", EXECUTIONS),
]


@pytest.mark.parametrize(
    ("operation", "kwargs", "state", "table"),
    OPERATIONS,
    ids=[o[0] for o in OPERATIONS],
)
def test_an_operator_conflict_is_retried_in_its_own_transaction(
    app, user, operation, kwargs, state, table
):
    """An operator's transaction chosen as a deadlock victim is retried: the
    operation is done once, recorded once, never a traceback (R-EXE-80, R-EXT-01..05).
    """
    workflow_id, _ = _start(ConflictChain, user)
    with inject_conflicts(writes(table, "UPDATE")) as injector:
        workflow = geneva.Workflow.get(workflow_id)
        getattr(workflow, operation)(via="admin", actor="h35", **kwargs)
    db.session.remove()
    assert len(injector.injected) == 1
    row = workflow_row(workflow_id)
    assert row["state"] == state
    actions = [a["action"] for a in row["metadata"]["operator_actions"]]
    assert actions == [operation]


def test_run_now_conflict_is_retried(app, user):
    """run_now's transaction chosen as a deadlock victim is retried (R-EXE-80, R-ADM-51)."""
    workflow_id, _ = _start(ConflictWaiting, user)
    with inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector:
        geneva.Workflow.get(workflow_id).run_now(via="cli", actor="h35")
    db.session.remove()
    assert len(injector.injected) == 1
    row = workflow_row(workflow_id)
    assert [a["action"] for a in row["metadata"]["operator_actions"]] == ["run_now"]
    assert _states(workflow_id) == [("later", "canceled"), ("later", "scheduled")]


def test_an_operator_conflict_after_the_callers_reads_on_its_connection_is_retried(
    app, user
):
    """A SELECT the caller sent on ``session.connection()`` writes nothing: the
    operation still owns the transaction and is retried (R-EXE-80)."""
    workflow_id, _ = _start(ConflictChain, user)
    with inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector:
        db.session.connection().execute(sa.select(User.__table__.c.email))
        geneva.Workflow.get(workflow_id).cancel(via="api")
    db.session.remove()
    assert len(injector.injected) == 1
    assert workflow_row(workflow_id)["state"] == "canceled"


def test_an_operator_conflict_in_the_callers_transaction_is_raised_as_itself(app, user):
    """Inside ``with session.begin():`` the conflict is the caller's to handle:
    raised as itself, not retried (R-EXE-80, R-WF-14).
    """
    workflow_id, _ = _start(ConflictChain, user)
    with (
        inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector,
        pytest.raises(sa.exc.DBAPIError) as raised,
        db.session.begin(),
    ):
        geneva.Workflow.get(workflow_id).cancel(via="api")
    assert transactions.transaction_conflict(raised.value) is raised.value
    assert len(injector.injected) == 1
    db.session.remove()
    assert workflow_row(workflow_id)["state"] == "ready"


def test_an_operator_conflict_after_the_callers_flushed_writes_is_raised(app, user):
    """The caller's flushed writes share the aborted transaction: no retry
    could restore them, so the conflict is raised (R-EXE-80)."""
    workflow_id, _ = _start(ConflictChain, user)
    with inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector:
        db.session.add(User(email="flushed@example.com"))
        db.session.flush()
        with pytest.raises(sa.exc.DBAPIError):
            geneva.Workflow.get(workflow_id).cancel(via="api")
    assert len(injector.injected) == 1
    db.session.remove()
    assert workflow_row(workflow_id)["state"] == "ready"
    assert (
        db.session.scalar(
            sa.select(sa.func.count()).where(User.email == "flushed@example.com")
        )
        == 0
    )


@pytest.mark.parametrize(
    "statement", ["orm_update", "text_update", "connection_update", "connection_text"]
)
def test_an_operator_conflict_after_the_callers_executed_writes_is_raised(
    app, user, statement
):
    """Writes the caller sent with ``session.execute()`` (an ORM-enabled UPDATE or
    a text statement) or on ``session.connection()`` directly share the aborted
    transaction too: the conflict is raised, never retried into a commit without
    them (R-EXE-80)."""
    user_id = user.id
    workflow_id, _ = _start(ConflictChain, user)
    with inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector:
        if statement == "orm_update":
            db.session.execute(
                sa.update(User)
                .where(User.id == user_id)
                .values(email="sent@example.com")
            )
        elif statement == "text_update":
            db.session.execute(
                sa.text("UPDATE users SET email = 'sent@example.com' WHERE id = :id"),
                {"id": user_id},
            )
        elif statement == "connection_update":
            _write_on_connection(user_id)
        else:
            db.session.connection().exec_driver_sql(
                "UPDATE users SET email = 'sent@example.com' WHERE id = "
                + str(int(user_id))
            )
        with pytest.raises(sa.exc.DBAPIError) as raised:
            geneva.Workflow.get(workflow_id).cancel(via="api")
    _assert_raised_and_nothing_committed(raised.value, injector, workflow_id, user_id)


def test_a_connection_write_after_the_executor_ran_on_the_session_is_seen(app, user):
    """The executor's own transactions skip the connection-write tracking, the
    session's later ones do not: a write sent on ``session.connection()`` after
    ``Executor.execute`` ran a step on the same session still makes the
    operator's conflict raised, not retried into a commit without it (R-EXE-80).
    """
    user_id = user.id
    workflow_id, execution_id = _start(ConflictChain, user)
    Executor.execute(execution_id)
    with inject_conflicts(writes(EXECUTIONS, "UPDATE")) as injector:
        _write_on_connection(user_id)
        with pytest.raises(sa.exc.DBAPIError) as raised:
            geneva.Workflow.get(workflow_id).cancel(via="api")
    _assert_raised_and_nothing_committed(raised.value, injector, workflow_id, user_id)


def test_a_connection_write_in_a_signal_receiver_during_a_step_run_is_seen(app, user):
    """A ``finalize`` receiver is user code the executor runs outside a step, on
    the executor's session, where an operator operation commits: its transaction
    is tracked again, so after its write on ``session.connection()`` a cancel's
    conflict is raised, not retried into a commit without the write (R-EXE-80,
    R-SIG-04).
    """
    from flask_geneva import signals

    user_id = user.id
    workflow_id, execution_id = _start(ConflictChain, user)
    other_id, _ = _start(ConflictWaiting, db.session.get(User, user_id))
    raised: list[BaseException] = []

    with inject_conflicts(writes(EXECUTIONS, "UPDATE"), armed=False) as injector:

        def on_finalize(sender: Any, payload: dict[str, Any]) -> None:
            _write_on_connection(user_id)
            injector.armed = True
            try:
                geneva.Workflow.get(other_id).cancel(via="api")
            except sa.exc.DBAPIError as error:
                raised.append(error)
                db.session.rollback()
            finally:
                injector.armed = False

        with signals.finalize.connected_to(on_finalize):
            Executor.execute(execution_id)
    assert len(injector.injected) == 1
    assert [transactions.transaction_conflict(e) is not None for e in raised] == [True]
    db.session.remove()
    assert workflow_row(other_id)["state"] != "canceled"
    assert db.session.get(User, user_id).email != "sent@example.com"
    assert _states(workflow_id) == [("first", "completed"), ("second", "scheduled")]


def test_the_executors_own_transactions_skip_the_connection_write_tracking(app, user):
    """Nothing asks ``owns_transaction`` about the executor's own transactions:
    their connections are not registered, so the tracking listener returns at
    once for each of their statements (R-EXE-80's cost on the step path)."""
    workflow_id, execution_id = _start(ConflictChain, user)
    registered: list[bool] = []

    def spy(connection, cursor, statement, parameters, context, executemany):
        registered.append(transactions._SESSION_ON_CONNECTION in connection.__dict__)

    sa.event.listen(db.engine, "before_cursor_execute", spy)
    try:
        Executor.execute(execution_id)
        assert registered
        assert not any(registered)
        db.session.connection().execute(sa.select(User.__table__.c.email))
        assert registered[-1], "a user transaction after the run is registered"
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", spy)
    db.session.remove()
    assert _states(workflow_id) == [("first", "completed"), ("second", "scheduled")]
