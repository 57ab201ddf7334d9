"""The operators' actions on a schedule are recorded on its row (R-SCHED-35)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva.core import clock
from flask_geneva.engine.schedules import pause_schedule
from flask_geneva.engine.schedules import resume_schedule
from flask_geneva.engine.schedules import run_schedule_now
from flask_geneva.engine.schedules import schedule_overview
from flask_geneva.engine.schedules.operations import MAX_SCHEDULE_ACTIONS
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.engine.schedules.support import SCHEDULES
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import schedule_row

T0 = datetime(2025, 6, 2, 10, 0, tzinfo=UTC)


def _call(operation, *args, **options):
    context = current_context()
    return operation(context, context.session, *args, **options)


def test_each_action_records_who_when_and_via_what(app, declare):
    """R-SCHED-35: pause, resume and run now each append {action, at, actor,
    via, fire_at} in their own transaction; run now names its fire."""
    declare("hourly", Tick, cron="0 * * * *")
    with clock.frozen(T0):
        _call(pause_schedule, "hourly", actor="ann", via="admin")
    with clock.frozen(T0 + timedelta(minutes=1)):
        _call(resume_schedule, "hourly", via="api")
    with clock.frozen(T0 + timedelta(minutes=2)):
        result = _call(run_schedule_now, "hourly", actor="bob", via="cli")
    assert schedule_row("hourly")["operator_actions"] == [
        {
            "action": "pause",
            "at": T0.isoformat(),
            "actor": "ann",
            "via": "admin",
            "fire_at": None,
        },
        {
            "action": "resume",
            "at": (T0 + timedelta(minutes=1)).isoformat(),
            "actor": None,
            "via": "api",
            "fire_at": None,
        },
        {
            "action": "run_now",
            "at": (T0 + timedelta(minutes=2)).isoformat(),
            "actor": "bob",
            "via": "cli",
            "fire_at": result.fire_at.isoformat(),
        },
    ]
    [view] = _call(schedule_overview)
    assert [entry["action"] for entry in view.operator_actions] == [
        "run_now",
        "resume",
        "pause",
    ]
    assert view.paused_at is None


def test_refusals_record_nothing(app, declare):
    """R-SCHED-35: a refused action (wrong state), a bad via and a bad actor
    write nothing; the bad values are refused before the row is even made."""
    declare("hourly", Tick, cron="0 * * * *")
    with pytest.raises(ValueError, match=r"via must be one of 'api', 'admin', 'cli'"):
        _call(pause_schedule, "hourly", via="parent")
    with pytest.raises(ValueError, match="actor must be None or a str"):
        _call(run_schedule_now, "hourly", actor=42)
    with pytest.raises(ValueError, match="no NUL character"):
        _call(resume_schedule, "hourly", actor="a\x00b")
    assert schedule_row("hourly") is None
    assert fires("hourly") == []
    with pytest.raises(InvalidStateError):
        _call(resume_schedule, "hourly", actor="ann")
    assert schedule_row("hourly") is None  # the refusal rolled back all of it
    _call(pause_schedule, "hourly", actor="ann")
    with pytest.raises(InvalidStateError):
        _call(pause_schedule, "hourly", actor="ann")
    assert len(schedule_row("hourly")["operator_actions"]) == 1


def test_the_row_keeps_the_latest_actions(app, declare):
    """R-SCHED-35: at most MAX_SCHEDULE_ACTIONS entries, the oldest dropped."""
    declare("hourly", Tick, cron="0 * * * *")
    start = T0
    for index in range(MAX_SCHEDULE_ACTIONS // 2 + 1):
        with clock.frozen(start + timedelta(seconds=2 * index)):
            _call(pause_schedule, "hourly", actor=f"op{index}")
        with clock.frozen(start + timedelta(seconds=2 * index + 1)):
            _call(resume_schedule, "hourly", actor=f"op{index}")
    actions = schedule_row("hourly")["operator_actions"]
    assert len(actions) == MAX_SCHEDULE_ACTIONS
    assert actions[0]["actor"] == "op1"
    assert actions[-1] == {
        "action": "resume",
        "at": (start + timedelta(seconds=MAX_SCHEDULE_ACTIONS + 1)).isoformat(),
        "actor": f"op{MAX_SCHEDULE_ACTIONS // 2}",
        "via": "api",
        "fire_at": None,
    }


def test_a_stored_value_that_is_no_list_reads_as_none(app, declare):
    """R-SCHED-35, R-ADM-31: a row whose operator_actions is not a JSON list
    (written by hand) reads as no actions, and the next action starts a
    new list."""
    declare("hourly", Tick, cron="0 * * * *")
    _call(pause_schedule, "hourly")
    table = db.metadata.tables[SCHEDULES]
    with db.engine.begin() as connection:
        connection.execute(sa.update(table).values(operator_actions={"not": "a list"}))
    [view] = _call(schedule_overview)
    assert view.operator_actions == []
    _call(resume_schedule, "hourly", actor="ann")
    assert [a["actor"] for a in schedule_row("hourly")["operator_actions"]] == ["ann"]
