"""Firing schedules from the dispatcher at a frozen clock (SPEC §26.2-26.3)."""

from __future__ import annotations

import logging
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva.core import clock
from flask_geneva.dsl.schedules import MAX_CATCH_UP
from flask_geneva.engine.operators.dispatcher import run_dispatcher
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import User
from tests.apps.basic import db
from tests.engine.schedules.support import Digest
from tests.engine.schedules.support import HeroLessReport
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import fire_at
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import handled
from tests.engine.schedules.support import make_users
from tests.engine.schedules.support import schedule_row
from tests.engine.schedules.support import workflows_of


def _utc(*parts):
    return datetime(*parts, tzinfo=UTC)


def _walk(start, end, step=timedelta(minutes=10)):
    moment = start
    while moment <= end:
        fire_at(moment)
        moment += step


@pytest.mark.parametrize(
    ("zone", "day", "expected"),
    [
        # 02:30 does not exist: the clock jumps from 02:00 to 03:00 CEST.
        ("Europe/Berlin", (2025, 3, 30), _utc(2025, 3, 30, 1, 0)),
        ("America/New_York", (2025, 3, 9), _utc(2025, 3, 9, 7, 0)),
    ],
)
def test_a_spring_forward_time_fires_once_at_the_jump(
    app, declare, zone, day, expected
):
    """R-SCHED-03: a wall-clock time the clock skips fires once, at 03:00."""
    declare("nightly", Tick, cron="30 2 * * *", timezone=zone)
    start = datetime(*day, tzinfo=UTC) - timedelta(hours=6)
    _walk(start, start + timedelta(hours=24))
    assert [row["fire_at"] for row in fires("nightly")] == [expected]
    assert handled("nightly") == [1]
    assert len(workflows_of(Tick)) == 1


@pytest.mark.parametrize(
    ("zone", "cron", "day", "expected"),
    [
        # 02:30 happens twice in Berlin on 26 Oct 2025 (CEST, then CET).
        ("Europe/Berlin", "30 2 * * *", (2025, 10, 26), _utc(2025, 10, 26, 0, 30)),
        # 01:30 happens twice in New York on 2 Nov 2025 (EDT, then EST).
        ("America/New_York", "30 1 * * *", (2025, 11, 2), _utc(2025, 11, 2, 5, 30)),
    ],
)
def test_a_fall_back_time_fires_once(app, declare, zone, cron, day, expected):
    """R-SCHED-03: a wall-clock time the clock shows twice fires once, the first."""
    declare("nightly", Tick, cron=cron, timezone=zone)
    start = datetime(*day, tzinfo=UTC) - timedelta(hours=6)
    _walk(start, start + timedelta(hours=24))
    assert [row["fire_at"] for row in fires("nightly")] == [expected]
    assert [row["kind"] for row in fires("nightly")] == ["cron"]


def test_a_new_schedule_fires_no_past_time_and_then_each_time_once(app, declare):
    """R-SCHED-20/21: first seen, a schedule fires from then on; each time once."""
    declare("hourly", Tick, cron="0 * * * *")
    assert fire_at(_utc(2025, 1, 1, 10, 30)).fired == 0
    assert schedule_row("hourly")["fire_after"] == _utc(2025, 1, 1, 10, 30)
    assert fire_at(_utc(2025, 1, 1, 11, 0, 5)).fired == 1
    assert fire_at(_utc(2025, 1, 1, 11, 0, 30)).fired == 0
    assert fire_at(_utc(2025, 1, 1, 12, 0)).fired == 1
    assert [row["fire_at"] for row in fires("hourly")] == [
        _utc(2025, 1, 1, 11, 0),
        _utc(2025, 1, 1, 12, 0),
    ]
    row = schedule_row("hourly")
    assert (row["last_fire_at"], row["last_outcome"]) == (_utc(2025, 1, 1, 12), "done")


@pytest.mark.parametrize(
    ("missed", "expected_days", "kinds"),
    [
        ("skip", [], []),
        ("latest", [4], ["catch_up"]),
        ("all", [1, 2, 3, 4], ["catch_up"] * 4),
    ],
)
def test_missed_policies_after_downtime(app, declare, missed, expected_days, kinds):
    """R-SCHED-23: after downtime "skip" fires none of the missed times, "latest"
    one catch-up for the latest, "all" every one; then the next time as usual."""
    declare("daily", Tick, cron="0 9 * * *", missed=missed)
    fire_at(_utc(2025, 1, 1, 8, 0))
    fire_at(_utc(2025, 1, 4, 12, 0))  # down from 1 Jan 08:00 to 4 Jan 12:00
    rows = fires("daily")
    assert [row["fire_at"] for row in rows] == [
        _utc(2025, 1, d, 9) for d in expected_days
    ]
    assert [row["kind"] for row in rows] == kinds
    assert schedule_row("daily")["fire_after"] == _utc(2025, 1, 4, 9)
    fire_at(_utc(2025, 1, 5, 9, 0, 20))
    assert fires("daily")[-1]["fire_at"] == _utc(2025, 1, 5, 9)
    assert fires("daily")[-1]["kind"] == "cron"
    assert handled("daily") == [1] * (len(expected_days) + 1)


