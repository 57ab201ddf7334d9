"""What lets ``.venv/bin/pytest`` run the suite in parallel (pytest-xdist).

* :func:`default_to_parallel`: without ``-n`` the suite runs in ``-n auto`` worker
  processes with ``--dist loadgroup``; ``-n 0``, ``-p no:xdist``, ``--pdb``,
  ``--trace`` and ``-s`` run it in one process as before.
* :func:`make_scheduler`: with ``--dist loadgroup`` each module under
  :data:`MODULE_GROUPS` runs in one worker, every other test wherever a worker is
  free.
* :func:`worker_database_url`: on PostgreSQL and MariaDB each xdist worker works in
  a database of its own, named after the configured one (``test`` → ``test_gw0``),
  because every test empties our tables. :func:`ensure_database` creates it on the
  configured URL's server.
* :func:`worker_broker_url`: likewise each xdist worker has a Redis database of its
  own for the real-worker tests (``/15`` → ``/15`` for ``gw0``, ``/14`` for
  ``gw1``), which every such test empties.
* :func:`use_memory_temp_root`: ``tmp_path`` (the SQLite files) lives in
  ``/dev/shm`` where there is one, so that SQLite's fsync per commit costs nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

import pytest
import sqlalchemy as sa

__all__ = [
    "MODULE_GROUPS",
    "XDIST_WORKER",
    "default_to_parallel",
    "ensure_database",
    "make_scheduler",
    "scope_of",
    "use_memory_temp_root",
    "use_worker_broker",
    "worker_broker_url",
    "worker_database_url",
]

#: Each module here runs in one worker: the browser tests launch Chromium once
#: per module (``tests/browser/conftest.py``); a real-worker module's tests share
#: module-scoped worker processes and its xdist worker's broker database
#: (:func:`worker_broker_url`), while two modules run side by side, each on its
#: worker's broker and database.
MODULE_GROUPS = ("tests/browser/", "tests/worker/")
#: Redis databases a server has unless configured otherwise (``databases 16``).
REDIS_DATABASES = 16

#: ``gw0``, ``gw1``, ... in an xdist worker process, else ``""``.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

#: pytest makes its ``pytest-of-<user>`` directory there private (0o700).
MEMORY_TEMP_ROOT = Path("/dev/shm")  # noqa: S108 - see above
#: Free space ``/dev/shm`` needs to hold the run's temporary files.
MEMORY_TEMP_MIN_FREE = 2 * 1024**3


def default_to_parallel(config: pytest.Config) -> None:
    """Run in ``-n auto`` xdist workers unless the command line decided otherwise.

    Called from the conftest's ``pytest_cmdline_main`` before xdist's own, so that
    xdist resolves ``auto`` (``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides the
    count). Without an explicit ``--dist``, parallel runs use ``loadgroup``: tests
    marked ``xdist_group`` run in one worker.
    """
    if not config.pluginmanager.hasplugin("xdist") or XDIST_WORKER:
        return
    option = config.option
    interactive = (
        option.usepdb or getattr(option, "trace", False) or option.capture == "no"
    )
    if option.numprocesses is None and not interactive and not option.collectonly:
        option.numprocesses = "auto"
    if option.numprocesses and option.dist == "no":
        option.dist = "loadgroup"


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's ``loadscope`` scheduling with the scopes named above.

    xdist's own ``loadgroup`` reads ``xdist_group`` marks by rewriting node ids,
    which pytest 9 no longer allows; the groups here are found by path instead.
    Bigger scopes are handed out first (xdist's ``loadscope`` reordering), so the
    long real-worker and browser modules start at once.
    """
    from xdist.scheduler import LoadScopeScheduling

    class PathGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return PathGroupScheduling(config, log)


def scope_of(nodeid: str) -> str:
    """The scope :func:`make_scheduler` hands to one worker whole: the module of a
    test under :data:`MODULE_GROUPS`, else the test itself."""
    if nodeid.startswith(MODULE_GROUPS):
        return nodeid.split("::", 1)[0]
    return nodeid


def worker_database_url(url: str, worker: str = XDIST_WORKER) -> str:
    """``url`` with the xdist worker's name appended to its database name."""
    if not url or not worker:
        return url
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite" or not parsed.database:
        return url
    if parsed.database.endswith(f"_{worker}"):
        return url  # already this worker's (a subprocess of the worker)
    return parsed.set(database=f"{parsed.database}_{worker}").render_as_string(
        hide_password=False
    )


