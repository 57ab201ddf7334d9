"""The database restarting under the executor (SPEC §29.1, issue 41).

Each test runs on a PostgreSQL or MariaDB server of its own
(``tests/support/private_database_servers.py``), killed with SIGKILL at the
moment that matters and started again on the same data, and calls the
executor as the Celery task calls it (``perform_step_execution``: continued
inline, ``GENEVA_TASK_RERAISE``), in this process. They run once in CI, in its
PostgreSQL stream (``backends``); they start their own servers, whatever
``GENEVA_TEST_DATABASE_URL`` names.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import ClaimFailedError
from flask_geneva import reset_column_caches
from flask_geneva import step
from flask_geneva.core import publications
from flask_geneva.engine.operators import dispatcher
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.ext.tasks import perform_step_execution
from tests import conftest
from tests.apps import basic
from tests.apps.basic import geneva
from tests.support.private_database_servers import PrivateMariaDB
from tests.support.private_database_servers import PrivatePostgres
from tests.support.private_database_servers import PrivateServer
from tests.support.private_database_servers import server_fixture

pytestmark = [pytest.mark.backends("postgresql"), pytest.mark.private_servers]

#: The server the running test kills from inside a step body.
_server: list[PrivateServer] = []
#: The step bodies that ran, in order (this process runs them all).
ran: list[str] = []
#: Seconds the server stays down when a body kills it (0: not killed).
outage = [0.0]
_restarts: list[threading.Thread] = []


def _kill_for(seconds: float) -> None:
    """Kill the test's server now and start it again ``seconds`` later."""
    server = _server[0]
    server.kill()
    restart = threading.Thread(
        target=lambda: (time.sleep(seconds), server.start()), daemon=True
    )
    restart.start()
    _restarts.append(restart)


class RestartedDuringFinalize(geneva.Workflow):
    """``charge``'s body kills the database as it returns, for ``outage[0]`` s."""

    @step
    def charge(self):
        ran.append("charge")
        if outage[0]:
            _kill_for(outage[0])

    @step
    def receipt(self):
        ran.append("receipt")
        if lose_commit_reply[0]:
            # The next commit of this session (finalize's) reaches the server,
            # then the server dies before the client hears of it.
            sa.event.listen(
                basic.db.session(), "after_commit", _kill_after_commit, once=True
            )


#: Whether ``receipt`` loses the answer to its finalize's commit.
lose_commit_reply = [False]


def _kill_after_commit(session: Any) -> None:
    """After a commit: kill the server for 2 s and raise the error a client
    gets when the answer to its ``COMMIT`` never came (a real one)."""
    _kill_for(2.0)
    engine = sa.create_engine(_server[0].url, poolclass=sa.pool.NullPool)
    try:
        engine.connect()
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PrivateServer]:
    with server_fixture(PrivatePostgres) as server:
        yield server


@pytest.fixture(scope="module")
def mariadb_server() -> Iterator[PrivateServer]:
    with server_fixture(PrivateMariaDB) as server:
        yield server


#: ``{server url: app}``: the schema is built once per server.
_apps: dict[str, Any] = {}


def _app_on(server: PrivateServer, **config: Any) -> Any:
    """A test app on ``server``'s database, its tables created and emptied."""
    app = basic.create_app(
        server.url,
        GENEVA_DISPATCH_INTERVAL=timedelta(seconds=1),
        SQLALCHEMY_ENGINE_OPTIONS={"pool_pre_ping": False},
        **config,
    )
    with app.app_context():
        if server.url not in _apps:
            basic.db.create_all()
            _apps[server.url] = True
        basic.db.session.remove()
    reset_column_caches()
    conftest._empty_tables(app)
    return app


