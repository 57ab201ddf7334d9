"""The one harness for tests that run real processes: Celery workers and beat on a
real broker, ``flask geneva worker``, a private ``redis-server``, the example app,
concurrent housekeeping processes.

What it offers:

- :func:`required_url` and :func:`required_program`: skip a test locally when its
  broker URL (``GENEVA_TEST_BROKER_URL``, ``GENEVA_TEST_AMQP_URL``) or program is
  missing, fail it under ``CI=true``.
- :func:`python_module`, :func:`python_code` and :func:`celery_command`: the command
  lines, run with this interpreter; :data:`WORKER_OPTIONS`, the ``celery worker`` options of every test
  worker. :func:`run` runs a command to its end (a demo, a tool).
- :class:`Processes` (the ``processes`` fixture): start subprocesses from the
  repository root with ``PYTHONPATH`` set, their output in a log file each; at the
  end of the test every one still running gets SIGTERM, then SIGKILL after a
  grace period, and the tails of the logs go to stderr. :func:`stop` stops one.
- :func:`wait_for` and :func:`wait_for_files`: poll until a condition holds or a
  deadline passes, failing at once when a watched process has ended.
- The database side: :func:`prepare_database`, :func:`worker_test_app`,
  :func:`create_workflow`, :func:`reader`, :func:`execution_rows`,
  :func:`workflow_state`, :func:`wait_for_state`, :func:`dispose`,
  :func:`dispose_built_apps`.

Used by ``tests/worker/`` (every real-worker test, through its conftest's
``start_worker``, ``geneva_process`` and ``run_on_worker``),
``tests/engine/workers/test_heartbeat_recovery.py``,
``tests/engine/operators/test_concurrent_cleanup.py``, ``tests/test_example_app.py``,
``tests/test_import_contracts.py``, ``tests/test_pytest_plugin.py``,
``tests/test_layers.py`` and ``tests/reporters/test_reporters.py``.

``tests/worker/conftest.py`` builds its ``start_worker`` fixture on it; the fixture
is importable from here as well (``from tests.support.worker_harness import
processes_fixture``, the fixture ``processes``) in folders without that conftest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

REPO_ROOT = Path(__file__).resolve().parents[2]

#: The Celery app of ``tests/apps/worker_app.py``, what most test workers run.
WORKER_APP = "tests.apps.worker_app:celery"

#: ``celery worker`` options of every test worker: no gossip, mingle or heartbeat.
WORKER_OPTIONS = ("--without-gossip", "--without-mingle", "--without-heartbeat")

#: Seconds a process gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 15.0


def _missing(what: str) -> None:
    """Skip the test (locally) or fail it (``CI=true``): ``what`` is missing."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} in CI")
    pytest.skip(what)


def required_url(variable: str) -> str:
    """The URL in the environment variable ``variable``; skip (locally) or fail
    (CI) when it is unset."""
    url = os.environ.get(variable, "")
    if not url:
        _missing(f"{variable} must be set")
    return url


def required_program(name: str) -> str:
    """The path of the program ``name``; skip (locally) or fail (CI) when it is not
    installed."""
    path = shutil.which(name)
    if path is None:
        _missing(f"{name} must be installed")
    assert path is not None
    return path


def python_module(*arguments: str) -> list[str]:
    """``python -m *arguments`` with the interpreter running the tests."""
    return [sys.executable, "-m", *arguments]


def python_code(code: str) -> list[str]:
    """``python -c code`` with the interpreter running the tests."""
    return [sys.executable, "-c", code]


def celery_command(app: str, command: str, *arguments: str) -> list[str]:
    """``celery -A app command *arguments``."""
    return python_module("celery", "-A", app, command, *arguments)


