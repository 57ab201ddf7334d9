"""``flask geneva install`` + ``flask db upgrade`` build the SPEC §2 schema (§2.5).

The ``flask`` commands run in processes of their own against
``tests/apps/install_app.py``, in a temporary working directory, as a host
application would run them (forked from a server that imported the libraries once:
``tests/support/preloaded_commands.py``). The
database is the one ``GENEVA_TEST_DATABASE_URL`` names (a SQLite file in
``tmp_path`` when unset). On a server, our tables, ``alembic_version`` and the
host's ``accounts`` table are dropped before and after each test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.dialects import mysql

from flask_geneva.db.install.key_type import detect_key_type
from flask_geneva.db.install.revisions import write_revisions
from flask_geneva.db.install.units import OUR_TABLES
from flask_geneva.db.install.units import UNITS
from flask_geneva.ext.autogenerate import include_object
from flask_geneva.ext.autogenerate import register_autogenerate_filter
from tests.support.preloaded_commands import run_flask

REPO_ROOT = Path(__file__).resolve().parents[2]
DATABASE_URL = os.environ.get("GENEVA_TEST_DATABASE_URL", "")

WORKFLOWS = "geneva_drive_workflows"
STEP_EXECUTIONS = "geneva_drive_step_executions"
WORKFLOW_COLUMNS = {
    "id",
    "type",
    "hero_type",
    "hero_id",
    "state",
    "current_step_name",
    "next_step_name",
    "allow_multiple",
    "metadata",
    "started_at",
    "transitioned_at",
    "created_at",
    "updated_at",
    # Child workflows and results (R-CHD-01, R-CHD-10).
    "parent_workflow_id",
    "parent_execution_id",
    "parent_step_name",
    "child_key",
    "parent_close",
    "child_settled",
    "result",
    "deadline_at",
    "trace_context",
}
STEP_EXECUTION_COLUMNS = {
    "id",
    "workflow_id",
    "step_name",
    "state",
    "outcome",
    "scheduled_for",
    "started_at",
    "completed_at",
    "failed_at",
    "canceled_at",
    "skipped_at",
    "finished_at",
    "error_class_name",
    "error_message",
    "error_backtrace",
    "job_id",
    "metadata",
    "cursor",
    "continues_from_id",
    "worker_id",
    "signal_id",
    "waiting_since",
    "wait_deadline",
    "limit_holds",
    "created_at",
    "updated_at",
}
WORKFLOW_INDEXES = {
    "index_geneva_drive_workflows_on_type",
    "index_geneva_drive_workflows_on_state",
    "index_geneva_drive_workflows_on_hero_type_and_hero_id",
    "index_geneva_drive_workflows_unique_ongoing",
    "index_geneva_drive_workflows_on_type_and_state",
    "index_geneva_drive_workflows_on_created_at",
    "index_geneva_drive_workflows_on_transitioned_at_and_id",
    "index_geneva_drive_workflows_unique_child",
    "index_geneva_drive_workflows_deadline",
}
STEP_EXECUTION_INDEXES = {
    "index_geneva_drive_step_executions_on_workflow_id",
    "index_geneva_drive_step_executions_on_state",
    "index_geneva_drive_step_executions_on_scheduled_for",
    "index_geneva_drive_step_executions_scheduled",
    "index_geneva_drive_step_executions_on_workflow_and_created_at",
    "index_geneva_drive_step_executions_on_workflow_id_and_state",
    "index_geneva_drive_step_executions_on_finished_at",
    "index_geneva_drive_step_executions_on_continues_from_id",
    "index_geneva_drive_step_executions_on_worker_id",
    "index_geneva_drive_step_executions_one_active",
    "index_geneva_drive_step_executions_in_progress_started_at",
}
# The plain (non-unique) indexes and their columns, in order (R-DM-02, R-DM-07).
WORKFLOW_INDEX_COLUMNS = {
    "index_geneva_drive_workflows_on_type": ["type"],
    "index_geneva_drive_workflows_on_state": ["state"],
    "index_geneva_drive_workflows_on_hero_type_and_hero_id": ["hero_type", "hero_id"],
    "index_geneva_drive_workflows_on_type_and_state": ["type", "state"],
    "index_geneva_drive_workflows_on_created_at": ["created_at"],
    "index_geneva_drive_workflows_on_transitioned_at_and_id": ["transitioned_at", "id"],
    "index_geneva_drive_workflows_unique_child": [
        "parent_workflow_id",
        "parent_step_name",
        "child_key",
    ],
}
STEP_EXECUTION_INDEX_COLUMNS = {
    "index_geneva_drive_step_executions_on_workflow_id": ["workflow_id"],
    "index_geneva_drive_step_executions_on_state": ["state"],
    "index_geneva_drive_step_executions_on_scheduled_for": ["scheduled_for"],
    "index_geneva_drive_step_executions_scheduled": ["state", "scheduled_for"],
    "index_geneva_drive_step_executions_on_workflow_and_created_at": [
        "workflow_id",
        "created_at",
    ],
    "index_geneva_drive_step_executions_on_workflow_id_and_state": [
        "workflow_id",
        "state",
    ],
    "index_geneva_drive_step_executions_on_finished_at": ["finished_at"],
    "index_geneva_drive_step_executions_on_continues_from_id": ["continues_from_id"],
}
MAX_PROBES = 12
PROBE_TABLES = (
    *(f"probe_uuid_{i}" for i in range(MAX_PROBES)),
    "probe_bigint_0",
    "alembic_probe",
    "schema_probe",
    "ar_probe",
)
HOST_TABLES = (
    STEP_EXECUTIONS,  # its foreign key points at the workflows: dropped first
    *sorted(OUR_TABLES - {STEP_EXECUTIONS}),
    "alembic_version",
    "accounts",
    *PROBE_TABLES,
)


def _dialect(url: str) -> str:
    return sa.make_url(url).get_backend_name().replace("mariadb", "mysql")


def _drop_host_tables(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        quote = engine.dialect.identifier_preparer.quote
        with engine.begin() as connection:
            for table in HOST_TABLES:
                connection.execute(sa.text(f"DROP TABLE IF EXISTS {quote(table)}"))
    finally:
        engine.dispose()


def _invalidate_session_schema() -> None:
    # The conftest builds our tables once per session on a server; these tests
    # dropped them, so make the next app fixture build them again.
    for name in ("tests.conftest", "conftest"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_server_schema_ready"):
            module._server_schema_ready = False


@dataclass
class Host:
    """A host app working directory and its database, driven through ``flask``."""

    cwd: Path
    url: str
    key_type: str = "bigint"

    @property
    def dialect(self) -> str:
        return _dialect(self.url)

    @property
    def versions(self) -> Path:
        return self.cwd / "migrations" / "versions"

    def flask(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``flask --app tests.apps.install_app ARGS`` in the working directory."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
            "GENEVA_INSTALL_DATABASE_URL": self.url,
            "GENEVA_INSTALL_KEY_TYPE": self.key_type,
            "PYTHONWARNINGS": "ignore",
        }
        env.pop("FLASK_APP", None)
        result = run_flask(
            ["--app", "tests.apps.install_app", *args], cwd=self.cwd, env=env
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"flask {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
        return result

    def engine(self) -> sa.Engine:
        return sa.create_engine(self.url)

    def inspect(self) -> dict[str, Any]:
        """Columns, indexes, foreign keys of our tables, read fresh."""
        engine = self.engine()
        try:
            inspector = sa.inspect(engine)
            tables = set(inspector.get_table_names())
            found: dict[str, Any] = {"tables": tables}
            for table in (
                WORKFLOWS,
                STEP_EXECUTIONS,
                "geneva_drive_maintenance_runs",
                "geneva_drive_workers",
                "geneva_drive_outcome_hours",
                "geneva_drive_limit_keys",
                "geneva_drive_limit_waiters",
                "geneva_drive_limit_starts",
                "geneva_drive_child_counts",
                "geneva_drive_schedules",
                "geneva_drive_schedule_fires",
            ):
                if table not in tables:
                    continue
                found[table] = {
                    "columns": {c["name"]: c for c in inspector.get_columns(table)},
                    "indexes": {i["name"]: i for i in inspector.get_indexes(table)},
                    "foreign_keys": inspector.get_foreign_keys(table),
                    "primary_key": inspector.get_pk_constraint(table)[
                        "constrained_columns"
                    ],
                }
            return found
        finally:
            engine.dispose()

    def unit_files(self) -> dict[str, Path]:
        """``{unit name: file}`` of the geneva revisions in ``migrations/versions``."""
        files = {}
        for path in self.versions.glob("*_geneva_drive_*.py"):
            files[path.stem.split("_geneva_drive_", 1)[1]] = path
        return files

    def revision_of(self, unit: str) -> str:
        return self.unit_files()[unit].name.split("_", 1)[0]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    """A fresh host working directory on the selected database, cleaned up after."""
    url = DATABASE_URL or f"sqlite:///{tmp_path / 'host.sqlite3'}"
    if DATABASE_URL:
        _drop_host_tables(url)
    workdir = tmp_path / "host"
    workdir.mkdir()
    yield Host(workdir, url)
    if DATABASE_URL:
        _drop_host_tables(url)
        _invalidate_session_schema()


#: ``migrations/`` as ``flask db init`` and ``geneva install`` wrote it for the
#: first ``installed`` host of this process, per key type.
_installed_migrations: dict[str, Path] = {}


@pytest.fixture
def installed(host: Host, tmp_path_factory: pytest.TempPathFactory) -> Host:
    """The host after ``flask db init``, ``geneva install`` and ``db upgrade``.

    ``db init`` and ``geneva install`` only write files (see
    ``test_install_writes_one_revision_per_unit_without_touching_the_database``),
    into a directory whose database starts alike for every host: the files the
    first host of this process got are copied into the next ones. ``db upgrade``
    runs for each host.
    """
    template = _installed_migrations.get(host.key_type)
    if template is None:
        host.flask("db", "init")
        host.flask("geneva", "install")
        template = tmp_path_factory.mktemp("installed-migrations") / "migrations"
        shutil.copytree(host.cwd / "migrations", template)
        _installed_migrations[host.key_type] = template
    else:
        shutil.copytree(template, host.cwd / "migrations")
    host.flask("db", "upgrade")
    return host


def _add_host_revision_and_check(host: Host) -> str:
    """Autogenerate the host's own revision, apply it, run ``flask db check``.

    Returns the autogenerated revision's source.
    """
    before = set(host.versions.glob("*.py"))
    host.flask("db", "migrate", "-m", "accounts")
    created = set(host.versions.glob("*.py")) - before
    assert len(created) == 1, created
    source = created.pop().read_text()
    host.flask("db", "upgrade")
    check = host.flask("db", "check", check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr
    return source


# -- the schema ---------------------------------------------------------------------


def test_install_writes_one_revision_per_unit_without_touching_the_database(
    host: Host,
) -> None:
    """Install writes one revision per unit, in order, and no table (R-MIG-01/02)."""
    host.flask("db", "init")
    result = host.flask("geneva", "install")
    assert "flask db upgrade" in result.stdout
    files = host.unit_files()
    assert set(files) == {unit.name for unit in UNITS}
    assert WORKFLOWS not in host.inspect()["tables"]
    # Chained in R-MIG-02 order: each unit revises the previous one.
    previous = None
    for unit in UNITS:
        source = files[unit.name].read_text()
        assert f"down_revision = {previous!r}" in source
        assert "import flask_geneva" not in source
        assert "from flask_geneva" not in source
        previous = host.revision_of(unit.name)


def test_upgrade_creates_every_column_and_index_of_the_spec(installed: Host) -> None:
    """Both tables get every SPEC §2 column and index, on the columns the spec names
    (R-DM-01, R-DM-02, R-DM-07, R-DM-12, R-DM-13, R-DM-23).
    """
    schema = installed.inspect()
    workflows, executions = schema[WORKFLOWS], schema[STEP_EXECUTIONS]
    for table, expected in (
        (workflows, WORKFLOW_INDEX_COLUMNS),
        (executions, STEP_EXECUTION_INDEX_COLUMNS),
    ):
        assert {
            name: table["indexes"][name]["column_names"] for name in expected
        } == expected
    extra_workflow, extra_execution = set(), set()
    if installed.dialect == "mysql":
        extra_workflow, extra_execution = {"ongoing_unique_key"}, {"active_unique_key"}
    assert set(workflows["columns"]) == WORKFLOW_COLUMNS | extra_workflow
    assert set(executions["columns"]) == STEP_EXECUTION_COLUMNS | extra_execution
    assert set(workflows["indexes"]) >= WORKFLOW_INDEXES
    assert set(executions["indexes"]) >= STEP_EXECUTION_INDEXES
    assert workflows["columns"]["hero_type"]["nullable"]
    assert workflows["columns"]["hero_id"]["nullable"]
    # workflow_id references workflows ON DELETE CASCADE; continues_from_id has no
    # foreign key (R-DM-08, R-DM-13).
    [foreign_key] = executions["foreign_keys"]
    assert foreign_key["constrained_columns"] == ["workflow_id"]
    assert foreign_key["referred_table"] == WORKFLOWS
    assert foreign_key["options"].get("ondelete", "").upper() == "CASCADE"
    in_progress = executions["indexes"][
        "index_geneva_drive_step_executions_in_progress_started_at"
    ]
    if installed.dialect == "mysql":
        assert in_progress["column_names"] == ["state", "started_at"]
        # Every datetime column keeps microseconds (R-DM-23).
        fractions = {
            (table_name, column["name"]): column["type"].fsp
            for table_name, table in (
                (WORKFLOWS, workflows),
                (STEP_EXECUTIONS, executions),
            )
            for column in table["columns"].values()
            if isinstance(column["type"], mysql.DATETIME)
        }
        assert len(fractions) >= 15
        assert set(fractions.values()) == {6}, fractions
    else:
        assert in_progress["column_names"] == ["started_at"]
    # The deadline index: partial where the dialect has them (R-DL-10).
    deadline = workflows["indexes"]["index_geneva_drive_workflows_deadline"]
    if installed.dialect == "mysql":
        assert deadline["column_names"] == ["state", "deadline_at"]
    else:
        assert deadline["column_names"] == ["deadline_at"]
    if installed.dialect == "postgresql":
        assert executions["columns"]["cursor"]["type"].__visit_name__ == "JSONB"
    # The admin's recorded-error index: partial, so none on MariaDB (R-DM-16).
    recorded = "index_geneva_drive_step_executions_recorded_errors"
    if installed.dialect == "mysql":
        assert recorded not in executions["indexes"]
    else:
        assert executions["indexes"][recorded]["column_names"] == [
            "created_at",
            "id",
            "workflow_id",
            "error_class_name",
        ]
    # The executions' error class index: partial, so none on MariaDB (R-ADM-154).
    error_class = "index_geneva_drive_step_executions_on_error_class_name"
    if installed.dialect == "mysql":
        assert error_class not in executions["indexes"]
    else:
        assert executions["indexes"][error_class]["column_names"] == [
            "error_class_name"
        ]
    # The dispatcher's deferred index: partial, so none on MariaDB (R-DM-18).
    deferred = "index_geneva_drive_step_executions_deferred"
    if installed.dialect == "mysql":
        assert deferred not in executions["indexes"]
    else:
        assert executions["indexes"][deferred]["column_names"] == [
            "scheduled_for",
            "id",
        ]
    # The worker registry (R-WRK-01) and each worker's own dead-after (R-WRK-17).
    assert "geneva_drive_workers" in schema["tables"]
    assert schema["geneva_drive_workers"]["columns"]["dead_after_ms"]["nullable"]
    # Workflow signals (R-WSIG-02..04).
    assert "geneva_drive_signals" in schema["tables"]
    assert (
        "index_geneva_drive_step_executions_on_state_and_wait_deadline"
        in executions["indexes"]
    )
    # The last runs of the dispatcher and housekeeping (R-HK-40).
    runs = schema["geneva_drive_maintenance_runs"]
    assert set(runs["columns"]) == {
        "name",
        "run_id",
        "started_at",
        "finished_at",
        "outcome",
        "summary",
        "error",
        "hostname",
        "pid",
        "node_name",
        "last_succeeded_at",
    }
    # The admin's hourly outcome counts, keyed by hour, class and state (R-ADM-58).
    hours = schema["geneva_drive_outcome_hours"]
    assert set(hours["columns"]) == {
        "hour_start",
        "workflow_type",
        "state",
        "executions",
    }
    if installed.dialect == "mysql":
        assert hours["columns"]["hour_start"]["type"].fsp == 6
    # Flow control by limits (R-LIM-10/11): the key counters and the waiters.
    keys = schema["geneva_drive_limit_keys"]
    assert set(keys["columns"]) == {
        "limit_name",
        "limit_key",
        "running",
        "granted",
        "waiting",
        "concurrency",
        "rate",
        "per_ms",
        "rate_seq",
        "updated_at",
    }
    waiters = schema["geneva_drive_limit_waiters"]
    assert set(waiters["columns"]) == {
        "id",
        "limit_name",
        "limit_key",
        "execution_id",
        "workflow_id",
        "priority",
        "neg_priority",
        "queue",
        "waiting_since",
        "granted_at",
        "not_before",
    }
    assert waiters["indexes"]["index_geneva_drive_limit_waiters_queue"][
        "column_names"
    ] == [
        "limit_name",
        "limit_key",
        "granted_at",
        "neg_priority",
        "waiting_since",
        "id",
    ]
    starts = schema["geneva_drive_limit_starts"]
    assert set(starts["columns"]) == {"limit_name", "limit_key", "slot", "started_at"}
    # Child workflows (R-CHD-10): one counter row per parent; a child is unique
    # per (parent, step, key) (R-CHD-11).
    assert workflows["indexes"]["index_geneva_drive_workflows_unique_child"]["unique"]
    counts = schema["geneva_drive_child_counts"]
    assert set(counts["columns"]) == {
        "parent_workflow_id",
        "started",
        "settled",
        "failed",
        "waiting_execution_id",
        "wake_at_settled",
        "waiting_queue",
        "waiting_priority",
        "wake_due_at",
        "cancel_due_at",
        "updated_at",
    }
    assert counts["primary_key"] == ["parent_workflow_id"]
    # Schedules (R-SCHED-10): the fire's primary key decides who fires a time.
    schedules = schema["geneva_drive_schedules"]
    assert schedules["primary_key"] == ["name"]
    assert {
        "paused",
        "fire_after",
        "last_fire_at",
        "last_outcome",
        "operator_actions",  # R-SCHED-35
    } <= set(schedules["columns"])
    fires = schema["geneva_drive_schedule_fires"]
    assert fires["primary_key"] == ["schedule_name", "fire_at"]
    assert {"state", "hero_cursor", "started", "skipped", "error"} <= set(
        fires["columns"]
    )


def test_autogenerate_proposes_no_change_to_our_tables(installed: Host) -> None:
    """After install + upgrade, ``flask db migrate``/``check`` see only host changes.

    The host's own ``include_object`` (which hides other apps' tables) keeps
    working next to flask_geneva's filter (STYLE §8, R-DM-05/11).
    """
    source = _add_host_revision_and_check(installed)
    assert "accounts" in source
    assert "geneva_drive" not in source


# -- database-enforced invariants ----------------------------------------------------


_RAW = sa.MetaData()
_RAW_WORKFLOWS = sa.Table(
    WORKFLOWS,
    _RAW,
    sa.Column("id", sa.BigInteger, primary_key=True),
    *(
        sa.Column(name)
        for name in (
            "type",
            "hero_type",
            "hero_id",
            "state",
            "allow_multiple",
            "created_at",
            "updated_at",
        )
    ),
)
_RAW_EXECUTIONS = sa.Table(
    STEP_EXECUTIONS,
    _RAW,
    sa.Column("id", sa.BigInteger, primary_key=True),
    *(
        sa.Column(name)
        for name in (
            "workflow_id",
            "step_name",
            "state",
            "scheduled_for",
            "created_at",
            "updated_at",
        )
    ),
)


def _insert_workflow(connection: sa.Connection, **values: Any) -> Any:
    """INSERT a workflow row with Core, bypassing the ORM; returns its id."""
    now = sa.func.current_timestamp()
    row = {
        "type": "SignupWorkflow",
        "hero_type": "Account",
        "hero_id": 1,
        "state": "ready",
        "allow_multiple": False,
        "created_at": now,
        "updated_at": now,
        **values,
    }
    result = connection.execute(sa.insert(_RAW_WORKFLOWS).values(**row))
    return result.inserted_primary_key[0]


def _insert_execution(connection: sa.Connection, workflow_id: Any, state: str) -> None:
    """INSERT a step execution row with Core, bypassing the ORM."""
    now = sa.func.current_timestamp()
    connection.execute(
        sa.insert(_RAW_EXECUTIONS).values(
            workflow_id=workflow_id,
            step_name="first",
            state=state,
            scheduled_for=now,
            created_at=now,
            updated_at=now,
        )
    )


def _rejected(engine: sa.Engine, insert: Any) -> bool:
    try:
        with engine.begin() as connection:
            insert(connection)
    except sa.exc.IntegrityError:
        return True
    return False


def test_database_rejects_a_second_ongoing_workflow_for_a_hero(
    installed: Host,
) -> None:
    """The unique-ongoing index is enforced by the database (R-DM-03..06, BTR-14)."""
    engine = installed.engine()
    try:
        with engine.begin() as connection:
            _insert_workflow(connection)
        assert _rejected(engine, _insert_workflow)
        assert _rejected(engine, lambda c: _insert_workflow(c, state="paused"))
        with engine.begin() as connection:
            # Terminal rows, allow_multiple rows and NULL heroes never collide.
            _insert_workflow(connection, state="finished")
            _insert_workflow(connection, state="canceled")
            _insert_workflow(connection, allow_multiple=True)
            _insert_workflow(connection, allow_multiple=True)
            _insert_workflow(connection, hero_type=None, hero_id=None)
            _insert_workflow(connection, hero_type=None, hero_id=None)
            # Another hero or another class is another key.
            _insert_workflow(connection, hero_id=2)
            _insert_workflow(connection, type="OtherWorkflow")
            # Values that would meet when joined with '-' stay apart (BTR-14).
            _insert_workflow(connection, type="A-B", hero_type="C")
            _insert_workflow(connection, type="A", hero_type="B-C")
    finally:
        engine.dispose()


def test_database_rejects_a_second_active_execution_of_a_workflow(
    installed: Host,
) -> None:
    """At most one scheduled/in_progress execution per workflow (R-DM-09..11)."""
    engine = installed.engine()
    try:
        with engine.begin() as connection:
            workflow_id = _insert_workflow(connection)
            other_id = _insert_workflow(connection, hero_id=2)
            _insert_execution(connection, workflow_id, "scheduled")
        assert _rejected(
            engine, lambda c: _insert_execution(c, workflow_id, "scheduled")
        )
        assert _rejected(
            engine, lambda c: _insert_execution(c, workflow_id, "in_progress")
        )
        with engine.begin() as connection:
            for state in ("completed", "failed", "canceled", "skipped", "completed"):
                _insert_execution(connection, workflow_id, state)
            _insert_execution(connection, other_id, "in_progress")
    finally:
        engine.dispose()


def _waiting_then_scheduled_rejected(engine: sa.Engine) -> bool:
    """Whether the database refuses a ``scheduled`` row beside a ``waiting`` one."""
    with engine.begin() as connection:
        workflow_id = _insert_workflow(connection, hero_id=77, allow_multiple=True)
        _insert_execution(connection, workflow_id, "waiting")
    return _rejected(engine, lambda c: _insert_execution(c, workflow_id, "scheduled"))


def test_the_widened_index_rejects_a_second_execution_beside_a_waiting_one(
    installed: Host,
) -> None:
    """With ``widen_one_active_to_waiting`` PostgreSQL and SQLite refuse a second
    scheduled/in_progress/waiting execution of a workflow; below it (and always
    on MySQL/MariaDB) only the engine's workflow lock keeps the rule
    (R-DM-17, R-WSIG-16)."""
    engine = installed.engine()
    try:
        enforced = installed.dialect in ("postgresql", "sqlite")
        assert _waiting_then_scheduled_rejected(engine) is enforced
        with engine.begin() as connection:
            workflow_id = _insert_workflow(connection, hero_id=78, allow_multiple=True)
            _insert_execution(connection, workflow_id, "waiting")
            # Finished rows still never collide.
            _insert_execution(connection, workflow_id, "completed")
            _insert_execution(connection, workflow_id, "canceled")
        installed.flask(
            "db", "downgrade", installed.revision_of("add_worker_dead_after")
        )
        # The narrow index again: a waiting row no longer blocks a scheduled one.
        assert _waiting_then_scheduled_rejected(engine) is False
        assert (
            _rejected(
                engine, lambda c: _insert_execution(c, workflow_id, "in_progress")
            )
            is False
        )
    finally:
        engine.dispose()


def test_widening_names_the_workflows_that_already_break_the_rule(
    installed: Host,
) -> None:
    """The upgrade refuses, naming the workflow ids, when a workflow already
    has a waiting execution beside an active one; once they are canceled it
    succeeds, and running it again changes nothing (R-DM-17, R-MIG-04)."""
    installed.flask("db", "downgrade", installed.revision_of("add_worker_dead_after"))
    engine = installed.engine()
    try:
        with engine.begin() as connection:
            workflow_id = _insert_workflow(connection, hero_id=79, allow_multiple=True)
            _insert_execution(connection, workflow_id, "waiting")
            _insert_execution(connection, workflow_id, "scheduled")
        result = installed.flask("db", "upgrade", check=False)
        if installed.dialect == "mysql":
            assert result.returncode == 0, result.stderr
            return
        assert result.returncode != 0
        assert "cannot be built" in result.stderr
        assert f": {workflow_id}." in result.stderr
        with engine.begin() as connection:
            connection.execute(
                sa.update(_RAW_EXECUTIONS)
                .where(_RAW_EXECUTIONS.c.workflow_id == workflow_id)
                .where(_RAW_EXECUTIONS.c.state == "waiting")
                .values(state="canceled")
            )
        installed.flask("db", "upgrade")
        indexes = installed.inspect()[STEP_EXECUTIONS]["indexes"]
        assert "index_geneva_drive_step_executions_one_active" in indexes
        assert not any(name.endswith("_building") for name in indexes)
        assert _waiting_then_scheduled_rejected(engine)
        # Idempotent (R-MIG-04): re-running the unit on the widened index
        # changes nothing.
        installed.flask("db", "stamp", installed.revision_of("add_worker_dead_after"))
        installed.flask("db", "upgrade")
        assert _waiting_then_scheduled_rejected(engine)
    finally:
        engine.dispose()


# -- re-running install (R-MIG-03/04/05) ---------------------------------------------


def test_running_install_again_writes_nothing(installed: Host) -> None:
    """A second install finds every unit and writes no file (R-MIG-03)."""
    before = sorted(installed.versions.iterdir())
    result = installed.flask("geneva", "install")
    assert "Nothing to write" in result.stdout
    assert sorted(installed.versions.iterdir()) == before


def test_install_after_a_partial_install_adds_exactly_the_missing_units(
    host: Host,
) -> None:
    """An older installation gets only the missing units, idempotently (R-MIG-03..05).

    Units 1-3 are applied first; a host revision follows; install then writes
    units 4-9 after that head. Units 4-6 find their columns already created by
    units 1-2 and skip them (R-MIG-05); 8 and 9 add what was missing.
    """
    host.flask("db", "init")
    write_revisions(host.cwd / "migrations", key_type="bigint", units=UNITS[:3])
    host.flask("db", "upgrade")
    partial = host.inspect()[STEP_EXECUTIONS]
    assert {"finished_at", "error_class_name", "metadata"} <= set(partial["columns"])
    assert "cursor" not in partial["columns"]
    assert "continues_from_id" not in partial["columns"]
    assert (
        "index_geneva_drive_step_executions_in_progress_started_at"
        not in partial["indexes"]
    )
    # Meanwhile the host autogenerates its own revision: it must not pick up the
    # columns and indexes the missing units will add.
    host.flask("db", "migrate", "-m", "accounts")
    [host_revision] = host.versions.glob("*_accounts.py")
    assert "geneva_drive" not in host_revision.read_text()
    host.flask("db", "upgrade")
    host_head = host.flask("db", "heads").stdout.split()[0]

    result = host.flask("geneva", "install")
    assert f"Already present: 3 of {len(UNITS)}" in result.stdout
    written = [line for line in result.stdout.splitlines() if "wrote" in line]
    assert [line.rsplit("_geneva_drive_", 1)[1] for line in written] == [
        f"{unit.name}.py" for unit in UNITS[3:]
    ]
    assert f"down_revision = {host_head!r}" in (
        host.unit_files()["add_error_class_name"].read_text()
    )
    host.flask("db", "upgrade")
    schema = host.inspect()
    assert set(schema[STEP_EXECUTIONS]["indexes"]) >= STEP_EXECUTION_INDEXES
    assert "cursor" in schema[STEP_EXECUTIONS]["columns"]
    check = host.flask("db", "check", check=False)
    assert check.returncode == 0, check.stdout + check.stderr


_BACKFILL_EXECUTIONS = sa.Table(
    STEP_EXECUTIONS,
    sa.MetaData(),
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("workflow_id", sa.BigInteger),
    sa.Column("step_name", sa.String(255)),
    sa.Column("state", sa.String(255)),
    *(
        sa.Column(name, sa.DateTime())
        for name in (
            "scheduled_for",
            "completed_at",
            "failed_at",
            "canceled_at",
            "skipped_at",
            "created_at",
            "updated_at",
        )
    ),
)


def test_the_finished_at_unit_backfills_the_first_state_timestamp(host: Host) -> None:
    """Unit 3 sets a NULL finished_at to the first non-null of completed_at, failed_at,
    canceled_at, skipped_at; a row without any keeps NULL (R-MIG-06).
    """
    host.flask("db", "init")
    write_revisions(host.cwd / "migrations", key_type="bigint", units=UNITS[:2])
    host.flask("db", "upgrade")
    # Naive UTC, as the migrations store it (R-DM-23).
    t0 = datetime(2024, 5, 1, 12, tzinfo=UTC).replace(tzinfo=None)
    stamps = {
        name: t0.replace(hour=hour)
        for hour, name in enumerate(
            ("completed_at", "failed_at", "canceled_at", "skipped_at"), start=13
        )
    }
    rows = {
        "completed": {"completed_at": stamps["completed_at"]},
        "failed": {"failed_at": stamps["failed_at"]},
        "canceled": {"canceled_at": stamps["canceled_at"]},
        "skipped": {"skipped_at": stamps["skipped_at"]},
        # Several set: the first in the rule's order wins, not the earliest.
        "mixed": {
            "skipped_at": t0,
            "canceled_at": stamps["canceled_at"],
            "failed_at": stamps["failed_at"],
        },
        "scheduled": {},
    }
    engine = host.engine()
    try:
        with engine.begin() as connection:
            workflow_id = _insert_workflow(connection, state="finished")
            for step_name, values in rows.items():
                connection.execute(
                    sa.insert(_BACKFILL_EXECUTIONS).values(
                        workflow_id=workflow_id,
                        step_name=step_name,
                        state="scheduled" if step_name == "scheduled" else "completed",
                        scheduled_for=t0,
                        created_at=t0,
                        updated_at=t0,
                        **values,
                    )
                )
        host.flask("geneva", "install")
        host.flask("db", "upgrade")
        finished_at = sa.column("finished_at", sa.DateTime())
        with engine.connect() as connection:
            found = dict(
                connection.execute(
                    sa.select(sa.column("step_name"), finished_at).select_from(
                        sa.table(STEP_EXECUTIONS)
                    )
                ).all()
            )
    finally:
        engine.dispose()
    assert {
        name: value and value.replace(tzinfo=None) for name, value in found.items()
    } == {
        "completed": stamps["completed_at"],
        "failed": stamps["failed_at"],
        "canceled": stamps["canceled_at"],
        "skipped": stamps["skipped_at"],
        "mixed": stamps["failed_at"],
        "scheduled": None,
    }


def _create_legacy_workflows_table(url: str) -> None:
    """A pre-0.5 workflows table: hero columns NOT NULL, no metadata column."""
    key = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")
    metadata = sa.MetaData()
    sa.Table(
        WORKFLOWS,
        metadata,
        sa.Column("id", key, primary_key=True),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("hero_type", sa.String(255), nullable=False),
        sa.Column("hero_id", key, nullable=False),
        sa.Column("state", sa.String(255), nullable=False, server_default="ready"),
        sa.Column("current_step_name", sa.String(255)),
        sa.Column("next_step_name", sa.String(255)),
        sa.Column(
            "allow_multiple", sa.Boolean(), nullable=False, server_default=sa.false()
        ),
        sa.Column("started_at", timestamp),
        sa.Column("transitioned_at", timestamp),
        sa.Column("created_at", timestamp, nullable=False),
        sa.Column("updated_at", timestamp, nullable=False),
    )
    engine = sa.create_engine(url)
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()


def test_allow_null_hero_upgrades_a_legacy_table_and_keeps_executions(
    host: Host,
) -> None:
    """Unit 7 makes hero columns nullable without losing step executions (R-MIG-07).

    On SQLite this is the table swap, run with foreign keys off: the executions
    referencing the rebuilt table (ON DELETE CASCADE) survive.
    """
    _create_legacy_workflows_table(host.url)
    host.flask("db", "init")
    write_revisions(host.cwd / "migrations", key_type="bigint", units=UNITS[:6])
    host.flask("db", "upgrade")
    engine = host.engine()
    try:
        with engine.begin() as connection:
            workflow_id = _insert_workflow(connection)
            _insert_execution(connection, workflow_id, "completed")
            _insert_execution(connection, workflow_id, "scheduled")
        assert _rejected(engine, lambda c: _insert_workflow(c, hero_id=None))

        host.flask("geneva", "install")
        host.flask("db", "upgrade")

        with engine.connect() as connection:
            count = connection.execute(
                sa.select(sa.func.count()).select_from(sa.table(STEP_EXECUTIONS))
            ).scalar_one()
        assert count == 2
        with engine.begin() as connection:
            _insert_workflow(connection, hero_type=None, hero_id=None)
        assert _rejected(engine, _insert_workflow)
    finally:
        engine.dispose()
    schema = host.inspect()
    assert set(schema[WORKFLOWS]["indexes"]) >= WORKFLOW_INDEXES
    _add_host_revision_and_check(host)


# -- downgrade (R-MIG-07/08/09) ---------------------------------------------------


def test_the_worker_dead_after_unit_downgrades_and_upgrades_again(
    installed: Host,
) -> None:
    """``add_worker_dead_after`` adds the nullable column; its downgrade drops
    only it, and upgrading again adds it back (R-WRK-17, R-MIG-07)."""
    installed.flask(
        "db", "downgrade", installed.revision_of("add_recorded_error_index")
    )
    workers = installed.inspect()["geneva_drive_workers"]
    assert "dead_after_ms" not in workers["columns"]
    assert "last_heartbeat_at" in workers["columns"]
    installed.flask("db", "upgrade")
    workers = installed.inspect()["geneva_drive_workers"]
    assert workers["columns"]["dead_after_ms"]["nullable"]


def test_downgrade_removes_the_units_and_finally_the_tables(installed: Host) -> None:
    """Downgrades undo units 9 and 8, then drop the tables (R-MIG-07..09).

    On SQLite unit 7 is irreversible: downgrading through it fails with a message
    naming the way out (stamp past it), after which the tables can be dropped.
    """
    installed.flask("db", "downgrade", installed.revision_of("allow_null_hero"))
    executions = installed.inspect()[STEP_EXECUTIONS]
    assert "cursor" not in executions["columns"]
    assert "continues_from_id" not in executions["columns"]
    assert (
        "index_geneva_drive_step_executions_in_progress_started_at"
        not in executions["indexes"]
    )
    if installed.dialect == "sqlite":
        result = installed.flask("db", "downgrade", "base", check=False)
        assert result.returncode != 0
        assert "irreversible (R-MIG-07)" in result.stderr
        assert WORKFLOWS in installed.inspect()["tables"]
        installed.flask("db", "stamp", installed.revision_of("add_workflow_metadata"))
    installed.flask("db", "downgrade", "base")
    tables = installed.inspect()["tables"]
    assert WORKFLOWS not in tables
    assert STEP_EXECUTIONS not in tables


# -- key type (R-DM-20..22) ------------------------------------------------------------


def _uuid_type(url: str) -> str:
    return {"postgresql": "UUID", "mysql": "CHAR(36)"}.get(_dialect(url), "UUID")


def _create_uuid_probes(engine: sa.Engine, count: int, start: int = 0) -> None:
    uuid_type = _uuid_type(str(engine.url.render_as_string(hide_password=False)))
    with engine.begin() as connection:
        for i in range(start, start + count):
            connection.execute(
                sa.text(f"CREATE TABLE probe_uuid_{i} (id {uuid_type} PRIMARY KEY)")
            )


def _uuid_probes_to_tie(engine: sa.Engine) -> int:
    """UUID tables to add so UUID and other ``id`` columns are equally many.

    Server test databases hold other test files' tables, which count too.
    """
    baseline = detect_key_type(engine)
    return max(len(baseline.other_columns) - len(baseline.uuid_columns), 0)


def _make_host_look_uuid(url: str) -> None:
    """Add UUID-keyed tables until UUID ``id`` columns are the majority (R-DM-20)."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text("CREATE TABLE probe_bigint_0 (id BIGINT)"))
        _create_uuid_probes(engine, _uuid_probes_to_tie(engine) + 1)
    finally:
        engine.dispose()


