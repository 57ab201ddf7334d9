"""Real Celery worker processes against a real broker (``-m worker``).

``GENEVA_TEST_BROKER_URL`` names the broker. Locally the suite is skipped with a
reason when it is unset; with ``CI=true`` a missing URL is an error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

REPO_ROOT = Path(__file__).resolve().parents[2]
BROKER_URL = os.environ.get("GENEVA_TEST_BROKER_URL", "")


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    # One xdist worker runs them all (tests/parallel_runs.py's SERIAL_GROUPS).
    for item in items:
        if "tests/worker" in str(item.fspath):
            item.add_marker(pytest.mark.worker)


@pytest.fixture
def broker_url() -> str:
    """The broker URL; skip (locally) or fail (CI) when unset."""
    if not BROKER_URL:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("GENEVA_TEST_BROKER_URL must be set in CI for worker tests")
        pytest.skip("GENEVA_TEST_BROKER_URL is not set")
    return BROKER_URL


@pytest.fixture
def worker_database_url(tmp_path: Path) -> str:
    """The database shared by the test process and the worker."""
    from tests.conftest import DATABASE_URL

    return DATABASE_URL or f"sqlite:///{tmp_path / 'worker.sqlite3'}"


def celery_process(
    app: str,
    command: str,
    *arguments: str,
    log_path: Path,
    broker_url: str,
    database_url: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``celery -A app command *arguments`` from the repository root.

    The subprocess gets this process's environment, ``env`` and the test's broker
    and database (``GENEVA_TEST_BROKER_URL``, ``GENEVA_TEST_WORKER_DATABASE_URL``);
    its output goes to ``log_path``.
    """
    environment = {
        **os.environ,
        **(env or {}),
        "GENEVA_TEST_BROKER_URL": broker_url,
        "GENEVA_TEST_WORKER_DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO_ROOT),
    }
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, command, *arguments],
            cwd=REPO_ROOT,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


#: ``celery worker`` options of every test worker: no gossip, mingle or heartbeat.
WORKER_OPTIONS = ("--without-gossip", "--without-mingle", "--without-heartbeat")


@pytest.fixture
def start_worker(
    broker_url: str, worker_database_url: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``celery worker`` subprocesses; all are stopped after the test."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(
        *extra: str, app: str = "tests.apps.worker_app:celery"
    ) -> subprocess.Popen[bytes]:
        process = celery_process(
            app,
            "worker",
            "--pool=solo",
            "--concurrency=1",
            *WORKER_OPTIONS,
            "-l",
            "info",
            *extra,
            log_path=tmp_path / f"worker-{len(processes)}.log",
            broker_url=broker_url,
            database_url=worker_database_url,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for log in sorted(tmp_path.glob("worker-*.log")):
        sys.stderr.write(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}\n")


@pytest.fixture
def heartbeat_app(
    broker_url: str,
    worker_database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Any:
    """The worker app with short heartbeats (``tests/worker/heartbeat_worker.py``);
    the test module's ``FLAG_DIR_VARIABLE`` names its blocking steps' flag
    directory (``tmp_path``)."""
    from tests.worker import heartbeat_worker

    return heartbeat_worker.build_app(
        broker_url,
        worker_database_url,
        tmp_path,
        monkeypatch,
        request.module.FLAG_DIR_VARIABLE,
    )


def prepare_database(app: Any) -> None:
    """Give ``app``'s database our schema and empty tables (server or SQLite file)."""
    from tests import conftest
    from tests.apps import basic

    if conftest.DATABASE_URL:
        conftest._prepare_server_schema(app)
        conftest._empty_tables(app)
    else:
        with app.app_context():
            basic.db.create_all()


def worker_test_app(broker_url: str, database_url: str) -> Any:
    """The test process's ``tests.apps.worker_app`` app on an empty broker and
    prepared database (:func:`prepare_database`).

    The app reads its ``GENEVA_TEST_*`` settings from the environment: set them
    before the call.
    """
    import redis

    from tests.apps import worker_app

    redis.Redis.from_url(broker_url).flushdb()
    app, _ = worker_app.build_app(database_url, broker_url)
    prepare_database(app)
    return app


def create_workflow(app: Any, workflow_cls: Any, email: str) -> tuple[Any, Any]:
    """Create a ``workflow_cls`` workflow for a new hero ``email``.

    Returns:
        ``(workflow id, hero id)``.
    """
    from tests.apps import basic

    with app.app_context():
        hero = basic.User(email=email)
        basic.db.session.add(hero)
        basic.db.session.commit()
        workflow = workflow_cls.create(hero=hero)
        workflow_id, hero_id = workflow.id, hero.id
        basic.db.session.remove()
        return workflow_id, hero_id


def workflow_state(app: Any, workflow_id: Any) -> str | None:
    """The workflow's stored state, read in a session of its own."""
    from tests.apps import basic

    with app.app_context():
        workflow_cls = basic.geneva.Workflow
        state: str | None = basic.db.session.scalar(
            sa.select(workflow_cls.state).where(workflow_cls.id == workflow_id)
        )
        basic.db.session.remove()
        return state


def wait_for_state(
    app: Any, workflow_id: Any, state: str, *, timeout: float = 60
) -> None:
    """Poll until the workflow's stored state is ``state`` (:func:`wait_for`)."""
    wait_for(lambda: workflow_state(app, workflow_id) == state, timeout=timeout)


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.2
) -> Any:
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
