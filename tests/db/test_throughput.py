"""The overview's throughput read on every database: one grouped statement per
chart, bucketed by the database's own minute and hour (R-ADM-130)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva.db.queries import throughput
from tests.admin.support import new_user
from tests.admin.support import store_finished
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import db
from tests.apps.basic import geneva

T = datetime(2025, 11, 9, 23, 59, 0, tzinfo=UTC)


def _statements(app):
    """Record the statements run on the app's engine (to count them)."""
    seen: list[str] = []

    def record(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append(statement)

    engine = db.engine
    sa.event.listen(engine, "before_cursor_execute", record)
    return seen, lambda: sa.event.remove(engine, "before_cursor_execute", record)


def test_finished_executions_are_counted_per_minute_and_hour_and_outcome(app):
    """Rows at a minute's last microsecond and the next minute's first fall in
    two buckets; the range includes its start and leaves out its end; the day
    turns over in UTC; one statement per read (R-ADM-130)."""
    workflow = AdminTwoStep.create(hero=new_user())
    end_of_minute = T + timedelta(seconds=59, microseconds=999_999)
    store_finished(
        workflow.id,
        [
            (T, "completed", "success"),  # the range's start: counted
            (end_of_minute, "completed", "success"),
            (end_of_minute, "completed", "reattempted"),
            (T + timedelta(minutes=1), "failed", "failed"),  # next minute, next day
            (T + timedelta(minutes=2), "canceled", "canceled"),  # the end: left out
            (T - timedelta(microseconds=1), "completed", "success"),  # before
        ],
    )
    db.session.commit()
    seen, stop = _statements(app)
    try:
        rows = throughput.finished_counts(
            db.session,
            geneva.StepExecution,
            start=T,
            end=T + timedelta(minutes=2),
            unit="minute",
        )
    finally:
        stop()
    assert len(seen) == 1
    assert sorted(rows) == [
        (T, "reattempted", 1),
        (T, "success", 2),
        (datetime(2025, 11, 10, 0, 0, tzinfo=UTC), "failed", 1),
    ]
    hours = throughput.finished_counts(
        db.session,
        geneva.StepExecution,
        start=T - timedelta(minutes=59),
        end=T + timedelta(hours=1),
        unit="hour",
    )
    assert sorted(hours) == [
        (datetime(2025, 11, 9, 23, tzinfo=UTC), "reattempted", 1),
        (datetime(2025, 11, 9, 23, tzinfo=UTC), "success", 3),
        (datetime(2025, 11, 10, 0, tzinfo=UTC), "canceled", 1),
        (datetime(2025, 11, 10, 0, tzinfo=UTC), "failed", 1),
    ]
    with pytest.raises(ValueError, match="unknown bucket unit 'week'; allowed"):
        throughput.TimeBucket(geneva.StepExecution.finished_at, "week")