def worker_broker_url(url: str, worker: str = XDIST_WORKER) -> str:
    """``url`` with a Redis database of the xdist worker's own.

    ``gw<n>`` gets the configured database's number minus ``n`` (modulo
    :data:`REDIS_DATABASES`): ``redis://host/15`` is ``/15`` for ``gw0`` and
    ``/14`` for ``gw1``. Other brokers (RabbitMQ: one test module uses it) and
    runs without xdist keep ``url``.

    Raises ``ValueError`` when ``url``'s path is not a database number.
    """
    if not url or not worker or not url.startswith(("redis://", "rediss://")):
        return url
    parts = urlsplit(url)
    configured = int(parts.path.strip("/") or 0)
    number = (configured - int(worker.removeprefix("gw"))) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{number}"))


#: Set in an xdist worker's environment once it chose its broker database: a
#: subprocess (which inherits it) keeps the broker URL its parent gave it.
BROKER_CHOSEN_VARIABLE = "GENEVA_TEST_BROKER_PER_WORKER"


def use_worker_broker(environ: Any = os.environ, worker: str = XDIST_WORKER) -> None:
    """Point ``GENEVA_TEST_BROKER_URL`` in ``environ`` at the xdist worker's own
    Redis database (:func:`worker_broker_url`), once per worker process tree.

    A subprocess that imports the conftest again finds
    :data:`BROKER_CHOSEN_VARIABLE` set and keeps the URL it was given: its
    worker's, or a test's own server's. Outside xdist nothing changes.
    """
    if not worker or environ.get(BROKER_CHOSEN_VARIABLE):
        return
    environ[BROKER_CHOSEN_VARIABLE] = worker
    if environ.get("GENEVA_TEST_BROKER_URL"):
        environ["GENEVA_TEST_BROKER_URL"] = worker_broker_url(
            environ["GENEVA_TEST_BROKER_URL"], worker
        )


def ensure_database(configured_url: str, url: str) -> None:
    """Create ``url``'s database on its server when it is missing.

    Connects to ``configured_url`` (the database the user configured, which
    exists) and creates the new one like it: on MariaDB with the same character
    set and collation.
    """
    if url == configured_url:
        return
    configured = sa.make_url(configured_url)
    wanted = sa.make_url(url).database
    engine = sa.create_engine(configured, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            quoted = connection.dialect.identifier_preparer.quote(wanted)
            if connection.dialect.name == "postgresql":
                exists = connection.scalar(
                    sa.text("SELECT 1 FROM pg_database WHERE datname = :name"),
                    {"name": wanted},
                )
                if not exists:
                    try:
                        connection.execute(sa.text(f"CREATE DATABASE {quoted}"))
                    except sa.exc.ProgrammingError:
                        # Another run created it meanwhile (a duplicate name).
                        if not connection.scalar(
                            sa.text("SELECT 1 FROM pg_database WHERE datname = :name"),
                            {"name": wanted},
                        ):
                            raise
            elif connection.dialect.name == "mysql":
                charset, collation = connection.execute(
                    sa.text(
                        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME"
                        " FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = :name"
                    ),
                    {"name": configured.database},
                ).one()
                connection.execute(
                    sa.text(
                        f"CREATE DATABASE IF NOT EXISTS {quoted}"
                        f" CHARACTER SET {charset} COLLATE {collation}"
                    )
                )
            else:  # pragma: no cover - the conftest supports these two servers
                raise pytest.UsageError(f"no per-worker database on {url}")
    finally:
        engine.dispose()


def use_memory_temp_root(config: pytest.Config) -> None:
    """Put pytest's numbered temporary directories in ``/dev/shm`` when it has room.

    Only when neither ``--basetemp`` nor ``PYTEST_DEBUG_TEMPROOT`` chose a place;
    pytest keeps its usual last three runs there (``pytest-of-<user>/``).
    """
    if config.option.basetemp or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
        return
    if XDIST_WORKER:
        return  # the controller hands each worker a directory inside its own
    try:
        usage = shutil.disk_usage(MEMORY_TEMP_ROOT)
    except OSError:
        return
    if usage.free >= MEMORY_TEMP_MIN_FREE and os.access(MEMORY_TEMP_ROOT, os.W_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMP_ROOT)
