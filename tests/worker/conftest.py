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

REPO_ROOT = Path(__file__).resolve().parents[2]
BROKER_URL = os.environ.get("GENEVA_TEST_BROKER_URL", "")


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
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


@pytest.fixture
def start_worker(
    broker_url: str, worker_database_url: str, tmp_path: Path
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``celery worker`` subprocesses; all are stopped after the test."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(
        *extra: str, app: str = "tests.apps.worker_app:celery"
    ) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "GENEVA_TEST_BROKER_URL": broker_url,
            "GENEVA_TEST_WORKER_DATABASE_URL": worker_database_url,
            "PYTHONPATH": str(REPO_ROOT),
        }
        log_path = tmp_path / f"worker-{len(processes)}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    app,
                    "worker",
                    "--pool=solo",
                    "--concurrency=1",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-l",
                    "info",
                    *extra,
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
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
