"""The last runs of the dispatcher and housekeeping, and their warnings (R-HK-40..45)."""

from __future__ import annotations

import json
import os
import threading
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.db import maintenance_runs as maintenance_rows
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.engine.operators import maintenance_runs
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.common_workflows import CountingOneStep
from tests.support.housekeeping import T0
from tests.support.housekeeping import RecordingMetrics
from tests.support.workflow import make_user

RUNS_TABLE = "geneva_drive_maintenance_runs"


def _runs():
    return db.metadata.tables[RUNS_TABLE]


def _rows():
    db.session.remove()
    with db.engine.connect() as connection:
        return {row.name: row for row in maintenance_rows.run_rows(connection, _runs())}


def _last_runs():
    context = current_context()
    return maintenance_runs.last_runs(context.session, config=context.settings)


def test_a_dispatcher_run_and_a_housekeeping_run_are_recorded(app):
    """Each run writes its start, end, outcome, counts and process (R-HK-40/41)."""
    with clock.frozen(T0):
        assert geneva.dispatch_due() == 0
        summary = run_housekeeping()
    rows = _rows()
    dispatcher, housekeeping = rows["dispatcher"], rows["housekeeping"]
    assert (dispatcher.outcome, housekeeping.outcome) == ("succeeded", "succeeded")
    assert json.loads(dispatcher.summary) == {"published": 0, "recovered": 0}
    assert json.loads(housekeeping.summary) == summary
    for row in (dispatcher, housekeeping):
        assert row.started_at == row.finished_at == row.last_succeeded_at == T0
        assert (row.pid, row.node_name, row.error) == (os.getpid(), None, None)
        assert row.hostname
    runs = _last_runs()
    assert runs["warnings"] == []
    assert runs["dispatcher"]["summary"] == {"published": 0, "recovered": 0}
    assert runs["dispatcher"]["outcome"] == "succeeded"
    assert runs["housekeeping"]["interval_seconds"] == 1800.0


def test_a_run_that_raises_is_recorded_as_failed(app):
    """A failed run keeps the last success and names its error; the error
    propagates (R-HK-41, R-HK-43)."""
    config = current_context().settings
    with clock.frozen(T0) as frozen:
        run_housekeeping()
        frozen.advance(timedelta(seconds=5))

        def failing_run():
            with maintenance_runs.recorded_run(
                current_context().session, maintenance_runs.HOUSEKEEPING, config=config
            ) as record:
                record.summary["workflows_cleaned_up"] = 3
                raise RuntimeError("disk full\nsecond line")

        with pytest.raises(RuntimeError, match="disk full"):
            failing_run()
        row = _rows()["housekeeping"]
        assert (row.outcome, row.error) == ("failed", "RuntimeError: disk full")
        assert row.started_at == row.finished_at == T0 + timedelta(seconds=5)
        assert row.last_succeeded_at == T0
        assert json.loads(row.summary) == {"workflows_cleaned_up": 3}
        warnings = _last_runs()["warnings"]
    assert "The last housekeeping run failed: RuntimeError: disk full" in warnings


def test_a_superseded_run_does_not_overwrite_the_later_one(app):
    """Two overlapping runs: the one that started last owns the row; the
    earlier one's end is not written over it (R-HK-41)."""
    config = current_context().settings
    with (
        clock.frozen(T0) as frozen,
        maintenance_runs.recorded_run(
            current_context().session, maintenance_runs.DISPATCHER, config=config
        ) as first,
    ):
        first.summary["published"] = 1
        frozen.advance(timedelta(seconds=1))
        with maintenance_runs.recorded_run(
            current_context().session, maintenance_runs.DISPATCHER, config=config
        ) as second:
            second.summary["published"] = 2
        frozen.advance(timedelta(seconds=1))
    row = _rows()["dispatcher"]
    assert row.started_at == T0 + timedelta(seconds=1)
    assert json.loads(row.summary) == {"published": 2}
    assert (first.recorded, second.recorded) == (True, True)


def test_runs_starting_at_once_never_fail_on_the_key(app):
    """Concurrent starts of the same job are one upsert each: none raises, one
    row remains (R-HK-40; SQLite, PostgreSQL, MariaDB)."""
    table = _runs()
    count = 6
    barrier = threading.Barrier(count)
    errors = []
    db.session.remove()
    engine = db.engine

    def start(number):
        run = maintenance_rows.RunStart(
            name="dispatcher",
            run_id=str(uuid.uuid4()),
            started_at=T0 + timedelta(seconds=number),
            hostname=f"host-{number}",
            pid=number,
            node_name=None,
        )
        try:
            barrier.wait(timeout=30)
            with engine.begin() as connection:
                maintenance_rows.record_start(connection, table, run)
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    [row] = _rows().values()
    assert row.outcome == "running"
    assert row.hostname == f"host-{row.pid}"