def test_a_time_noticed_within_the_tolerance_is_on_time(app, declare):
    """R-SCHED-23: a time at most max(2 x GENEVA_DISPATCH_INTERVAL, 1 min) old is
    on time: "skip" fires it."""
    declare("daily", Tick, cron="0 9 * * *", missed="skip")
    fire_at(_utc(2025, 1, 1, 8, 0))
    fire_at(_utc(2025, 1, 1, 9, 0, 59))  # interval 30 s: tolerance 1 minute
    assert [row["kind"] for row in fires("daily")] == ["cron"]
    fire_at(_utc(2025, 1, 2, 9, 1, 1))
    assert len(fires("daily")) == 1


def test_missed_all_is_capped(app, declare, caplog):
    """R-SCHED-23: "all" fires the latest 100 missed times; the rest are logged."""
    declare("minutely", Tick, cron="* * * * *", missed="all")
    fire_at(_utc(2025, 1, 1, 0, 0))
    with caplog.at_level(logging.INFO, logger="flask_geneva"):
        fire_at(_utc(2025, 1, 1, 12, 0), max_batches=1000)
    rows = fires("minutely")
    assert len(rows) == MAX_CATCH_UP
    assert rows[0]["fire_at"] == _utc(2025, 1, 1, 10, 21)
    assert rows[-1]["fire_at"] == _utc(2025, 1, 1, 12, 0)
    assert "more than 0 missed fire times" in caplog.text
    assert handled("minutely") == [1] * MAX_CATCH_UP
    assert len(workflows_of(Tick)) == 1


# -- heroes -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["select", "query", "list", "generator"])
def test_heroes_as_query_or_iterable(app, declare, shape):
    """R-SCHED-22: one workflow per hero, in batches; a hero with an ongoing
    workflow of the class is skipped (R-UNQ-01), not an error."""
    ids = make_users(7)
    Digest.create(hero=db.session.get(User, ids[2]))
    makers = {
        "select": lambda: sa.select(User).where(User.id.in_(ids)),
        "query": lambda: User.query.filter(User.id.in_(ids)),
        "list": lambda: [db.session.get(User, i) for i in ids],
        "generator": lambda: (db.session.get(User, i) for i in ids),
    }
    declare("digest", Digest, cron="0 9 * * *", heroes=makers[shape], batch_size=3)
    fire_at(_utc(2025, 1, 1, 8))
    fire_at(_utc(2025, 1, 1, 9))
    [fire] = fires("digest")
    assert (fire["state"], fire["started"], fire["skipped"]) == ("done", 6, 1)
    heroes = [int(row.hero_id) for row in workflows_of(Digest)]
    assert sorted(heroes) == sorted(ids)


def test_one_hero_and_no_heroes(app, declare):
    """R-SCHED-22: heroes() may return one hero or None (nothing to start)."""
    [user_id] = make_users(1)
    declare(
        "one", Digest, cron="0 9 * * *", heroes=lambda: db.session.get(User, user_id)
    )
    declare("none", Digest, cron="0 9 * * *", heroes=lambda: None)
    fire_at(_utc(2025, 1, 1, 8))
    fire_at(_utc(2025, 1, 1, 9))
    assert [(f["state"], f["started"]) for f in fires("one")] == [("done", 1)]
    assert [(f["state"], f["started"]) for f in fires("none")] == [("done", 0)]
    assert [int(row.hero_id) for row in workflows_of(Digest)] == [user_id]


def test_a_hero_less_schedule_starts_one_workflow_and_skips_while_it_is_ongoing(
    app, declare
):
    """R-SCHED-22: heroes=None starts one workflow without a hero; the next fire
    skips while it is ongoing (NULL heroes compare equal, R-UNQ-06)."""
    declare("report", HeroLessReport, cron="0 * * * *")
    fire_at(_utc(2025, 1, 1, 8, 30))
    fire_at(_utc(2025, 1, 1, 9))
    fire_at(_utc(2025, 1, 1, 10))
    assert [(f["started"], f["skipped"]) for f in fires("report")] == [(1, 0), (0, 1)]
    assert len(workflows_of(HeroLessReport)) == 1


def test_a_raising_heroes_callable_fails_that_fire_only(app, declare):
    """R-SCHED-25: the error is recorded on the fire and the schedule; the next
    fire still happens."""
    calls = []

    def heroes():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the users service is down")
        return []

    declare("flaky", Digest, cron="0 * * * *", heroes=heroes)
    fire_at(_utc(2025, 1, 1, 8, 30))
    fire_at(_utc(2025, 1, 1, 9))
    [failed] = fires("flaky")
    assert failed["state"] == "failed"
    assert failed["error"] == "RuntimeError: the users service is down"
    assert schedule_row("flaky")["last_outcome"] == "failed"
    assert "users service" in schedule_row("flaky")["last_error"]
    fire_at(_utc(2025, 1, 1, 10))
    assert [f["state"] for f in fires("flaky")] == ["failed", "done"]
    assert schedule_row("flaky")["last_outcome"] == "done"
    assert schedule_row("flaky")["last_error"] is None