def test_key_type_detection_counts_the_id_columns_of_host_tables(host: Host) -> None:
    """UUID iff more UUID than other ``id`` columns, prefixes ignored (R-DM-20)."""
    engine = host.engine()
    try:
        if not DATABASE_URL:
            assert detect_key_type(engine).reason == ("the database has no tables yet")
        assert detect_key_type(engine).key_type == "bigint"
        with engine.begin() as connection:
            connection.execute(sa.text("CREATE TABLE probe_bigint_0 (id BIGINT)"))
            # Ignored prefixes (R-DM-20): these never count.
            for name in ("alembic_probe", "schema_probe", "ar_probe"):
                connection.execute(
                    sa.text(f"CREATE TABLE {name} (id {_uuid_type(host.url)})")
                )
        tie = _uuid_probes_to_tie(engine)
        assert tie >= 1
        _create_uuid_probes(engine, tie)
        detection = detect_key_type(engine)
        assert detection.key_type == "bigint"
        assert len(detection.uuid_columns) == len(detection.other_columns)
        assert "ar_probe" not in detection.uuid_columns
        with engine.begin() as connection:
            # char(36) counts as UUID on every database.
            connection.execute(sa.text(f"CREATE TABLE probe_uuid_{tie} (id CHAR(36))"))
        detection = detect_key_type(engine)
        assert detection.key_type == "uuid"
        assert f"probe_uuid_{tie}" in detection.uuid_columns
    finally:
        engine.dispose()


