"""Pause, resume and run now, from code (SPEC §26.4)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest

from flask_geneva.core import clock
from flask_geneva.engine.schedules import pause_schedule
from flask_geneva.engine.schedules import resume_schedule
from flask_geneva.engine.schedules import run_schedule_now
from flask_geneva.engine.schedules import schedule_overview
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import ScheduleNotFoundError
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import User
from tests.apps.basic import db
from tests.engine.schedules.support import Digest
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import fire_at
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import make_users
from tests.engine.schedules.support import schedule_row
from tests.engine.schedules.support import workflows_of


def _utc(*parts):
    return datetime(*parts, tzinfo=UTC)


def _call(operation, *args, **options):
    context = current_context()
    return operation(context, context.session, *args, **options)


def test_a_paused_schedule_does_not_fire_and_skips_what_passed(app, declare):
    """R-SCHED-31: paused, nothing fires; resumed, the times passed while paused
    are not fired (whatever missed says) and the next one fires."""
    declare("hourly", Tick, cron="0 * * * *", missed="all")
    fire_at(_utc(2025, 1, 1, 8, 30))
    with clock.frozen(_utc(2025, 1, 1, 8, 40)):
        _call(pause_schedule, "hourly", actor="ops", via="cli")
    assert schedule_row("hourly")["paused"] is True
    fire_at(_utc(2025, 1, 1, 9))
    fire_at(_utc(2025, 1, 1, 11))
    assert fires("hourly") == []
    with clock.frozen(_utc(2025, 1, 1, 11, 30)):
        _call(resume_schedule, "hourly")
    fire_at(_utc(2025, 1, 1, 11, 45))
    assert fires("hourly") == []
    fire_at(_utc(2025, 1, 1, 12))
    assert [row["fire_at"] for row in fires("hourly")] == [_utc(2025, 1, 1, 12)]


def test_pause_and_resume_refuse_what_they_cannot_do(app, declare):
    """R-SCHED-30/31: a second pause, a resume of a running schedule and an
    unknown name are clear refusals."""
    declare("hourly", Tick, cron="0 * * * *")
    with pytest.raises(InvalidStateError, match="cannot resume schedule 'hourly'"):
        _call(resume_schedule, "hourly")
    _call(pause_schedule, "hourly")
    with pytest.raises(InvalidStateError, match="it is paused"):
        _call(pause_schedule, "hourly")
    with pytest.raises(ScheduleNotFoundError, match=r"'nope'.*declared: 'hourly'"):
        _call(pause_schedule, "nope")
    with pytest.raises(ScheduleNotFoundError):
        _call(run_schedule_now, "nope")
    assert schedule_row("hourly")["paused"] is True


def test_run_now_fires_at_once_and_keeps_the_cron_times(app, declare):
    """R-SCHED-32: a run_now fire of its own; the cron time still fires."""
    ids = make_users(3)
    declare(
        "digest",
        Digest,
        cron="0 9 * * *",
        heroes=lambda: User.query.filter(User.id.in_(ids)),
        batch_size=2,
    )
    fire_at(_utc(2025, 1, 1, 8))
    with clock.frozen(_utc(2025, 1, 1, 8, 59, 30)):
        result = _call(run_schedule_now, "digest", via="cli")
    assert (result.state, result.started, result.skipped) == ("done", 3, 0)
    assert result.fire_at == _utc(2025, 1, 1, 8, 59, 30)
    fire_at(_utc(2025, 1, 1, 9))
    rows = fires("digest")
    assert [(r["kind"], r["started"], r["skipped"]) for r in rows] == [
        ("run_now", 3, 0),
        ("cron", 0, 3),  # the run-now workflows are still ongoing
    ]
    assert len(workflows_of(Digest)) == 3


def test_run_now_without_processing_leaves_the_fan_out_to_the_dispatcher(app, declare):
    """R-SCHED-32: process=False inserts the fire; the next dispatcher run works it."""
    [user_id] = make_users(1)
    declare(
        "one", Digest, cron="0 9 * * *", heroes=lambda: db.session.get(User, user_id)
    )
    with clock.frozen(_utc(2025, 1, 1, 7)):
        result = _call(run_schedule_now, "one", process=False)
    assert (result.state, result.started) == ("running", 0)
    fire_at(_utc(2025, 1, 1, 7, 1))
    assert [(r["state"], r["started"]) for r in fires("one")] == [("done", 1)]


def test_the_overview_lists_next_times_and_the_last_fire(app, declare):
    """R-SCHED-33: next fire times in UTC, paused flag, last fire and outcome."""
    declare("hourly", Tick, cron="0 * * * *", timezone="Europe/Berlin")
    fire_at(_utc(2025, 1, 1, 8, 30))
    fire_at(_utc(2025, 1, 1, 9))
    [view] = _call(schedule_overview, count=3, now=_utc(2025, 1, 1, 9, 10))
    assert view.schedule.name == "hourly"
    assert view.next_fire_times == [_utc(2025, 1, 1, h) for h in (10, 11, 12)]
    assert (view.paused, view.last_fire_at, view.last_outcome) == (
        False,
        _utc(2025, 1, 1, 9),
        "done",
    )


def test_operations_without_the_unit_name_it(app, declare, without_unit):
    """R-SCHED-50: without add_schedules the actions refuse, naming the unit."""
    declare("hourly", Tick, cron="0 * * * *")
    without_unit("add_schedules")
    with pytest.raises(GenevaError, match="install unit add_schedules"):
        _call(pause_schedule, "hourly")
    [view] = _call(schedule_overview)
    assert (view.stored, view.paused, view.last_fire_at) == (False, False, None)
