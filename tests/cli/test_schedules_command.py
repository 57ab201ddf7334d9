"""``flask geneva schedules`` and ``flask geneva schedule ...`` (R-SCHED-33/34)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import sqlalchemy as sa

from flask_geneva.core import clock
from tests.apps.basic import User
from tests.engine.schedules.support import Digest
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import declare
from tests.engine.schedules.support import fire_at
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import make_users
from tests.engine.schedules.support import schedule_row

__all__ = ["declare"]


def _geneva(app, *args):
    return app.test_cli_runner().invoke(args=["geneva", *args])


def test_schedules_lists_next_and_last_fires(app, declare):
    """R-SCHED-33: one row per schedule with zone-local next fires and the last fire."""
    declare("nightly", Tick, cron="30 2 * * *", timezone="Europe/Berlin")
    fire_at(datetime(2025, 3, 29, 12, tzinfo=UTC))
    fire_at(datetime(2025, 3, 30, 1, 0, 10, tzinfo=UTC))
    with clock.frozen(datetime(2025, 3, 30, 12, tzinfo=UTC)):
        result = _geneva(app, "schedules", "--next", "2")
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split()[:6] == ["name", "class", "cron", "zone", "paused", "next"]
    assert "nightly  Tick" in row
    assert "Europe/Berlin" in row
    assert "2025-03-31 02:30 CEST, 2025-04-01 02:30 CEST" in row
    assert "2025-03-30 03:00 CEST (done)" in row


def test_schedules_without_any(app):
    """R-SCHED-33: no schedule declared says so."""
    result = _geneva(app, "schedules")
    assert result.exit_code == 0
    assert "no schedules are declared" in result.output


def test_pause_resume_and_their_refusals(app, declare):
    """R-SCHED-34: guarded actions; unknown names and wrong states exit 1."""
    declare("hourly", Tick, cron="0 * * * *")
    result = _geneva(app, "schedule", "pause", "hourly")
    assert (result.exit_code, result.output.strip()) == (0, "schedule hourly: paused")
    assert schedule_row("hourly")["paused"] is True
    again = _geneva(app, "schedule", "pause", "hourly")
    assert again.exit_code == 1
    assert "cannot pause schedule 'hourly': it is paused" in again.output
    assert _geneva(app, "schedule", "resume", "hourly").exit_code == 0
    assert schedule_row("hourly")["paused"] is False
    unknown = _geneva(app, "schedule", "run-now", "nightly\x1b[2J")
    assert unknown.exit_code == 1
    assert "no schedule named 'nightly\\x1b[2J' is declared" in unknown.output
    assert "\x1b" not in unknown.output


def test_run_now_fires_and_reports(app, declare):
    """R-SCHED-32/34: run-now runs the fan-out and prints its counts."""
    ids = make_users(2)
    declare(
        "digest",
        Digest,
        cron="0 9 * * *",
        heroes=lambda: User.query.filter(User.id.in_(ids)),
    )
    result = _geneva(app, "schedule", "run-now", "digest")
    assert result.exit_code == 0, result.output
    assert ": done, 2 started, 0 skipped" in result.output
    assert [(row["kind"], row["started"]) for row in fires("digest")] == [
        ("run_now", 2)
    ]


def test_cli_actions_are_recorded_with_via_cli(app, declare, monkeypatch):
    """R-SCHED-34, R-SCHED-35: pause, resume and run-now record the actor of
    R-CLI-02 ($GENEVA_ACTOR) with via="cli" on the schedule's row; a refused
    pause records nothing."""
    monkeypatch.setenv("GENEVA_ACTOR", "carol")
    declare("hourly", Tick, cron="0 * * * *")
    assert _geneva(app, "schedule", "pause", "hourly").exit_code == 0
    assert _geneva(app, "schedule", "pause", "hourly").exit_code == 1
    assert _geneva(app, "schedule", "resume", "hourly").exit_code == 0
    assert _geneva(app, "schedule", "run-now", "hourly").exit_code == 0
    actions = schedule_row("hourly")["operator_actions"]
    assert [(a["action"], a["actor"], a["via"]) for a in actions] == [
        ("pause", "carol", "cli"),
        ("resume", "carol", "cli"),
        ("run_now", "carol", "cli"),
    ]
    [fire] = fires("hourly")
    assert datetime.fromisoformat(actions[2]["fire_at"]) == fire["fire_at"]


def test_dispatch_reports_the_schedules_fires(app, declare):
    """R-SCHED-20: ``flask geneva dispatch`` says how many fire times it fired
    and how many workflows their fan-out started; nothing when none fired."""
    ids = make_users(2)
    declare(
        "minutely",
        Digest,
        cron="* * * * *",
        heroes=lambda: User.query.filter(User.id.in_(ids)),
    )
    with clock.frozen(datetime(2025, 3, 30, 12, 0, 30, tzinfo=UTC)):
        first = _geneva(app, "dispatch")  # sees the schedule: fires no past time
    assert first.exit_code == 0, first.output
    assert "schedule fire" not in first.output
    with clock.frozen(datetime(2025, 3, 30, 12, 1, 5, tzinfo=UTC)):
        second = _geneva(app, "dispatch")
    assert second.exit_code == 0, second.output
    assert (
        "fired 1 schedule fire time(s); the schedules started 2 workflow(s)"
        in second.output
    )
    assert [(row["kind"], row["started"]) for row in fires("minutely")] == [("cron", 2)]


def test_run_now_stopped_by_a_database_error_exits_1(app, declare):
    """R-SCHED-34, R-SCHED-27: a run-now whose batch the database refused is
    not done: the fire stays running with the error for the dispatcher to
    retry, the line names the error and the exit status is 1."""
    make_users(1)
    declare(
        "refused",
        Digest,
        cron="0 9 * * *",
        heroes=lambda: sa.select(User).where(sa.text("no_such_column = 1")),
    )
    result = _geneva(app, "schedule", "run-now", "refused")
    assert result.exit_code == 1, result.output
    assert ": running, 0 started, 0 skipped" in result.output
    assert "error: " in result.output
    assert "no_such_column" in result.output
    [fire] = fires("refused")
    assert (fire["kind"], fire["state"]) == ("run_now", "running")
