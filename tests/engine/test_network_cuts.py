"""A worker and create() cut off from the database by the network (R-FLT-30..55).

Real parts: a PostgreSQL server of the module's own runs inside a network
namespace of its own (``tests/support/private_database_servers.py``,
``tests/support/network_namespaces.py``); a cut drops every packet between the
test and the server without an error, as a cut behind a router does. Runs in
the PostgreSQL streams only (the server is PostgreSQL whatever the configured
database; one stream is enough) and only where ``ip netns`` is permitted (root,
as CI runs).

The timeouts are shorter than the defaults so the module stays quick; the
heartbeat's (0.5 s) is well under the connections' (3 s), so a heartbeat that
returns in time was not freed by its connection giving up.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import DatabaseUnavailableError
from flask_geneva import reset_column_caches
from flask_geneva import step
from flask_geneva.db import workers as worker_rows
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import perform_next_step
from tests.apps import basic
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.network_namespaces import NetworkNamespace
from tests.support.network_namespaces import namespaces_unavailable
from tests.support.network_namespaces import network_namespace
from tests.support.private_database_servers import PrivatePostgres
from tests.support.private_database_servers import server_fixture
from tests.support.schema_setup import install_schema
from tests.support.worker_harness import wait_for
from tests.support.workers import workers_table

pytestmark = pytest.mark.backends("postgresql")

HEARTBEAT_TIMEOUT = 0.5
CONNECTION_TIMEOUT = 3
#: What a loaded machine may add to a bound before the assertion fails.
MARGIN = 2.5


@pytest.fixture(scope="module")
def cut_off() -> Iterator[tuple[NetworkNamespace, Any]]:
    """The namespace and an app on the server inside it, schema installed."""
    reason = namespaces_unavailable()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"network namespaces unavailable in CI: {reason}")
        pytest.skip(reason)
    with (
        network_namespace() as namespace,
        server_fixture(PrivatePostgres, namespace) as server,
    ):
        app = basic.create_app(
            server.url,
            GENEVA_HEARTBEAT_TIMEOUT=HEARTBEAT_TIMEOUT,
            GENEVA_CONNECTION_TIMEOUT=CONNECTION_TIMEOUT,
            GENEVA_WORKER_HEARTBEAT_INTERVAL=60,
            GENEVA_WORKER_DEAD_AFTER=120,
        )
        try:
            with app.app_context():
                install_schema(app)
                basic.User.__table__.create(db.engine)
                db.session.remove()
            reset_column_caches()
            yield namespace, app
        finally:
            namespace.restore()  # a failed test may have left the cut
            with app.app_context():
                db.session.remove()
                db.engine.dispose()
            reset_column_caches()


@pytest.fixture
def cut_app(cut_off: tuple[NetworkNamespace, Any]) -> Iterator[NetworkNamespace]:
    """The app's context for one test; the network restored after it."""
    namespace, app = cut_off
    with app.app_context():
        try:
            yield namespace
        finally:
            namespace.restore()
            db.session.remove()


#: What the step saw (set by the test, read after the run).
_seen: dict[str, Any] = {}


class FltCutHeartbeat(geneva.Workflow):
    @step
    def beat(self):
        namespace = _seen["namespace"]
        namespace.cut()
        try:
            started = time.monotonic()
            _seen["written"] = self.heartbeat()
            _seen["waited"] = time.monotonic() - started
        finally:
            namespace.restore()
        self.hero.counter = 5


class FltCutCreate(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def first(self):
        pass


def _last_beat(worker_id: str) -> Any:
    with db.engine.connect() as connection:
        return worker_rows.last_heartbeat(connection, workers_table(), worker_id)


def test_a_step_heartbeating_during_a_cut_returns_within_its_timeout(cut_app, caplog):
    """During a cut, self.heartbeat() returns False within GENEVA_HEARTBEAT_TIMEOUT
    (the database did not answer, the connection had not given up yet), the step
    goes on and finishes once the network is back; the worker's row stays whole
    and takes the heartbeat afterwards (R-FLT-31, R-FLT-32, R-FLT-55)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva.workers")
    hero = basic.User(email="cut@example.com")
    db.session.add(hero)
    db.session.commit()
    registration = worker_registry.register_worker(current_context())
    assert registration is not None
    worker_id = registration.identity.worker_id
    try:
        before = _last_beat(worker_id)
        _seen.clear()
        _seen["namespace"] = cut_app
        workflow = FltCutHeartbeat.create(hero=hero)
        perform_next_step(workflow)
        assert _seen["written"] is False
        assert _seen["waited"] < HEARTBEAT_TIMEOUT + MARGIN < CONNECTION_TIMEOUT + 1
        db.session.refresh(workflow)
        db.session.refresh(hero)
        assert (workflow.state, hero.counter) == ("finished", 5)
        db.session.rollback()
        wait_for(lambda: _last_beat(worker_id) > before, timeout=30)
        with db.engine.connect() as connection:
            rows = connection.execute(sa.select(workers_table())).all()
        assert [row.id for row in rows] == [worker_id]
    finally:
        db.session.rollback()
        worker_registry.deregister_workers()
    assert any(
        "got no answer from the database within 0.5 s" in record.getMessage()
        for record in caplog.records
    )


def _create_during_the_cut() -> tuple[DatabaseUnavailableError, float]:
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailableError) as raised:
        FltCutCreate.create(hero=None)
    return raised.value, time.monotonic() - started


def test_create_during_a_cut_fails_within_the_connection_timeout(cut_app):
    """create() during a cut raises DatabaseUnavailableError naming the database
    error within GENEVA_CONNECTION_TIMEOUT, through the pool's open connection
    (tcp_user_timeout) and through a new one (connect_timeout); no row exists
    once the network is back (R-FLT-40, R-FLT-50, R-FLT-51, R-FLT-55)."""
    db.session.execute(sa.select(1))  # the pool keeps an open connection
    db.session.commit()
    cut_app.cut()
    try:
        pooled, pooled_took = _create_during_the_cut()
        fresh, fresh_took = _create_during_the_cut()  # the pool was emptied
    finally:
        cut_app.restore()
    for error, took in ((pooled, pooled_took), (fresh, fresh_took)):
        assert took < CONNECTION_TIMEOUT + MARGIN
        assert str(error).startswith(
            "could not create a FltCutCreate workflow: the database refused the "
            "connection or stopped answering ("
        )
        assert str(error).endswith(
            "nothing was written and the session was rolled back "
            f"(GENEVA_CONNECTION_TIMEOUT is {CONNECTION_TIMEOUT} s; R-FLT-50)"
        )
        assert error.outcome_unknown is False
        assert isinstance(error.__cause__, sa.exc.OperationalError)
    assert "(OperationalError: consuming input failed" in str(pooled)
    assert "timed out" in str(pooled)
    assert "timeout expired" in str(fresh)
    workflows = geneva.Workflow.__table__
    created = sa.select(sa.func.count()).where(
        workflows.c.type == FltCutCreate.__geneva_type__
    )
    assert db.session.scalar(created) == 0
    # The session was rolled back: it works again once the network is back.
    assert FltCutCreate.create(hero=None).state == "ready"