def environment(env: dict[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with ``PYTHONPATH`` the repository root, and
    ``env`` over both (a None value removes the variable)."""
    merged = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return {name: value for name, value in merged.items() if value is not None}


def run(
    command: Sequence[str],
    *,
    timeout: float,
    cwd: Path = REPO_ROOT,
    env: dict[str, str | None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` to its end (within ``timeout`` seconds) in ``cwd`` with
    :func:`environment` ``(env)``; its output is captured as text, its exit status
    left to the caller."""
    return subprocess.run(
        list(command),
        cwd=cwd,
        env=environment(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def stop(process: subprocess.Popen[Any], *, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM (a warm shutdown for Celery) unless it has ended; SIGKILL when it
    has not exited after ``timeout`` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _reap(process, timeout)


def _reap(process: subprocess.Popen[Any], timeout: float) -> None:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Processes:
    """Subprocesses of one test, started from the repository root.

    Each writes its output to ``<name>.log`` in ``directory`` (or, with
    ``split_output``, its stdout to ``<name>.out`` and stderr to ``<name>.err``).
    :meth:`close` stops the ones still running and shows the logs' tails.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[tuple[subprocess.Popen[Any], list[Path]]] = []

    def start(
        self,
        command: Sequence[str],
        *,
        name: str | None = None,
        env: dict[str, str | None] | None = None,
        split_output: bool = False,
        **popen: Any,
    ) -> subprocess.Popen[Any]:
        """Start ``command``; its environment is this process's, ``PYTHONPATH``
        the repository root, and ``env`` over both (a None value removes the
        variable).

        ``name``: the log's name, by default ``process-<n>``. ``popen``: further
        :class:`subprocess.Popen` arguments; one naming ``stdout`` leaves only
        stderr to the log.
        """
        name = name or f"process-{len(self.started)}"
        if split_output:
            paths = [self.directory / f"{name}.out", self.directory / f"{name}.err"]
        else:
            paths = [self.directory / f"{name}.log"]
        with contextlib.ExitStack() as files:
            logs = [files.enter_context(open(path, "wb")) for path in paths]
            if "stdout" in popen:
                outputs: dict[str, Any] = {"stderr": logs[0]}
            else:
                outputs = {"stdout": logs[0], "stderr": logs[-1]}
                if not split_output:
                    outputs["stderr"] = subprocess.STDOUT
            process = subprocess.Popen(
                list(command),
                cwd=REPO_ROOT,
                env=environment(env),
                **outputs,
                **popen,
            )
        self.started.append((process, paths))
        return process

    def log(self, process: subprocess.Popen[Any]) -> str:
        """What ``process`` wrote so far (stdout and stderr, or its log)."""
        [paths] = [paths for started, paths in self.started if started is process]
        return "".join(path.read_text(errors="replace") for path in paths)

    def close(self) -> None:
        """SIGTERM every process still running, wait for each (SIGKILL after
        :data:`STOP_TIMEOUT`) and write the tail of each log to stderr."""
        for process, _ in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in self.started:
            _reap(process, STOP_TIMEOUT)
        for _, paths in self.started:
            for path in paths:
                text = path.read_text(errors="replace")[-4000:]
                sys.stderr.write(f"--- {path.name}\n{text}\n")


@pytest.fixture(name="processes")
def processes_fixture(tmp_path: Path) -> Iterator[Processes]:
    """The test's :class:`Processes`, logging in ``tmp_path``; stopped after it."""
    group = Processes(tmp_path)
    yield group
    group.close()


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    interval: float = 0.2,
    running: Iterable[subprocess.Popen[Any]] = (),
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns a truthy value, and return that value.

    Raises AssertionError when ``timeout`` seconds pass first, or at once when a
    process of ``running`` has ended. ``describe`` adds to the message (e.g. the
    output so far).
    """
    watched = list(running)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        ended = [process.args for process in watched if process.poll() is not None]
        if ended or time.monotonic() > deadline:
            problem = f"ended early: {ended}" if ended else "timed out"
            details = describe() if describe is not None else ""
            raise AssertionError(
                f"condition not met within {timeout} s ({problem})\n{details}"
            )
        time.sleep(interval)


def wait_for_files(
    directory: Path,
    pattern: str,
    *,
    count: int = 1,
    timeout: float = 60,
    **options: Any,
) -> list[Path]:
    """Wait until at least ``count`` files match ``pattern`` in ``directory`` (a
    step's flag, a process's ready file) and return them (:func:`wait_for`)."""
    return wait_for(  # type: ignore[no-any-return]
        lambda: (
            (found := sorted(directory.glob(pattern))) and len(found) >= count and found
        ),
        timeout=timeout,
        **options,
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
    _built_apps.append(app)
    prepare_database(app)
    return app


#: The apps :func:`worker_test_app` built during the running test, disposed
#: after it by ``tests/worker/conftest.py`` (:func:`dispose_built_apps`).
_built_apps: list[Any] = []


def dispose(app: Any) -> None:
    """End ``app``'s session and close its pooled connections: none outlives the
    test."""
    from tests.apps import basic

    with app.app_context():
        basic.db.session.remove()
        for engine in basic.db.engines.values():
            engine.dispose()


def dispose_built_apps() -> None:
    """:func:`dispose` every app :func:`worker_test_app` built since the last call.

    An app left undisposed keeps its pooled psycopg connections open until the
    garbage collector finds them during a later test, whose ``ResourceWarning``
    ("was deleted while still open") then fails that test.
    """
    while _built_apps:
        dispose(_built_apps.pop())


def create_workflow(app: Any, workflow_cls: Any, email: str) -> tuple[Any, Any]:
    """Create a ``workflow_cls`` workflow for a new hero ``email`` (published after
    the commit).

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


@contextlib.contextmanager
def reader(app: Any) -> Iterator[sa.Connection]:
    """A connection to ``app``'s database that reads the latest commits without
    taking any lock.

    The app's SQLite engine begins every transaction with ``BEGIN IMMEDIATE``
    (BTR-13), so a transactional read would queue behind a worker whose step body
    holds the write lock (its session's transaction, begun by the body's first
    query, lasts until the body ends) and would see the step only once it ended.
    In autocommit each statement reads the last committed state (WAL readers do not
    wait for the writer); on PostgreSQL and MariaDB it reads what it read before.
    """
    from tests.apps import basic

    with app.app_context(), basic.db.engine.connect() as connection:
        yield connection.execution_options(isolation_level="AUTOCOMMIT")


def execution_rows(app: Any, workflow_id: Any) -> list[Any]:
    """The workflow's stored executions in ``app``'s database, oldest first
    (mappings; :func:`tests.support.workflow.execution_rows`, which reads as
    :func:`reader` does)."""
    from tests.support import workflow as support

    with app.app_context():
        return support.execution_rows(workflow_id)


def workflow_state(app: Any, workflow_id: Any) -> str | None:
    """The workflow's stored state (:func:`reader`)."""
    from tests.apps import basic

    table = basic.geneva.Workflow.__table__
    with reader(app) as connection:
        state: str | None = connection.scalar(
            sa.select(table.c.state).where(table.c.id == workflow_id)
        )
        return state


def wait_for_state(
    app: Any, workflow_id: Any, state: str, *, timeout: float = 60
) -> None:
    """Poll until the workflow's stored state is ``state`` (:func:`wait_for`)."""
    wait_for(lambda: workflow_state(app, workflow_id) == state, timeout=timeout)