def test_heroes_returning_no_heroes_fail_the_fire_with_a_clear_error(app, declare):
    """R-SCHED-25: a str (or anything not a hero, iterable or query) is an error."""
    declare("text", Digest, cron="0 9 * * *", heroes=lambda: "everyone")
    fire_at(_utc(2025, 1, 1, 8))
    fire_at(_utc(2025, 1, 1, 9))
    [fire] = fires("text")
    assert fire["state"] == "failed"
    assert "heroes() returned str 'everyone'" in fire["error"]


def test_a_fan_out_resumes_batch_by_batch(app, declare):
    """R-SCHED-22: each batch commits its cursor; later runs resume after it."""
    ids = make_users(5)
    declare(
        "digest",
        Digest,
        cron="0 9 * * *",
        heroes=lambda: sa.select(User).where(User.id.in_(ids)),
        batch_size=2,
    )
    fire_at(_utc(2025, 1, 1, 8))
    fire_at(_utc(2025, 1, 1, 9), max_batches=1)
    [fire] = fires("digest")
    assert (fire["state"], fire["started"]) == ("running", 2)
    assert fire["hero_cursor"] == f'{{"after": {ids[1]}}}'
    fire_at(_utc(2025, 1, 1, 9, 1), max_batches=1)
    assert fires("digest")[0]["started"] == 4
    fire_at(_utc(2025, 1, 1, 9, 2), max_batches=1)
    [fire] = fires("digest")
    assert (fire["state"], fire["started"], fire["skipped"]) == ("done", 5, 0)
    assert sorted(int(row.hero_id) for row in workflows_of(Digest)) == ids


def test_an_interrupted_batch_is_resumed_without_duplicates(app, declare):
    """R-SCHED-22: a batch that dies mid-way leaves the last committed cursor
    and no open transaction; the next run creates the rest, none twice."""
    ids = make_users(5)
    calls = []

    def heroes():
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process stops during the 2nd batch
        return [db.session.get(User, i) for i in ids]

    declare("digest", Digest, cron="0 9 * * *", heroes=heroes, batch_size=2)
    fire_at(_utc(2025, 1, 1, 8))
    with pytest.raises(KeyboardInterrupt):
        fire_at(_utc(2025, 1, 1, 9))
    # The batch's transaction ended with it (on SQLite: no write lock kept).
    assert not db.session().in_transaction()
    [fire] = fires("digest")
    assert (fire["state"], fire["started"]) == ("running", 2)
    fire_at(_utc(2025, 1, 1, 9, 1))
    [fire] = fires("digest")
    assert (fire["state"], fire["started"], fire["skipped"]) == ("done", 5, 0)
    assert sorted(int(row.hero_id) for row in workflows_of(Digest)) == ids


def test_the_dispatcher_run_fires_schedules(app, declare):
    """R-SCHED-20: the dispatcher run that already runs fires them, and counts it."""
    declare("hourly", Tick, cron="0 * * * *")
    with clock.frozen(_utc(2025, 1, 1, 8, 30)):
        assert run_dispatcher(current_context(), db.session()).fired == 0
    with clock.frozen(_utc(2025, 1, 1, 9, 0, 10)):
        run = run_dispatcher(current_context(), db.session())
    assert (run.fired, run.scheduled_started) == (1, 1)
    assert len(workflows_of(Tick)) == 1


def test_without_the_unit_schedules_are_inactive_and_say_why(
    app, declare, without_unit, caplog
):
    """R-SCHED-50: without add_schedules nothing fires, a warning says why, and
    the dispatcher runs."""
    declare("hourly", Tick, cron="0 * * * *")
    without_unit("add_schedules")
    with (
        caplog.at_level(logging.WARNING, logger="flask_geneva"),
        clock.frozen(_utc(2025, 1, 1, 9, 0, 10)),
    ):
        run = run_dispatcher(current_context(), db.session())
    assert run.fired == 0
    assert "install unit add_schedules" in caplog.text
    assert workflows_of(Tick) == []


def test_the_log_names_the_latest_time_not_fired(app, declare, caplog):
    """R-SCHED-23: under ``missed="skip"`` a dispatcher that comes 2 minutes
    late fires the on-time newest time and logs the older one as not fired,
    naming that time, not the one it fired."""
    declare("minutely", Tick, cron="* * * * *", missed="skip")
    fire_at(datetime(2025, 3, 30, 12, 0, 0, 500, tzinfo=UTC))  # first seen
    with caplog.at_level(logging.INFO, logger="flask_geneva"):
        fire_at(datetime(2025, 3, 30, 12, 2, 5, tzinfo=UTC))
    assert [row["fire_at"].replace(tzinfo=UTC) for row in fires("minutely")] == [
        datetime(2025, 3, 30, 12, 2, tzinfo=UTC)
    ]
    assert (
        "1 missed fire times not fired, the latest 2025-03-30T12:01:00+00:00"
        in caplog.text
    )