@pytest.mark.backends("postgresql")
def test_uuid_server_default_is_the_strictly_most_frequent_one(host: Host) -> None:
    """The most frequent UUID default is reused only when it leads (R-DM-21)."""
    engine = host.engine()
    try:
        with engine.begin() as connection:
            for name in ("probe_uuid_0", "probe_uuid_1"):
                connection.execute(
                    sa.text(
                        f"CREATE TABLE {name} (id uuid PRIMARY KEY "
                        "DEFAULT gen_random_uuid())"
                    )
                )
            connection.execute(
                sa.text(
                    "CREATE TABLE probe_uuid_2 (id uuid PRIMARY KEY DEFAULT "
                    "'00000000-0000-0000-0000-000000000000'::uuid)"
                )
            )
        # Other test files' tables count too: make sure UUIDs are the majority.
        _create_uuid_probes(engine, _uuid_probes_to_tie(engine) + 1, start=3)
        assert detect_key_type(engine).server_default == "gen_random_uuid()"
        with engine.begin() as connection:
            connection.execute(
                sa.text("ALTER TABLE probe_uuid_1 ALTER id DROP DEFAULT")
            )
        assert detect_key_type(engine).server_default is None
    finally:
        engine.dispose()


def test_install_refuses_a_key_type_the_app_does_not_use(host: Host) -> None:
    """A key type other than ``Geneva(key_type=...)``'s is refused (R-DM-22)."""
    host.flask("db", "init")
    _make_host_look_uuid(host.url)
    result = host.flask("geneva", "install", check=False)
    assert result.returncode != 0
    assert "the detected key type is 'uuid'" in result.stderr
    assert "pass key_type='uuid' to Geneva(...)" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = host.flask("geneva", "install", "--key-type", "uuid", check=False)
    assert result.returncode != 0
    assert "--key-type uuid does not match" in result.stderr
    assert host.unit_files() == {}


