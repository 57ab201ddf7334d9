"""Housekeeping deletes old ended schedule fires (R-SCHED-26)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.schedules.support import FIRES
from tests.engine.schedules.support import fires
from tests.support.housekeeping import RETENTION
from tests.support.housekeeping import T0
from tests.support.housekeeping import retention_settings  # noqa: F401 - "app_config"

OLD = T0 - RETENTION - timedelta(days=1)  # ended before the cutoff
RECENT = T0 - RETENTION + timedelta(hours=1)  # ended after it


def _fire(name, fire_at, state, finished_at):
    """Insert a fire row as the fan-out leaves it."""
    table = db.metadata.tables[FIRES]
    with db.engine.begin() as connection:
        connection.execute(
            sa.insert(table).values(
                schedule_name=name,
                fire_at=fire_at,
                kind="cron",
                state=state,
                started=1,
                skipped=0,
                created_at=fire_at,
                updated_at=finished_at or fire_at,
                finished_at=finished_at,
            )
        )


def _kept():
    return [(row["schedule_name"], row["fire_at"]) for row in fires()]


def test_old_ended_fires_go_the_newest_of_each_schedule_and_running_ones_stay(app):
    """R-SCHED-26: done and failed fires that ended before the retention's
    cutoff are deleted; a running fire of any age, a fire that ended after
    the cutoff and the newest fire of each schedule (however old) stay."""
    day = timedelta(days=1)
    # "daily": old done and failed fires, an old running one, a recent one.
    _fire("daily", OLD - 5 * day, "done", OLD - 5 * day)
    _fire("daily", OLD - 4 * day, "failed", OLD - 4 * day)
    _fire("daily", OLD - 3 * day, "running", None)
    _fire("daily", OLD - 2 * day, "done", OLD - 2 * day)
    _fire("daily", RECENT, "done", RECENT)
    # "monthly": only old fires; the newest stays for the admin's last fire.
    _fire("monthly", OLD - 40 * day, "done", OLD - 40 * day)
    _fire("monthly", OLD - 10 * day, "failed", OLD - 10 * day)
    # "removed": no longer declared, same rule.
    _fire("removed", OLD - 9 * day, "done", OLD - 9 * day)
    _fire("removed", OLD - 8 * day, "done", OLD - 8 * day)
    with clock.frozen(T0):
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 0
    assert sorted(_kept()) == sorted(
        [
            ("daily", OLD - 3 * day),  # running
            ("daily", RECENT),
            ("monthly", OLD - 10 * day),  # its newest
            ("removed", OLD - 8 * day),  # its newest
        ]
    )


def test_every_eligible_fire_goes_in_batches(app):
    """R-SCHED-26, R-HK-13: with a batch size of 2, all 7 eligible fires of
    one run are deleted (several committed batches)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    geneva.reload_settings(app)
    for index in range(8):
        moment = OLD - timedelta(hours=10 - index)
        _fire("hourly", moment, "done", moment)
    with clock.frozen(T0):
        run_housekeeping()
    assert _kept() == [("hourly", OLD - timedelta(hours=3))]


def test_no_retention_no_fire_deleted(app):
    """R-SCHED-26, R-HK-10: with GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER None
    no fire is deleted."""
    app.config["GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER"] = None
    geneva.reload_settings(app)
    _fire("daily", OLD - timedelta(days=2), "done", OLD - timedelta(days=2))
    _fire("daily", OLD - timedelta(days=1), "done", OLD - timedelta(days=1))
    with clock.frozen(T0):
        run_housekeeping()
    assert len(_kept()) == 2


def test_housekeeping_runs_without_the_unit(app, without_unit):
    """R-SCHED-26, R-SCHED-50: without add_schedules cleanup reads no fire
    table and housekeeping completes."""
    without_unit("add_schedules")
    with clock.frozen(T0):
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 0
