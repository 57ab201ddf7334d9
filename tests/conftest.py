"""Fixtures: one app per test, on SQLite (default) or the server named by the environment.

``GENEVA_TEST_DATABASE_URL`` selects the database: unset → a SQLite file per test in
``tmp_path``; ``postgresql+psycopg://…`` or ``mysql+pymysql://…`` → that server, with
the schema built once per session by our own install migration, and our tables
emptied between tests. Tests marked ``@pytest.mark.backends("postgresql", ...)`` run
only on those dialects.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_geneva import reset_column_caches
from flask_geneva.db.install.units import OUR_TABLES
from tests.apps import basic
from tests.support import database_independence
from tests.support import parallel_runs

pytest_plugins = ["flask_geneva.pytest_plugin"]

#: The database the environment names (``""``: SQLite files).
CONFIGURED_DATABASE_URL = os.environ.get("GENEVA_TEST_DATABASE_URL", "")
#: This process's database: in an xdist worker, the configured one's name with the
#: worker's appended (``test_gw0``); subprocesses that the tests start see it too.
DATABASE_URL = parallel_runs.worker_database_url(CONFIGURED_DATABASE_URL)
if DATABASE_URL != CONFIGURED_DATABASE_URL:
    os.environ["GENEVA_TEST_DATABASE_URL"] = DATABASE_URL
# The real-worker tests' broker: in an xdist worker a Redis database of its own.
parallel_runs.use_worker_broker()
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Before xdist's own hook: it resolves the "auto" set here.
    parallel_runs.default_to_parallel(config)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    return parallel_runs.make_scheduler(config, log)


def pytest_configure(config: pytest.Config) -> None:
    parallel_runs.use_memory_temp_root(config)
    if DATABASE_URL != CONFIGURED_DATABASE_URL:
        parallel_runs.ensure_database(CONFIGURED_DATABASE_URL, DATABASE_URL)


def dialect_name() -> str:
    """``sqlite``, ``postgresql`` or ``mysql`` for the selected database."""
    if not DATABASE_URL:
        return "sqlite"
    return sa.make_url(DATABASE_URL).get_backend_name().replace("mariadb", "mysql")


#: The cyclic garbage collector's thresholds while the tests run (Python's own:
#: 2000, 10, 10 on 3.11): every test builds an app, engines and sessions, whose
#: allocations would start a collection every 2,000 objects, each walking the
#: young objects again. Measured on PostgreSQL, one process, tests/engine/operators,
#: tests/engine/executor and tests/admin/test_views.py: 72-77 s of user CPU with
#: Python's thresholds, 66-68 s with these and the collected modules frozen.
GC_THRESHOLDS = (10_000, 20, 20)


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection imported lives as long as the process: out of the
    # collector's sight (gc.freeze), so that no collection walks it again.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    current = dialect_name()
    if current != "sqlite":
        database_independence.deselect(config, items)
    for item in items:
        marker = item.get_closest_marker("backends")
        if marker is not None and current not in marker.args:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"only on {', '.join(marker.args)} (running on {current})"
                )
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    # A test marked database_independent runs on SQLite only; there it must
    # execute no statement of its own (tests/support/database_independence.py).
    if not database_independence.is_marked(item):
        return (yield)
    with database_independence.count_statements() as statements:
        result = yield
    if statements.value:
        pytest.fail(
            f"marked {database_independence.MARKER} but its body executed "
            f"{statements.value} statement(s): remove the mark, so that it runs on "
            "every database",
            pytrace=False,
        )
    return result


_server_schema_ready = False


def _prepare_server_schema(app: Flask) -> None:
    global _server_schema_ready
    if _server_schema_ready:
        return
    with app.app_context():
        basic.db.session.remove()
        try:
            from tests.support.schema_setup import drop_schema
            from tests.support.schema_setup import install_schema
        except ImportError:  # pragma: no cover - until the install helper exists
            basic.db.drop_all()
            basic.db.create_all()
        else:
            drop_schema(app)
            install_schema(app)
            # Hero tables are the test app's own, not ours.
            basic.User.__table__.drop(basic.db.engine, checkfirst=True)
            basic.User.__table__.create(basic.db.engine)
    reset_column_caches()
    _server_schema_ready = True


def _emptied_tables() -> list[sa.Table]:
    """flask_geneva's tables (``OUR_TABLES``, R-MIG-02) and the heroes', rows
    pointing at others first (the metadata's dependency order, reversed)."""
    names = OUR_TABLES | {basic.User.__table__.name}
    return [t for t in reversed(basic.db.metadata.sorted_tables) if t.name in names]


def _empty_tables(app: Flask) -> None:
    """Delete the rows an earlier test left, from the tables that hold any.

    One statement asks which tables hold rows (``EXISTS`` per table); only those
    get a ``DELETE``: most tests write to three or four of the tables, and a
    ``DELETE`` of an empty table still costs a round trip and, on MariaDB, a few
    milliseconds of the server's time.
    """
    tables = _emptied_tables()
    with app.app_context():
        basic.db.session.remove()
        with basic.db.engine.begin() as connection:
            holding = connection.execute(
                sa.select(*(sa.exists().select_from(table) for table in tables))
            ).one()
            for table, has_rows in zip(tables, holding, strict=True):
                if has_rows:
                    connection.execute(sa.delete(table))


def make_app(tmp_path: Any, **config: Any) -> Flask:
    """Create a test app on the selected database with ``config`` overrides."""
    from flask_geneva.admin.outcome_cache import forget_kept_hours
    from flask_geneva.admin.throughput_cache import forget_kept_buckets

    url = DATABASE_URL or f"sqlite:///{tmp_path / 'test.sqlite3'}"
    # Hours (and throughput buckets) an earlier test's overview kept in memory:
    # the server's tables were emptied, but the caches are keyed by the
    # database URL (R-ADM-54, R-ADM-58, R-ADM-130).
    forget_kept_hours()
    forget_kept_buckets()
    # Before the test's app: the template's own app must not be the last one
    # geneva.init_app saw.
    copied = not DATABASE_URL and _copy_sqlite_template(
        Path(str(tmp_path)) / "test.sqlite3", config
    )
    app = basic.create_app(url, **config)
    if DATABASE_URL:
        _prepare_server_schema(app)
        _empty_tables(app)
    elif not copied:
        with app.app_context():
            basic.db.create_all()
    reset_column_caches()
    _built_apps.append(app)
    return app


#: Every app :func:`make_app` built, in order; each test disposes those it
#: built itself (:func:`_dispose_apps_the_test_built`).
_built_apps: list[Flask] = []


def dispose_app(application: Flask) -> None:
    """Close the app's session and its engines' pooled connections."""
    with application.app_context():
        basic.db.session.remove()
        for engine in basic.db.engines.values():
            engine.dispose()


@pytest.fixture(autouse=True)
def _dispose_apps_the_test_built() -> Iterator[None]:
    """After each test, dispose the apps :func:`make_app` built during it.

    A test that builds apps of its own (a second app, one per setting tried)
    would leave their pools holding open connections until the garbage
    collector finds them during a later test, where psycopg's "was deleted
    while still open" ResourceWarning fails whichever test runs (warnings are
    errors here). Apps a module- or session-scoped fixture built before the
    test are left to that fixture.
    """
    first = len(_built_apps)
    yield
    built = _built_apps[first:]
    del _built_apps[first:]
    for application in built:
        dispose_app(application)


#: ``{metadata fingerprint: SQLite file}``: the schema built once per process.
_sqlite_templates: dict[tuple[Any, ...], Path] = {}


def _metadata_fingerprint() -> tuple[Any, ...]:
    """What ``create_all`` would build: each table's name, columns and indexes."""
    return tuple(
        (
            table.name,
            tuple(column.name for column in table.columns),
            tuple(sorted(str(index.name) for index in table.indexes)),
        )
        for table in basic.db.metadata.sorted_tables
    )


def _copy_sqlite_template(path: Path, config: dict[str, Any]) -> bool:
    """Give the test's new SQLite file ``path`` the schema ``db.create_all()``
    builds, by copying a file this process built once with ``create_all`` (one
    per set of tables). Returns whether it did.

    Not when ``path`` exists (a test making a second app on its file) or the test
    configures the engine or binds itself: ``create_all`` then runs as before.
    """
    if path.exists() or any(key.startswith("SQLALCHEMY_") for key in config):
        return False
    key = _metadata_fingerprint()
    template = _sqlite_templates.get(key)
    if template is None:
        directory = Path(tempfile.mkdtemp(prefix="geneva-sqlite-template-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        template = directory / "template.sqlite3"
        builder = basic.create_app(f"sqlite:///{template}")
        with builder.app_context():
            basic.db.create_all()
            basic.db.session.remove()
            basic.db.engine.dispose()
        # The last connection's close checkpointed the WAL into the file.
        assert not Path(f"{template}-wal").exists(), "template left a WAL file"
        _sqlite_templates[key] = template
    shutil.copyfile(template, path)
    return True


@pytest.fixture
def app_config() -> dict[str, Any]:
    """Extra app config for a test module (override the fixture to change it)."""
    return {}


@pytest.fixture
def app(tmp_path: Any, app_config: dict[str, Any]) -> Iterator[Flask]:
    """The Flask app (pytest-flask pushes a request context around each test)."""
    application = make_app(tmp_path, **app_config)
    yield application
    dispose_app(application)


@pytest.fixture
def db_session(app: Flask) -> Any:
    """The app's ``db.session`` (the same scoped session the code under test uses)."""
    return basic.db.session


@pytest.fixture
def user(app: Flask) -> Any:
    """A committed hero row."""
    hero = basic.User(email="hero@example.com")
    basic.db.session.add(hero)
    basic.db.session.commit()
    return hero


@pytest.fixture
def without_unit(app: Flask) -> Iterator[Callable[[str], None]]:
    """Drop an optional install unit from the test's database (R-DM-30):
    ``without_unit("add_worker_registry")`` (see ``tests/support/schema_units.py``).

    After the test the shared server schema is rebuilt for the next one.
    """
    global _server_schema_ready
    from tests.support.schema_units import drop_unit

    dropped: list[str] = []

    def drop(unit: str) -> None:
        dropped.append(unit)
        drop_unit(unit)

    yield drop
    if dropped:
        basic.db.session.remove()
        _server_schema_ready = False
        reset_column_caches()
