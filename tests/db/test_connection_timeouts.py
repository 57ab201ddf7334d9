"""The app engines' connections give up on a silent database (R-FLT-40..43, R-FLT-50)."""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from flask_geneva.db import connection_timeouts
from tests.apps.basic import db
from tests.conftest import dialect_name
from tests.conftest import make_app


def _dialect(name: str, driver: str, dbapi: Any = None) -> Any:
    return SimpleNamespace(name=name, driver=driver, loaded_dbapi=dbapi)


def test_libpq_drivers_get_a_connect_timeout_tcp_user_timeout_and_keepalives():
    """psycopg and psycopg2 get whole seconds (connect_timeout at least 2) and
    tcp_user_timeout in milliseconds with libpq 12 or later (R-FLT-40)."""
    libpq_16 = SimpleNamespace(pq=SimpleNamespace(version=lambda: 160002))
    assert connection_timeouts.bounded_parameters(
        _dialect("postgresql", "psycopg", libpq_16), timedelta(seconds=10)
    ) == {
        "connect_timeout": 10,
        "tcp_user_timeout": 10000,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
    }
    libpq_11 = SimpleNamespace(extensions=SimpleNamespace(libpq_version=lambda: 110005))
    assert connection_timeouts.bounded_parameters(
        _dialect("postgresql", "psycopg2", libpq_11), timedelta(seconds=1.5)
    ) == {
        "connect_timeout": 2,
        "keepalives": 1,
        "keepalives_idle": 1,
        "keepalives_interval": 1,
        "keepalives_count": 3,
    }


def test_mysql_drivers_get_a_connect_timeout_and_others_nothing():
    """PyMySQL and mysqlclient get connect_timeout only; SQLite and drivers
    without such parameters get none (R-FLT-40, R-FLT-42)."""
    ten = timedelta(seconds=10)
    for driver in ("pymysql", "mysqldb"):
        assert connection_timeouts.bounded_parameters(
            _dialect("mysql", driver), ten
        ) == {"connect_timeout": 10}
    for dialect in (
        _dialect("sqlite", "pysqlite"),
        _dialect("postgresql", "pg8000"),
        _dialect("mysql", "mysqlconnector"),
    ):
        assert connection_timeouts.bounded_parameters(dialect, ten) == {}


def _engine(url: str, name: str, driver: str) -> Any:
    return SimpleNamespace(dialect=_dialect(name, driver), url=sa.make_url(url))


def test_unbounded_reads_are_warned_about_naming_the_engine_and_the_remedy():
    """MySQL/MariaDB without read_timeout and unknown drivers are warned about;
    PostgreSQL through libpq, a read_timeout set and SQLite are not (R-FLT-41/42)."""
    mysql = _engine("mysql+pymysql://root@db/app", "mysql", "pymysql")
    warning = connection_timeouts.unbounded_reads_warning(mysql, {})
    assert warning is not None
    assert warning.startswith(
        "the mysql engine mysql+pymysql://root@db/app has no read_timeout: during a "
        "network cut a statement or COMMIT of create() or of a step waits until "
        "TCP gives up"
    )
    assert "read_timeout and write_timeout" in warning
    assert (
        connection_timeouts.unbounded_reads_warning(
            mysql, {"connect_args": {"read_timeout": 60}}
        )
        is None
    )
    with_query = _engine(
        "mysql+pymysql://root@db/app?read_timeout=60", "mysql", "pymysql"
    )
    assert connection_timeouts.unbounded_reads_warning(with_query, {}) is None
    pg8000 = _engine("postgresql+pg8000://u@db/app", "postgresql", "pg8000")
    other = connection_timeouts.unbounded_reads_warning(pg8000, {})
    assert other is not None
    assert "postgresql+pg8000 engine" in other
    assert "R-FLT-42" in other
    psycopg = _engine("postgresql+psycopg://u@db/app", "postgresql", "psycopg")
    assert connection_timeouts.unbounded_reads_warning(psycopg, {}) is None
    sqlite = _engine("sqlite:///x.db", "sqlite", "pysqlite")
    assert connection_timeouts.unbounded_reads_warning(sqlite, {}) is None


