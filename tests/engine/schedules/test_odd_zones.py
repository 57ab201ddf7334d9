"""Fire times at daylight-saving changes of unusual zones, walked as the
dispatcher walks them (SPEC §26.1-26.2, R-SCHED-03, R-SCHED-20, R-SCHED-21).

The dispatcher finds due times by walking the expression backwards from now
(R-SCHED-23); the overview lists them forwards (R-SCHED-33). Across each
change of these zones (a 30-minute shift, a change at midnight, a negative
"summer" offset, a skipped calendar day) both walks must give the same
instants, each once: none fired twice, none missed. Pure, no database.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from flask_geneva.dsl.schedules import define_schedule
from tests.engine.schedules.support import Tick

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

DISPATCH_EVERY = timedelta(minutes=7)


def _changes(zone: str, year: int) -> list[datetime]:
    """The UTC hours at which ``zone``'s offset changes in ``year``."""
    info = ZoneInfo(zone)
    moment = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(info).utcoffset()
    found = []
    while moment < end:
        moment += timedelta(hours=1)
        now_offset = moment.astimezone(info).utcoffset()
        if now_offset != offset:
            found.append(moment)
            offset = now_offset
    return found


@pytest.mark.parametrize(
    ("zone", "year"),
    [
        ("Australia/Lord_Howe", 2025),  # a 30-minute shift
        ("America/Santiago", 2025),  # changes at midnight
        ("America/Havana", 2025),  # midnight does not exist once a year
        ("Europe/Dublin", 2025),  # a negative offset in winter (IST is standard)
        ("Pacific/Apia", 2011),  # 30 December 2011 does not exist
    ],
)
@pytest.mark.parametrize("cron", ["0 0 * * *", "30 2 * * *", "*/30 * * * *"])
def test_the_dispatcher_walk_fires_each_forward_time_once(zone, year, cron):
    """R-SCHED-03/20/21: walking due times every 7 minutes across each offset
    change fires exactly the forward fire times, in order, none twice."""
    schedule = define_schedule("odd", Tick, cron=cron, timezone=zone)
    changes = _changes(zone, year)
    assert changes
    for change in changes:
        start, end = change - timedelta(days=1), change + timedelta(days=1)
        forward = []
        moment = start
        while (moment := schedule.fire_times_after(moment, 1)[0]) <= end:
            forward.append(moment)
        fired: list[datetime] = []
        fire_after, now = start, start
        while now <= end:
            due, more = schedule.due_times(fire_after, now, 100)
            assert not more
            if due:
                fired.extend(reversed(due))
                fire_after = due[0]
            now += DISPATCH_EVERY
        assert fired == [t for t in forward if t <= now - DISPATCH_EVERY], (
            zone,
            change,
        )
        assert len(set(fired)) == len(fired)