@pytest.mark.parametrize(
    ("job", "interval", "setting"),
    [
        ("dispatcher", timedelta(seconds=30), "GENEVA_DISPATCH_INTERVAL = 30 s"),
        (
            "housekeeping",
            timedelta(minutes=30),
            "GENEVA_HOUSEKEEPING_INTERVAL = 30 min",
        ),
    ],
)
def test_a_job_not_run_for_two_intervals_is_a_warning(app, job, interval, setting):
    """No start within two intervals of the job: a warning naming the setting
    (R-HK-43); within them, none."""
    run = geneva.dispatch_due if job == "dispatcher" else run_housekeeping

    def about_job():
        return [w for w in _last_runs()["warnings"] if f"The {job} " in w]

    with clock.frozen(T0) as frozen:
        geneva.dispatch_due()
        run_housekeeping()
        frozen.advance(2 * interval)
        assert about_job() == []
        frozen.advance(timedelta(seconds=1))
        assert _last_runs()[job]["overdue"] is True
        [warning] = about_job()
        assert warning == (
            f"The {job} has not run for "
            f"{maintenance_runs.duration_text(2 * interval.total_seconds() + 1)}, "
            f"more than two intervals ({setting}): is Celery beat running with "
            f"flask_geneva.beat_schedule() (or `flask geneva {_command(job)}` from "
            "cron)?"
        )
        run()
        assert about_job() == []


def _command(job):
    return "dispatch" if job == "dispatcher" else "housekeeping"


def test_no_recorded_run_is_a_warning(app):
    """A job never recorded (beat not running since the install) is named (R-HK-43)."""
    runs = _last_runs()
    assert (runs["dispatcher"], runs["housekeeping"]) == (None, None)
    assert [w.split(":")[0] for w in runs["warnings"]] == [
        "No dispatcher run is recorded yet",
        "No housekeeping run is recorded yet",
    ]


def test_a_successful_run_sets_its_last_success_gauge(app):
    """``geneva_drive.<job>_last_success`` is the end of the last success as Unix
    seconds (R-HK-44)."""
    metrics = RecordingMetrics()
    app.config["GENEVA_METRICS"] = metrics
    with clock.frozen(T0):
        geneva.dispatch_due()
        run_housekeeping()
    assert metrics.value("geneva_drive.dispatcher_last_success") == T0.timestamp()
    assert metrics.value("geneva_drive.housekeeping_last_success") == T0.timestamp()


def test_status_prints_the_last_runs_and_the_warning(app, user, geneva_cli):  # noqa: F811
    """`flask geneva status` shows each job's last run and warns about an overdue
    dispatcher; `--json` has them under "maintenance_runs" (R-HK-42/43)."""
    speedrun_workflow(CountingOneStep.create(hero=user))
    geneva.dispatch_due()
    run_housekeeping()
    config = current_context().settings
    table = _runs()
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.name == "dispatcher")
            .values(started_at=clock.now() - 3 * config.dispatch_interval)
        )
    result = geneva_cli("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    [dispatcher] = [line for line in lines if line.startswith("dispatcher: ")]
    assert "succeeded (published 0, recovered 0)" in dispatcher
    assert f"pid {os.getpid()}" in dispatcher
    [housekeeping] = [line for line in lines if line.startswith("housekeeping: ")]
    assert "stuck_in_progress_recovered 0" in housekeeping
    [warning] = [line for line in lines if line.startswith("WARNING: ")]
    assert warning.startswith("WARNING: The dispatcher has not run for 1 min ")
    assert "(GENEVA_DISPATCH_INTERVAL = 30 s)" in warning
    status = json.loads(geneva_cli("status", "--json").stdout)
    runs = status["maintenance_runs"]
    assert runs["dispatcher"]["overdue"] is True
    assert runs["housekeeping"]["overdue"] is False
    [json_warning] = runs["warnings"]
    assert json_warning.startswith("The dispatcher has not run for 1 min ")


@pytest.fixture
def without_runs_table(without_unit):
    without_unit("add_maintenance_runs")


def test_without_the_unit_everything_runs_and_status_says_how_to_install(
    app,
    user,
    without_runs_table,
    geneva_cli,  # noqa: F811
):
    """Without the table the dispatcher and housekeeping run as before, nothing is
    recorded, and status names the unit to install (R-HK-45)."""
    assert not optional_columns(db.session).maintenance_runs
    db.session.rollback()
    workflow = CountingOneStep.create(hero=make_user("runs@example.com"))
    speedrun_workflow(workflow)
    assert geneva.dispatch_due() == 0
    assert run_housekeeping()["stuck_in_progress_recovered"] == 0
    assert _last_runs() is None
    result = geneva_cli("status")
    assert result.returncode == 0, result.stderr
    assert (
        "last runs: not recorded (install unit add_maintenance_runs: "
        "flask geneva install, then flask db upgrade)"
    ) in result.stdout
    assert json.loads(geneva_cli("status", "--json").stdout)["maintenance_runs"] is None


def test_a_run_still_running_after_one_interval_is_a_warning(app):
    """A run whose start was recorded but never its end (its process killed)
    is named with its host and pid once it is older than one interval (R-HK-43)."""
    run = maintenance_rows.RunStart(
        name="housekeeping",
        run_id=str(uuid.uuid4()),
        started_at=T0,
        hostname="deadhost",
        pid=4242,
        node_name=None,
    )
    db.session.remove()
    with db.engine.begin() as connection:
        maintenance_rows.record_start(connection, _runs(), run)

    def about_housekeeping():
        return [w for w in _last_runs()["warnings"] if "housekeeping run" in w]

    with clock.frozen(T0 + timedelta(minutes=30)):
        assert about_housekeeping() == []
    with clock.frozen(T0 + timedelta(minutes=31)):
        assert about_housekeeping() == [
            "The housekeeping run started 31 min ago on deadhost (pid 4242) is "
            "still running, longer than one interval (GENEVA_HOUSEKEEPING_INTERVAL "
            "= 30 min): it may have been killed; check that process"
        ]
