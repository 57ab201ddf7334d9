"""MySQL/MariaDB engines run READ COMMITTED, so locks stay on their rows (R-CFG-04)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_geneva import GenevaConfigurationError
from tests.apps import basic
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.conftest import DATABASE_URL
from tests.conftest import make_app
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.innodb_locks import WAIT_SECONDS
from tests.support.innodb_locks import add_reattempted_executions
from tests.support.innodb_locks import execute_in_thread
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user

mysql_only = pytest.mark.backends("mysql")


def _session_isolation(connection: Any) -> str:
    """The session's isolation level as the server reports it (``READ-COMMITTED``)."""
    return str(connection.exec_driver_sql("SELECT @@tx_isolation").scalar_one())


def _server_connection_id(connection: Any) -> int:
    return int(connection.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one())


def _gap_lock_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "flask_geneva"
        and record.levelno == logging.WARNING
        and "GENEVA_MYSQL_READ_COMMITTED" in record.getMessage()
    ]


def _dispose(app: Flask) -> None:
    with app.app_context():
        db.session.remove()
        for engine in db.engines.values():
            engine.dispose()


@mysql_only
def test_every_connection_of_the_app_runs_read_committed(app):
    """``init_app`` makes each connection READ COMMITTED once (R-CFG-04): the
    engine's default isolation level as SQLAlchemy read it, a connection checked
    out again from the pool (reset-on-return keeps the level), one that ran with
    another ``isolation_level`` execution option before it was returned, and the
    session's connection."""
    engine = db.engine
    db.session.remove()
    engine.dispose()  # one connection in the pool from here on
    with engine.connect() as connection:
        assert connection.default_isolation_level == "READ COMMITTED"
        assert _session_isolation(connection) == "READ-COMMITTED"
        first_id = _server_connection_id(connection)
    with engine.connect() as connection:
        assert _server_connection_id(connection) == first_id  # the pooled one
        assert _session_isolation(connection) == "READ-COMMITTED"
        connection.rollback()
        connection.execution_options(isolation_level="SERIALIZABLE")
        assert _session_isolation(connection) == "SERIALIZABLE"
    with engine.connect() as connection:
        assert _server_connection_id(connection) == first_id
        assert _session_isolation(connection) == "READ-COMMITTED"
    assert _session_isolation(db.session.connection()) == "READ-COMMITTED"
    db.session.rollback()


@mysql_only
def test_the_setting_false_keeps_repeatable_read_and_warns(tmp_path, caplog):
    """``GENEVA_MYSQL_READ_COMMITTED = False`` leaves the engine at the server's
    REPEATABLE READ, and its first connection logs one warning naming the
    consequence and the setting (R-CFG-04)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    app = make_app(tmp_path, GENEVA_MYSQL_READ_COMMITTED=False)
    try:
        with app.app_context(), db.engine.connect() as connection:
            assert connection.default_isolation_level == "REPEATABLE READ"
            assert _session_isolation(connection) == "REPEATABLE-READ"
        warnings = _gap_lock_warnings(caplog)
        assert len(warnings) == 1
        assert "runs REPEATABLE READ transactions" in warnings[0]
        assert "block or deadlock other workflows' step claims" in warnings[0]
        assert "(R-CFG-04)" in warnings[0]
    finally:
        _dispose(app)


@mysql_only
@pytest.mark.parametrize(
    ("engine_options", "level", "warned"),
    [
        ({"isolation_level": "REPEATABLE READ"}, "REPEATABLE-READ", True),
        ({"isolation_level": "SERIALIZABLE"}, "SERIALIZABLE", True),
        ({"isolation_level": "READ COMMITTED"}, "READ-COMMITTED", False),
        # An execution option: geneva's SET would still run on each new DBAPI
        # connection if it were installed; the raw connection shows it was not.
        (
            {"execution_options": {"isolation_level": "REPEATABLE READ"}},
            "REPEATABLE-READ",
            True,
        ),
    ],
)
def test_an_isolation_level_the_app_chose_is_left_alone(
    tmp_path, caplog, engine_options, level, warned
):
    """An ``isolation_level`` in ``SQLALCHEMY_ENGINE_OPTIONS`` (or its
    ``execution_options``) is the app's choice: geneva installs nothing on that
    engine, and a gap-locking choice is logged as a warning (R-CFG-04)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    app = make_app(tmp_path, SQLALCHEMY_ENGINE_OPTIONS=engine_options)
    try:
        with app.app_context():
            raw = db.engine.raw_connection()
            try:
                cursor = raw.cursor()
                cursor.execute("SELECT @@tx_isolation")
                assert cursor.fetchone()[0] == level
                cursor.close()
            finally:
                raw.close()
        assert len(_gap_lock_warnings(caplog)) == (1 if warned else 0)
    finally:
        _dispose(app)


