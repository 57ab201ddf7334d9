"""A real Celery worker whose database is down when its deliveries arrive (R-FLT-02).

SPEC §29.1, issue 41. The workflows are created and published while no worker
runs; the test's own PostgreSQL server (``tests/support/private_database_
servers.py``) is then killed with SIGKILL and a worker started: every claim
fails on the refused connection, and Celery retries each delivery with a
growing countdown instead of acknowledging it and forgetting the execution.
The server comes back 2 s after the first retry and every workflow runs to its
end, each body once, without a dispatcher or housekeeping running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.apps import basic
from tests.support.common_workflows import WaitingThreeSteps
from tests.support.private_database_servers import PrivatePostgres
from tests.support.private_database_servers import PrivateServer
from tests.support.private_database_servers import server_fixture
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import reader
from tests.support.worker_harness import wait_for

pytestmark = [pytest.mark.backends("postgresql"), pytest.mark.private_servers]

#: Seconds the server stays down after the worker's first retry.
AFTER_FIRST_RETRY = 2.0


@pytest.fixture
def postgres_server() -> Iterator[PrivateServer]:
    with server_fixture(PrivatePostgres) as server:
        yield server


def _counters(app, hero_ids):
    table = basic.User.__table__
    with reader(app) as connection:
        rows = connection.execute(
            sa.select(table.c.id, table.c.counter).where(table.c.id.in_(hero_ids))
        ).all()
    return dict(rows)


def test_deliveries_during_an_outage_are_retried_until_the_database_answers(
    postgres_server, broker_url, start_worker, processes
):
    """R-FLT-01/02: no execution is left scheduled for the stuck threshold."""
    import redis

    from tests.apps import worker_app

    server = postgres_server
    redis.Redis.from_url(broker_url).flushdb()
    app, _ = worker_app.build_app(server.url, broker_url)
    try:
        with app.app_context():
            basic.db.create_all()
            basic.db.session.remove()
        created = [
            create_workflow(app, WaitingThreeSteps, f"outage-{n}@example.com")
            for n in range(3)
        ]
        with app.app_context():
            basic.db.session.remove()
            basic.db.engine.dispose()
        server.kill()
        worker = start_worker(database_url=server.url)
        # The outage lasts until the worker retried a delivery, and 2 s more.
        wait_for(
            lambda: "R-FLT-02" in processes.log(worker),
            timeout=60,
            running=[worker],
        )
        time.sleep(AFTER_FIRST_RETRY)
        server.start()
        began = time.monotonic()
        heroes = [hero_id for _, hero_id in created]
        wait_for(
            lambda: set(_counters(app, heroes).values()) == {111},
            timeout=45,
            running=[worker],
            describe=lambda: repr(_counters(app, heroes)),
        )
        # Moving again within the retries' longest wait (10 s) of the restart.
        assert time.monotonic() - began < 25
        log = processes.log(worker)
        assert "lost its database connection" in log
        assert "retrying the delivery of step execution" in log
        assert "leaving it scheduled for the dispatcher" not in log
    finally:
        dispose(app)
