"""The parallel runs' per-worker resources (tests/support/parallel_runs.py)."""

from __future__ import annotations

import pytest

from tests.support import parallel_runs

# Sends no statement of its own: runs once, in the SQLite pass.
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/15", "gw0", "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379/15", "gw1", "redis://127.0.0.1:6379/14"),
        ("redis://127.0.0.1:6379/0", "gw1", "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379", "gw2", "redis://127.0.0.1:6379/14"),
        (
            "redis://:secret@host:1/3?timeout=2",
            "gw1",
            "redis://:secret@host:1/2?timeout=2",
        ),
        ("redis://127.0.0.1:6379/15", "", "redis://127.0.0.1:6379/15"),
        (
            "amqp://guest:guest@127.0.0.1:5672//",
            "gw1",
            "amqp://guest:guest@127.0.0.1:5672//",
        ),
    ],
)
def test_each_xdist_worker_gets_a_redis_database_of_its_own(
    url: str, worker: str, expected: str
) -> None:
    assert parallel_runs.worker_broker_url(url, worker) == expected


def test_two_workers_never_share_a_redis_database() -> None:
    urls = {
        parallel_runs.worker_broker_url("redis://127.0.0.1:6379/15", f"gw{index}")
        for index in range(parallel_runs.REDIS_DATABASES)
    }
    assert len(urls) == parallel_runs.REDIS_DATABASES


def test_a_worker_chooses_its_broker_once_and_its_subprocesses_keep_theirs() -> None:
    worker = {"GENEVA_TEST_BROKER_URL": "redis://127.0.0.1:6379/15"}
    parallel_runs.use_worker_broker(worker, "gw1")
    assert worker["GENEVA_TEST_BROKER_URL"] == "redis://127.0.0.1:6379/14"
    # A subprocess given a test's own server inherits the marker: kept as given.
    subprocess = {**worker, "GENEVA_TEST_BROKER_URL": "redis://127.0.0.1:40001/0"}
    parallel_runs.use_worker_broker(subprocess, "gw1")
    assert subprocess["GENEVA_TEST_BROKER_URL"] == "redis://127.0.0.1:40001/0"
    # Outside xdist: unchanged.
    alone = {"GENEVA_TEST_BROKER_URL": "redis://127.0.0.1:6379/15"}
    parallel_runs.use_worker_broker(alone, "")
    assert alone == {"GENEVA_TEST_BROKER_URL": "redis://127.0.0.1:6379/15"}


def test_real_worker_and_browser_modules_are_scheduled_whole() -> None:
    assert parallel_runs.scope_of("tests/worker/test_signal_worker.py::test_a[x]") == (
        "tests/worker/test_signal_worker.py"
    )
    assert parallel_runs.scope_of("tests/browser/test_pages.py::test_a") == (
        "tests/browser/test_pages.py"
    )
    assert parallel_runs.scope_of("tests/engine/test_smoke.py::test_a") == (
        "tests/engine/test_smoke.py::test_a"
    )
