"""Settled throughput buckets are counted once per process (R-ADM-130)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from flask_geneva.admin import throughput_cache
from flask_geneva.admin.overview_charts import minute_edges
from flask_geneva.core import clock
from tests.admin.support import new_user
from tests.admin.support import store_finished
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import db
from tests.apps.basic import geneva


def _counted(now):
    """``(rows as {bucket: total}, [each grouped statement run])``."""
    starts = []

    def record(conn, cursor, statement, *args):
        if "GROUP BY" in statement:
            starts.append(statement)

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        rows = throughput_cache.finished_counts(
            db.session,
            geneva.StepExecution,
            minute_edges(now),
            unit="minute",
            now=now,
        )
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
    db.session.rollback()
    totals: dict = {}
    for start, _outcome, count in rows:
        totals[start] = totals.get(start, 0) + count
    return totals, starts


def test_settled_minutes_are_read_once_and_the_last_ones_every_time(app):
    """The first count reads the whole hour; later ones read from the first
    minute that had not settled (5 minutes) and keep the settled ones, so an
    execution added to a settled minute is not seen and one added to a recent
    minute is (R-ADM-130)."""
    now = clock.now()
    edges = minute_edges(now)
    workflow = AdminTwoStep.create(hero=new_user())
    old = edges[10] + timedelta(seconds=5)
    recent = now - timedelta(seconds=1)
    minute = recent.replace(second=0, microsecond=0)  # the last or the one before
    store_finished(workflow.id, [(old, "completed", "success")] * 2)
    store_finished(workflow.id, [(recent, "completed", "success")])
    db.session.commit()
    totals, starts = _counted(now)
    assert totals == {edges[10]: 2, minute: 1}
    assert len(starts) == 1
    store_finished(
        workflow.id, [(old, "failed", "failed"), (recent, "failed", "failed")]
    )
    totals, starts = _counted(now)
    assert totals == {edges[10]: 2, minute: 2}
    assert len(starts) == 1  # one statement, from the first unsettled minute
    throughput_cache.forget_kept_buckets()
    totals, _ = _counted(now)
    assert totals == {edges[10]: 3, minute: 2}