@mysql_only
def test_an_engine_used_before_init_app_is_named_in_a_warning(tmp_path, caplog):
    """An engine that connected before ``geneva.init_app`` keeps REPEATABLE READ
    on the connections it opened: the warning says to call ``init_app`` first
    (R-CFG-04)."""
    from flask_sqlalchemy import SQLAlchemy

    from flask_geneva import Geneva

    caplog.set_level(logging.WARNING, logger="flask_geneva")
    own_db = SQLAlchemy()
    own_geneva = Geneva(own_db)
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=DATABASE_URL,
        GENEVA_TASK_BACKEND="recording",
    )
    own_db.init_app(app)
    with app.app_context():
        with own_db.engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
        own_geneva.init_app(app)
        warnings = _gap_lock_warnings(caplog)
        assert len(warnings) == 1
        assert "before the app first uses the database" in warnings[0]
        own_db.engine.dispose()


def test_an_invalid_value_is_refused_at_init_app(tmp_path):
    """``GENEVA_MYSQL_READ_COMMITTED`` must be True or False; ``init_app``
    raises naming the key and the value, on every database (R-CFG-01, R-CFG-04)."""
    url = f"sqlite:///{tmp_path / 'bad.sqlite3'}"
    with pytest.raises(GenevaConfigurationError) as raised:
        basic.create_app(url, GENEVA_MYSQL_READ_COMMITTED="yes")
    assert str(raised.value) == (
        "GENEVA_MYSQL_READ_COMMITTED must be True or False, got 'yes' (str)"
    )


@pytest.mark.backends("sqlite", "postgresql")
def test_other_dialects_get_no_warning(tmp_path, caplog):
    """The setting concerns MySQL/MariaDB only: on SQLite and PostgreSQL no
    isolation warning is logged, whatever its value (R-CFG-04)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    app = make_app(tmp_path, GENEVA_MYSQL_READ_COMMITTED=False)
    try:
        with app.app_context(), db.engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    finally:
        _dispose(app)
    assert _gap_lock_warnings(caplog) == []


def _waits_for_a_lock(app: Flask, thread: Any) -> bool:
    """True as soon as a transaction on this test's database waits for a row
    lock while ``thread`` runs; False when ``thread`` ends first."""
    query = sa.text(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    )
    with app.app_context(), db.engine.connect() as probe:
        for _ in range(WAIT_SECONDS * 4):
            if probe.execute(query).scalar_one() >= 1:
                return True
            probe.rollback()
            thread.join(0.25)
            if not thread.is_alive():
                return False
    raise AssertionError("the worker neither finished nor waited for a lock")


_UNIQUE_CHECK = (
    "h43: READ COMMITTED leaves one cross-workflow wait. A transaction that "
    "inserts a workflow's next execution (finalize, an operator's skip) has "
    "first marked the workflow's old one_active entry deleted; the INSERT's "
    "duplicate check on that UNIQUE index finds the deleted entry with the same "
    "active_unique_key and S-locks the next entry in key order (another "
    "workflow's: as strings, '2' after '1', '9' after '10') until commit, at "
    "any isolation level. Seen both ways: A's held skip S-locked B's entry and "
    "B's finalize waited for it (1205), and B's finalize waited S on A's entry"
)


@mysql_only
@pytest.mark.parametrize(
    ("operation", "read_committed"),
    [
        ("cancel", True),
        pytest.param(
            "skip", True, marks=pytest.mark.xfail(strict=True, reason=_UNIQUE_CHECK)
        ),
        ("cancel", False),
        ("skip", False),
    ],
    ids=[
        "cancel-read_committed",
        "skip-read_committed",
        "cancel-repeatable_read",
        "skip-repeatable_read",
    ],
)
def test_an_operation_held_open_on_one_workflow_lets_another_workflows_step_run(
    tmp_path, geneva_jobs, operation, read_committed
):
    """An operator cancels workflow A (or skips its current step) in a
    transaction it keeps open (``commit=False``): it holds A's workflow row and
    its active executions locked (R-EXT-03, R-EXT-04, R-SCH-03), read through
    the ``state`` index as after a new install. Meanwhile a worker thread runs
    workflow B's step: its claim, body and finalize (R-EXE-17, R-EXE-42) finish
    without waiting for A's locks under READ COMMITTED (R-CFG-04). Under
    REPEATABLE READ (the setting False) the same worker waits for the next-key
    locks on B's index entries until the operator's transaction ends."""
    app = make_app(tmp_path, GENEVA_MYSQL_READ_COMMITTED=read_committed)
    table = geneva.StepExecution.__table__
    try:
        with app.test_request_context():
            with db.engine.begin() as connection:
                # Statistics of an empty table (a new install): the optimizer
                # then reads A's executions through the ``state`` index.
                connection.exec_driver_sql(f"ANALYZE TABLE {table.name}")
            operator = EmptyTwoSteps.create(hero=make_user("a@example.com"))
            other = EmptyTwoSteps.create(hero=make_user("b@example.com"))
            other_id = other.id
            other_execution_id = other.current_execution.id
            add_reattempted_executions(operator.id, 60)
            getattr(operator, operation)(commit=False)  # A's locks stay held
            thread, errors = execute_in_thread(app, other_execution_id)
            try:
                waited = _waits_for_a_lock(app, thread)
            finally:
                db.session.rollback()
                thread.join(WAIT_SECONDS)
            assert waited is not read_committed, "B's step waited for A's locks"
            assert not thread.is_alive()
            assert errors == []
            rows = execution_rows(other_id)
            assert (rows[0]["step_name"], rows[0]["state"]) == ("first", "completed")
    finally:
        _dispose(app)