def test_uuid_install_matches_a_uuid_app(host: Host) -> None:
    """A UUID host gets keys matching ``Geneva(key_type="uuid")`` (R-DM-20..22)."""
    host.key_type = "uuid"
    host.flask("db", "init")
    _make_host_look_uuid(host.url)
    result = host.flask("geneva", "install")
    assert "Key type: uuid" in result.stdout
    assert "KEY_TYPE = 'uuid'" in host.unit_files()["create_workflows"].read_text()
    _drop_host_tables_except_ours(host.url)
    host.flask("db", "upgrade")
    _add_host_revision_and_check(host)


def _drop_host_tables_except_ours(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            for table in PROBE_TABLES:
                connection.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
    finally:
        engine.dispose()


# -- CLI errors ------------------------------------------------------------------------


def test_install_without_a_migrations_directory_asks_for_db_init(host: Host) -> None:
    """Install needs ``flask db init`` first and says so in one line (R-MIG-01)."""
    result = host.flask("geneva", "install", check=False)
    assert result.returncode != 0
    assert "run `flask db init` first" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_install_refuses_migrations_with_several_heads(host: Host) -> None:
    """Revisions follow a single head; several heads are refused (R-MIG-01)."""
    host.flask("db", "init")
    host.flask("db", "revision", "-m", "one")
    host.flask("db", "revision", "-m", "two", "--head", "base", "--splice")
    result = host.flask("geneva", "install", check=False)
    assert result.returncode != 0
    assert "flask db merge heads" in result.stderr
    assert host.unit_files() == {}


# -- autogenerate filter wiring (in-process) ------------------------------------------


def _host_filter_calls() -> tuple[list[str], Any]:
    calls: list[str] = []

    def host_filter(
        obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
    ) -> bool:
        calls.append(str(name))
        return name != "hidden_by_host"

    return calls, host_filter


@pytest.mark.parametrize("migrate_first", [True, False])
def test_autogenerate_filter_wraps_the_hosts_filter(migrate_first: bool) -> None:
    """Our filter is combined with the host's, whichever is set up first (STYLE §2)."""
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = "sqlite://"
    db = SQLAlchemy(app)
    calls, host_filter = _host_filter_calls()
    if migrate_first:
        Migrate(app, db, include_object=host_filter)
        register_autogenerate_filter(app)
    else:
        register_autogenerate_filter(app)
        Migrate(app, db, include_object=host_filter)
    with app.app_context():
        combined = app.extensions["migrate"].configure_args["include_object"]
    assert combined is not host_filter
    assert combined._geneva_wrapped is host_filter
    table = sa.Table(WORKFLOWS, sa.MetaData(), sa.Column("ongoing_unique_key"))
    hidden_column = table.c.ongoing_unique_key
    assert not combined(hidden_column, "ongoing_unique_key", "column", True, None)
    assert calls == []
    other = sa.Table("accounts", sa.MetaData(), sa.Column("id"))
    assert combined(other.c.id, "id", "column", True, None)
    assert not combined(other, "hidden_by_host", "table", True, None)
    assert calls == ["id", "hidden_by_host"]


def test_filter_hides_dialect_specific_objects_only() -> None:
    """Generated key columns and dialect-specific indexes are hidden (R-DM-05/11/12)."""
    metadata = sa.MetaData()
    workflows = sa.Table(
        WORKFLOWS,
        metadata,
        sa.Column("type"),
        sa.Column("state"),
        sa.Column("ongoing_unique_key"),
    )
    unique = sa.Index("index_geneva_drive_workflows_unique_ongoing", workflows.c.type)
    plain = sa.Index("index_geneva_drive_workflows_on_state", workflows.c.state)
    assert not include_object(unique, unique.name, "index", True, None)
    assert include_object(plain, plain.name, "index", True, None)
    assert not include_object(
        workflows.c.ongoing_unique_key, "ongoing_unique_key", "column", True, None
    )
    assert include_object(workflows.c.type, "type", "column", True, None)
