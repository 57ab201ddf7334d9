"""create() whose connection fails raises DatabaseUnavailableError (R-FLT-50..52).

A server that refuses the connection (every stream: psycopg to a closed port)
and a connection killed under the COMMIT (PostgreSQL, MariaDB). A network cut
is ``tests/engine/test_network_cuts.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import DatabaseUnavailableError
from flask_geneva import step
from tests.apps import basic
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.conftest import dialect_name


class FltOutage(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def first(self):
        pass


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def refusing_app() -> Iterator[Any]:
    """An app whose PostgreSQL server refuses every connection (it is down)."""
    app = basic.create_app(
        f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/down"
    )
    with app.app_context():
        try:
            yield app
        finally:
            db.session.remove()
            db.engine.dispose()


def test_create_against_a_server_that_is_down_names_the_database_error(
    refusing_app,
):
    """The refused connection becomes DatabaseUnavailableError, chained to
    SQLAlchemy's error; create() owned its commit, so the session was rolled
    back; with commit=False the caller is told to roll back (R-FLT-50, R-FLT-51)."""
    with pytest.raises(DatabaseUnavailableError) as raised:
        FltOutage.create(hero=None)
    message = str(raised.value)
    assert message.startswith(
        "could not create a FltOutage workflow: the database refused the "
        "connection or stopped answering ("
    )
    assert "Connection refused" in message
    assert message.endswith(
        "nothing was written and the session was rolled back "
        "(GENEVA_CONNECTION_TIMEOUT is 10 s; R-FLT-50)"
    )
    assert raised.value.outcome_unknown is False
    assert isinstance(raised.value.__cause__, sa.exc.OperationalError)
    assert not db.session().in_transaction()
    with pytest.raises(DatabaseUnavailableError) as left:
        FltOutage.create(hero=None, commit=False)
    assert str(left.value).endswith(
        "nothing was written; the session's transaction lost its connection: "
        "roll it back (GENEVA_CONNECTION_TIMEOUT is 10 s; R-FLT-50)"
    )


def _kill(connection_id: int) -> None:
    """End the server's side of another connection, from a connection of its own."""
    with db.engine.connect() as killer:
        if dialect_name() == "postgresql":
            killer.execute(
                sa.text("SELECT pg_terminate_backend(:pid, 5000)"),
                {"pid": connection_id},
            )
        else:
            killer.exec_driver_sql(f"KILL {int(connection_id)}")


@pytest.mark.backends("postgresql", "mysql")
def test_a_connection_killed_under_the_commit_leaves_the_outcome_unknown(app):
    """A COMMIT whose connection dies raises DatabaseUnavailableError with
    outcome_unknown (here the server rolled it back: no row) (R-FLT-52)."""
    session = db.session()
    own_id = (
        "SELECT pg_backend_pid()"
        if dialect_name() == "postgresql"
        else "SELECT connection_id()"
    )

    killed = []

    def kill_before_the_commit(connection: Any) -> None:
        # The COMMIT of create()'s rows (the engine's commit event: not a
        # savepoint's), not an earlier one.
        inserted = any(
            isinstance(row, FltOutage) for row in session.identity_map.values()
        )
        if inserted and not killed:
            killed.append(connection.exec_driver_sql(own_id).scalar_one())
            _kill(killed[0])

    sa.event.listen(db.engine, "commit", kill_before_the_commit)
    try:
        with pytest.raises(DatabaseUnavailableError) as raised:
            FltOutage.create(hero=None)
    finally:
        sa.event.remove(db.engine, "commit", kill_before_the_commit)
    assert killed
    assert raised.value.outcome_unknown is True
    assert "the COMMIT got no answer, so the workflow may or may not be stored" in (
        str(raised.value)
    )
    stored = sa.select(sa.func.count()).where(
        geneva.Workflow.__table__.c.type == FltOutage.__geneva_type__
    )
    assert db.session.scalar(stored) == 0