@pytest.fixture
def on_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``on_server(server, **config)``: an app on the server, its context
    pushed; the app is disposed and the server left running after the test."""
    built: list[Any] = []
    contexts: list[Any] = []

    def make(server: PrivateServer, **config: Any) -> Any:
        _server[:] = [server]
        app = _app_on(server, **config)
        built.append(app)
        context = app.app_context()
        context.push()
        contexts.append(context)
        return app

    ran.clear()
    outage[0] = 0.0
    lose_commit_reply[0] = False
    yield make
    for restart in _restarts:
        restart.join(timeout=30)
    _restarts.clear()
    for server in _server:
        if not server.running:
            server.start()
    for context in reversed(contexts):
        basic.db.session.remove()
        context.pop()
    for app in built:
        conftest.dispose_app(app)
    worker_registry.deregister_workers()


@pytest.fixture(params=["postgresql", "mariadb"])
def server(request: pytest.FixtureRequest) -> PrivateServer:
    name = "postgres_server" if request.param == "postgresql" else "mariadb_server"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def _start() -> tuple[Any, Any]:
    """Create a workflow; return (workflow id, first execution id)."""
    user = basic.User(email="restart@example.com")
    basic.db.session.add(user)
    basic.db.session.commit()
    workflow = RestartedDuringFinalize.create(hero=user)
    ids = workflow.id, workflow.current_execution.id
    basic.db.session.remove()
    return ids


def _rows(workflow_id: Any) -> list[tuple[str, str, str | None]]:
    execution = geneva.StepExecution
    rows = basic.db.session.execute(
        sa.select(execution.step_name, execution.state, execution.outcome)
        .where(execution.workflow_id == workflow_id)
        .order_by(execution.created_at, execution.id)
    ).all()
    basic.db.session.remove()
    return [tuple(row) for row in rows]


def _execution(execution_id: Any) -> Any:
    execution = basic.db.session.get(geneva.StepExecution, execution_id)
    assert execution is not None
    return execution


def test_a_claim_that_loses_the_database_is_not_forgotten(on_server, server):
    """R-FLT-01, R-FLT-20: a delivery while the server is down raises
    ClaimFailedError and changes nothing; once the server answers, the
    dispatcher publishes the still-scheduled execution again (it is due and
    unwritten for a dispatch interval), and it runs."""
    on_server(server)
    workflow_id, first_id = _start()
    publisher = current_context().publisher
    publisher.clear()
    server.kill()
    began = time.monotonic()
    with pytest.raises(ClaimFailedError) as failed:
        perform_step_execution(first_id)
    assert time.monotonic() - began < 10
    assert failed.value.step_execution_id == first_id
    assert isinstance(failed.value.__cause__, sa.exc.DBAPIError)
    basic.db.session.remove()
    server.start()
    assert ran == []
    assert _rows(workflow_id) == [("charge", "scheduled", None)]
    job_id = _execution(first_id).job_id
    basic.db.session.remove()
    # Not yet a dispatch interval (1 s here) since it was written and came due.
    time.sleep(max(0.0, 1.2 - (time.monotonic() - began)))
    run = dispatcher.run_dispatcher(current_context())
    assert run.republished == 1
    [publication] = publisher.enqueued
    assert publication.step_execution_id == first_id
    assert publication.task_id != job_id
    assert _execution(first_id).job_id == publication.task_id
    basic.db.session.remove()
    assert dispatcher.run_dispatcher(current_context()).republished == 0
    perform_step_execution(first_id)
    assert ran == ["charge", "receipt"]
    assert _rows(workflow_id) == [
        ("charge", "completed", "success"),
        ("receipt", "completed", "success"),
    ]


def test_a_finished_body_is_not_run_again_when_the_database_restarts(
    on_server, server, caplog
):
    """R-FLT-10: the body returns, the server dies before finalize and is back
    2 s later; finalize keeps the outcome and commits it once the server
    answers, the next step runs inline, and the body ran once."""
    on_server(server)
    workflow_id, first_id = _start()
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    outage[0] = 2.0
    began = time.monotonic()
    perform_step_execution(first_id)
    assert time.monotonic() - began < 20
    assert ran == ["charge", "receipt"]
    assert _rows(workflow_id) == [
        ("charge", "completed", "success"),
        ("receipt", "completed", "success"),
    ]
    messages = [record.getMessage() for record in caplog.records]
    assert any("lost its database connection" in text for text in messages)
    assert any("reached the database again" in text for text in messages)
    assert server.kills >= 1


@pytest.mark.parametrize("server", ["postgresql"], indirect=True)
def test_an_outage_longer_than_dead_after_releases_and_recovers_at_once(
    on_server, server
):
    """R-FLT-11: with GENEVA_WORKER_DEAD_AFTER 2 s and a 4 s outage finalize
    gives up; the worker's next heartbeat releases the execution naming
    itself, and the first dispatcher run recovers it (cause ``released``),
    not the hour of the age rule; the step then runs again."""
    on_server(
        server,
        GENEVA_WORKER_HEARTBEAT_INTERVAL=timedelta(seconds=0.5),
        GENEVA_WORKER_DEAD_AFTER=timedelta(seconds=2),
        GENEVA_RELEASE_SPREAD=0,
    )
    registration = worker_registry.register_worker(current_context())
    assert registration is not None
    assert registration.registered
    workflow_id, first_id = _start()
    outage[0] = 4.0
    with pytest.raises(sa.exc.DBAPIError):
        perform_step_execution(first_id)
    basic.db.session.remove()
    assert ran == ["charge"]
    outage[0] = 0.0
    for restart in _restarts:
        restart.join(timeout=30)
    marker = f"{publications.RELEASED_JOB_ID_PREFIX}{registration.identity.worker_id}"
    deadline = time.monotonic() + 15
    while _execution(first_id).job_id != marker:
        basic.db.session.remove()
        assert time.monotonic() < deadline, "the heartbeat did not release it"
        time.sleep(0.1)
    basic.db.session.remove()
    context = current_context()
    context.publisher.clear()
    run = dispatcher.run_dispatcher(context)
    assert run.recovered == 1
    released = _execution(first_id)
    assert (released.state, released.outcome) == ("completed", "recovered")
    recovery = released.read_metadata("recovery")
    assert recovery["cause"] == "released"
    assert recovery["released_by"] == registration.identity.worker_id
    assert "released it while alive" in released.error_message
    basic.db.session.remove()
    [publication] = context.publisher.enqueued
    perform_step_execution(publication.step_execution_id)
    assert ran == ["charge", "charge", "receipt"]
    assert [row[1:] for row in _rows(workflow_id)] == [
        ("completed", "recovered"),
        ("completed", "success"),
        ("completed", "success"),
    ]


@pytest.mark.parametrize("server", ["postgresql"], indirect=True)
def test_a_commit_whose_answer_was_lost_is_recognised(on_server, server, caplog):
    """R-FLT-10: finalize's COMMIT went through but its connection was lost
    before the answer; the retry finds the finished_at it wrote and writes
    nothing more: no superseded audit, the workflow finished once."""
    on_server(server)
    workflow_id, first_id = _start()
    caplog.set_level(logging.INFO, logger="flask_geneva")
    lose_commit_reply[0] = True
    perform_step_execution(first_id)
    assert ran == ["charge", "receipt"]
    assert _rows(workflow_id) == [
        ("charge", "completed", "success"),
        ("receipt", "completed", "success"),
    ]
    messages = [record.getMessage() for record in caplog.records]
    assert any("went through before its connection" in text for text in messages)
    assert not any("superseded" in text for text in messages)
    execution = geneva.StepExecution
    receipt = basic.db.session.scalars(
        sa.select(execution).where(
            execution.workflow_id == workflow_id, execution.step_name == "receipt"
        )
    ).one()
    assert receipt.read_metadata("superseded") is None