def _parameters_of_a_new_connection(app: Any) -> dict[str, Any]:
    """The parameters a new DBAPI connection of ``app``'s engine has."""
    with app.app_context():
        db.engine.dispose()
        with db.engine.connect() as connection:
            raw: Any = connection.connection.dbapi_connection
            if dialect_name() == "postgresql":
                return dict(raw.info.get_parameters())
            return {"connect_timeout": str(raw.connect_timeout)}


@pytest.mark.backends("postgresql", "mysql")
def test_the_apps_engine_connects_with_the_timeouts_and_the_apps_own_values_win(
    tmp_path,
):
    """init_app gives new connections the parameters; a connect_timeout the app
    set in connect_args is kept; None leaves the engine alone (R-FLT-40, R-FLT-42)."""
    found = _parameters_of_a_new_connection(
        make_app(tmp_path, GENEVA_CONNECTION_TIMEOUT=4)
    )
    assert found["connect_timeout"] == "4"
    if dialect_name() == "postgresql":
        assert found["tcp_user_timeout"] == "4000"
        assert (found["keepalives"], found["keepalives_idle"]) == ("1", "2")
    own = make_app(
        tmp_path,
        GENEVA_CONNECTION_TIMEOUT=4,
        SQLALCHEMY_ENGINE_OPTIONS={"connect_args": {"connect_timeout": 7}},
    )
    assert _parameters_of_a_new_connection(own)["connect_timeout"] == "7"
    found = _parameters_of_a_new_connection(
        make_app(tmp_path, GENEVA_CONNECTION_TIMEOUT=None)
    )
    assert "keepalives" not in found
    # libpq's default is none; PyMySQL's own is 10 s.
    assert found.get("connect_timeout") in (None, "10")


@pytest.mark.backends("mysql")
def test_a_mysql_engine_without_read_timeout_is_named_at_start_up(tmp_path, caplog):
    """init_app logs it at INFO (every process, a CLI command too); a worker's
    registration logs it as a WARNING; with read_timeout, neither (R-FLT-41)."""
    from flask_geneva.engine.workers import registry as worker_registry
    from flask_geneva.ext.app_state import current_context

    caplog.set_level(logging.INFO, logger="flask_geneva")
    app = make_app(tmp_path)

    def unbounded(level: int) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if "no read_timeout" in r.getMessage() and r.levelno == level
        ]

    assert len(unbounded(logging.INFO)) == 1
    with app.app_context():
        try:
            assert worker_registry.register_worker(current_context()) is not None
        finally:
            worker_registry.deregister_workers()
    assert len(unbounded(logging.WARNING)) == 1
    caplog.clear()
    make_app(
        tmp_path,
        SQLALCHEMY_ENGINE_OPTIONS={"connect_args": {"read_timeout": 600}},
    )
    assert not [r for r in caplog.records if "no read_timeout" in r.getMessage()]


def test_a_failed_connection_is_told_from_a_refused_statement():
    """Invalidated connections and failed connects are connection failures; a
    statement the database refused is not (R-FLT-50)."""
    refused = Exception("connection refused")
    connect_failure = sa_exc.OperationalError(None, None, refused)
    assert connection_timeouts.connection_failure(connect_failure)
    broken = sa_exc.OperationalError(
        "SELECT 1", {}, Exception("server closed"), connection_invalidated=True
    )
    assert connection_timeouts.connection_failure(broken)
    lock_timeout = sa_exc.OperationalError("UPDATE x", {}, Exception("lock timeout"))
    assert not connection_timeouts.connection_failure(lock_timeout)
    unique = sa_exc.IntegrityError(None, None, Exception("duplicate"))
    assert not connection_timeouts.connection_failure(unique)
    assert not connection_timeouts.connection_failure(ValueError("no"))
    assert connection_timeouts.describe_failure(connect_failure) == (
        "Exception: connection refused"
    )
