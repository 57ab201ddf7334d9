"""Real Celery worker processes against a real broker (``-m worker``).

``GENEVA_TEST_BROKER_URL`` names the broker. Locally the suite is skipped with a
reason when it is unset; with ``CI=true`` a missing URL is an error. The processes
are started, waited for and stopped by the shared harness,
``tests/support/worker_harness.py``.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.own_brokers import OwnRabbitMQ
from tests.support.own_brokers import OwnRedis
from tests.support.worker_harness import WORKER_APP
from tests.support.worker_harness import WORKER_OPTIONS
from tests.support.worker_harness import Processes
from tests.support.worker_harness import celery_command
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import dispose_built_apps
from tests.support.worker_harness import prepare_database
from tests.support.worker_harness import processes_fixture  # noqa: F401 - "processes"
from tests.support.worker_harness import python_module
from tests.support.worker_harness import required_url
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    # Each module runs in one xdist worker, on that worker's own broker database
    # and database (tests/support/parallel_runs.py's MODULE_GROUPS).
    for item in items:
        if "tests/worker" in str(item.fspath):
            item.add_marker(pytest.mark.worker)


@pytest.fixture(autouse=True)
def _dispose_worker_test_apps() -> Iterator[None]:
    """Close the pooled connections of every app the test built with
    ``worker_test_app`` (its fixtures' and its own), so none is left for the
    garbage collector to find, open, during a later test."""
    yield
    dispose_built_apps()


@pytest.fixture
def broker_url() -> str:
    """The broker URL; skip (locally) or fail (CI) when unset."""
    return required_url("GENEVA_TEST_BROKER_URL")


@pytest.fixture
def own_redis(processes: Processes) -> Iterator[OwnRedis]:
    """A Redis server of the test on a free port (not started yet); stopped (and
    thawed) after it (tests/support/own_brokers.py)."""
    server = OwnRedis(processes)
    yield server
    server.stop()


@pytest.fixture
def own_rabbitmq(processes: Processes) -> Iterator[OwnRabbitMQ]:
    """A RabbitMQ node of the test on free ports (not started yet); stopped after
    it (tests/support/own_brokers.py)."""
    node = OwnRabbitMQ(processes)
    yield node
    node.stop()


@pytest.fixture
def worker_database_url(tmp_path: Path) -> str:
    """The database shared by the test process and the worker."""
    from tests.conftest import DATABASE_URL

    return DATABASE_URL or f"sqlite:///{tmp_path / 'worker.sqlite3'}"


@pytest.fixture
def start_worker(
    processes: Processes, broker_url: str, worker_database_url: str
) -> Callable[..., subprocess.Popen[bytes]]:
    """Start ``celery worker`` subprocesses (solo pool, concurrency 1, info log);
    all are stopped after the test.

    ``start_worker(*extra, app=WORKER_APP, name="worker-<n>", database_url=...,
    env={...})``: ``extra`` ends the command line (a later ``--pool`` wins);
    ``env`` adds variables; the worker gets the test's broker and database
    (``GENEVA_TEST_BROKER_URL``, ``GENEVA_TEST_WORKER_DATABASE_URL``) and logs to
    ``tmp_path / f"{name}.log"``.
    """
    count = 0

    def start(
        *extra: str,
        app: str = WORKER_APP,
        name: str | None = None,
        database_url: str = worker_database_url,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        nonlocal count
        process = processes.start(
            celery_command(
                app,
                "worker",
                "--pool=solo",
                "--concurrency=1",
                *WORKER_OPTIONS,
                "-l",
                "info",
                *extra,
            ),
            name=name or f"worker-{count}",
            env={
                **(env or {}),
                "GENEVA_TEST_BROKER_URL": broker_url,
                "GENEVA_TEST_WORKER_DATABASE_URL": database_url,
            },
        )
        count += 1
        return process

    return start


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


@pytest.fixture
def geneva_worker_apps(worker_database_url: str) -> Iterator[Callable[..., Any]]:
    """Build the test process's ``tests.worker.geneva_worker_app`` app on the
    subprocesses' database and a broker: ``build(broker_url, **settings)``
    (:func:`tests.worker.geneva_worker_app.build_app`); the database is prepared,
    and the apps' engines are disposed after the test."""
    from tests.worker import geneva_worker_app

    apps: list[Any] = []

    def build(broker: str, **settings: Any) -> Any:
        app, _ = geneva_worker_app.build_app(worker_database_url, broker, **settings)
        prepare_database(app)
        apps.append(app)
        return app

    yield build
    for app in apps:
        dispose(app)


#: The Celery app of ``tests/worker/geneva_worker_app.py`` (the broker tests').
GENEVA_WORKER_APP = "tests.worker.geneva_worker_app:celery"


@pytest.fixture
def geneva_process(
    processes: Processes, worker_database_url: str, tmp_path: Path
) -> Callable[..., subprocess.Popen[bytes]]:
    """Start a process of ``tests.worker.geneva_worker_app`` (the broker tests'):
    ``geneva_process(command, broker, *extra, app_spec=..., **settings)``.

    ``command``: ``"worker"`` (``celery worker``, solo pool, a unique node name),
    ``"beat"`` (``celery beat``, a schedule file in ``tmp_path``) or
    ``"flask-worker"`` (``flask geneva worker`` of the same module's Flask app).
    ``settings``: ``queue``, ``visibility_timeout``, ``max_broker_delay`` of
    :func:`tests.worker.geneva_worker_app.build_app`. Its log is
    ``<command>-<n>.log``; all processes stop after the test.
    """
    from tests.worker import geneva_worker_app

    def start(
        command: str,
        broker: str,
        *extra: str,
        app_spec: str = GENEVA_WORKER_APP,
        **settings: Any,
    ) -> subprocess.Popen[bytes]:
        number = len(processes.started)
        if command == "flask-worker":
            flask_app = app_spec.replace(":celery", ":app")
            arguments = python_module("flask", "--app", flask_app)
            arguments += ["geneva", "worker", "--pool=solo"]
            arguments += [f"--schedule={tmp_path / f'beat-{number}'}"]
        elif command == "worker":
            arguments = celery_command(
                app_spec,
                "worker",
                "--pool=solo",
                "--concurrency=1",
                *WORKER_OPTIONS,
                f"--hostname=geneva-{uuid.uuid4().hex[:8]}@%h",
            )
        else:
            arguments = celery_command(
                app_spec,
                command,
                f"--schedule={tmp_path / f'beat-{number}'}",
                "--max-interval=1",
            )
        return processes.start(
            [*arguments, "--loglevel=INFO", *extra],
            name=f"{command}-{number}",
            env={
                **geneva_worker_app.environment(
                    worker_database_url, broker, **settings
                ),
                "GENEVA_TEST_BROKER_URL": broker,
            },
        )

    return start


@pytest.fixture
def run_on_worker(
    start_worker: Callable[..., subprocess.Popen[bytes]],
    broker_url: str,
    worker_database_url: str,
) -> Iterator[Callable[..., tuple[Any, Any, Any]]]:
    """Run one workflow on a real worker:
    ``run_on_worker(workflow_cls, email, until="finished")``.

    Builds the test's app (:func:`tests.support.worker_harness.worker_test_app`: empty
    broker, prepared database), creates a ``workflow_cls`` workflow for a new hero
    ``email``, starts a worker (``start_worker()``) and waits until the workflow's
    state is ``until``. Returns ``(app, workflow id, hero id)``; the app's engines
    are disposed after the test.
    """
    apps: list[Any] = []

    def run(workflow_cls: Any, email: str, *, until: str = "finished") -> Any:
        app = worker_test_app(broker_url, worker_database_url)
        apps.append(app)
        workflow_id, hero_id = create_workflow(app, workflow_cls, email)
        start_worker()
        wait_for_state(app, workflow_id, until)
        return app, workflow_id, hero_id

    yield run
    for app in apps:
        dispose(app)
