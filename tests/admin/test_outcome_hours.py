"""Hourly outcome counts stored by housekeeping, read by the overview (issue 21; R-ADM-58)."""

from __future__ import annotations

import html
import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import reset_column_caches
from flask_geneva import run_housekeeping
from flask_geneva.admin import outcome_cache
from flask_geneva.core import clock
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.engine.operators import outcome_rollup
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import perform_next_step
from tests.admin.support import failed_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

HOURS_TABLE = "geneva_drive_outcome_hours"
#: The render's time: half past an hour, so the previous hour is settled.
NOW = datetime(2026, 3, 10, 12, 30, tzinfo=UTC)
CURRENT = datetime(2026, 3, 10, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)
MICRO = timedelta(microseconds=1)


def _finished_workflow():
    workflow = ready_workflow()
    perform_next_step(workflow)
    perform_next_step(workflow)
    return workflow


def _place(workflows, times):
    """Give the ended executions of ``workflows`` the ``times``, in turn."""
    rows = [
        row
        for workflow in workflows
        for row in execution_rows(workflow.id)
        if row["state"] in ("completed", "failed")
    ]
    for row, when in zip(rows, times, strict=False):
        update_execution(row["id"], finished_at=when)
    return rows


def _direct_count(workflows):
    """``{(type, hour start, state): count}`` of the 24-hour window, row by row.

    ``workflows``: ``(id, type)`` pairs.
    """
    first = CURRENT - 23 * HOUR
    counts: dict[tuple[str, datetime, str], int] = {}
    for workflow_id, type_name in workflows:
        for row in execution_rows(workflow_id):
            finished = row["finished_at"]
            if row["state"] not in ("completed", "failed") or finished is None:
                continue
            finished = (
                finished.replace(tzinfo=UTC) if finished.tzinfo is None else finished
            )
            if not first <= finished < CURRENT + HOUR:
                continue
            hour = finished.replace(minute=0, second=0, microsecond=0)
            key = (type_name, hour, row["state"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def _chart_counts(edges):
    """The overview cache's counts as ``{(type, hour start, state): count}``."""
    geneva = current_context()
    session = db.session
    counts: dict[tuple[str, datetime, str], int] = {}
    for type_name, index, state, count in outcome_cache.outcome_counts(
        session, geneva.models.StepExecution, geneva.models.Workflow, edges, now=NOW
    ):
        if count:
            key = (type_name, edges[index], state)
            counts[key] = counts.get(key, 0) + count
    session.rollback()
    return counts


def _page_counts(client):
    """``{(type, hour start, state): count}`` read off the overview's bar titles."""
    page = html.unescape(client.get("/geneva/").get_data(as_text=True))
    counts: dict[tuple[str, datetime, str], int] = {}
    for type_name, svg in re.findall(
        r'data-geneva-activity="([^"]+)">(.*?)</svg>', page, re.S
    ):
        for start, done, failed in re.findall(
            r"<title>(\S+ \S+) UTC, 1 h: (\d+) completed, (\d+) failed</title>", svg
        ):
            hour = datetime.strptime(start, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
            for state, count in (("completed", int(done)), ("failed", int(failed))):
                if count:
                    counts[(type_name, hour, state)] = count
    return counts


def _edges():
    return [CURRENT - (23 - index) * HOUR for index in range(25)]


def _roll_up(now):
    return outcome_rollup.roll_up_outcome_hours(current_context().session, now=now)


def _stored_rows():
    table = db.metadata.tables[HOURS_TABLE]
    db.session.remove()
    with db.engine.connect() as connection:
        return sorted(
            (
                row.hour_start.replace(tzinfo=UTC),
                row.workflow_type,
                row.state,
                row.executions,
            )
            for row in connection.execute(sa.select(table))
        )


def _seed():
    """Executions of two classes in several hours, on hour edges and out of the window."""
    done = [_finished_workflow() for _ in range(4)]
    failed = [failed_workflow() for _ in range(3)]
    _place(
        done,
        [
            CURRENT - 23 * HOUR,  # the window's first instant
            CURRENT - 23 * HOUR - MICRO,  # just before the window
            CURRENT - 20 * HOUR,  # on an hour's edge: that hour
            CURRENT - 20 * HOUR - MICRO,  # the hour before
            CURRENT - 5 * HOUR + timedelta(minutes=30),
            CURRENT - 2 * HOUR + timedelta(minutes=59),  # counted live below
            CURRENT - HOUR,  # the previous hour, settled
            CURRENT + timedelta(minutes=10),  # the current hour
        ],
    )
    _place(
        failed,
        [CURRENT - 20 * HOUR, CURRENT - 5 * HOUR, CURRENT + timedelta(minutes=20)],
    )
    return [(workflow.id, workflow.type) for workflow in done + failed]


def test_chart_equals_a_direct_count_with_stored_and_live_hours(client):
    """Hours stored by an earlier roll-up are read from the table, later ones counted
    live; per class, hour and state the chart equals a row-by-row count, hour edges
    included; a fresh process (no kept hours) shows the same (R-ADM-54, R-ADM-58)."""
    workflows = _seed()
    # Housekeeping ran at 09:30: the hours up to 08:00-09:00 are stored.
    stored = _roll_up(CURRENT - 3 * HOUR + timedelta(minutes=30))
    assert stored == 23
    expected = _direct_count(workflows)
    assert len({hour for _, hour, _ in expected}) >= 5
    assert {type_name for type_name, _, _ in expected} == {
        "AdminTwoStep",
        "AdminFailing",
    }
    with clock.frozen(NOW):
        outcome_cache.forget_kept_hours()
        assert _chart_counts(_edges()) == expected
        outcome_cache.forget_kept_hours()
        assert _page_counts(client) == expected
        # Warm: the kept hours give the same numbers.
        assert _page_counts(client) == expected


def test_a_stored_hour_is_not_counted_again(client):
    """Once stored, an hour's counts are read from the table, not recounted: a row
    that lands in it later (a late commit, a hand edit) is not shown, even by a
    fresh process; the live hours still are (the guarantee of R-ADM-58)."""
    workflows = _seed()
    late = _finished_workflow()
    _place([late], [CURRENT - 3 * 24 * HOUR] * 2)
    _roll_up(NOW)
    expected = _direct_count(workflows)
    with clock.frozen(NOW):
        assert _page_counts(client) == expected
        row = execution_rows(late.id)[0]
        update_execution(row["id"], finished_at=CURRENT - 5 * HOUR)
        outcome_cache.forget_kept_hours()
        assert _page_counts(client) == expected
        update_execution(row["id"], finished_at=CURRENT + timedelta(minutes=1))
        key = ("AdminTwoStep", CURRENT, "completed")
        expected[key] = expected.get(key, 0) + 1
        assert _page_counts(client) == expected


def test_an_hour_is_stored_once_it_settled():
    """The previous hour is stored only 5 minutes after it ended; the current hour
    never (R-ADM-58)."""
    _seed()
    previous = CURRENT - HOUR
    _roll_up(CURRENT + timedelta(minutes=5) - MICRO)
    assert previous not in {hour for hour, _, _, _ in _stored_rows()}
    assert _roll_up(CURRENT + timedelta(minutes=5)) == 1
    hours = {hour for hour, _, _, _ in _stored_rows()}
    assert previous in hours
    assert CURRENT not in hours
    assert len(hours) == 23


def test_concurrent_roll_ups_store_each_hour_once(client):
    """A second roll-up stores nothing; one that missed the other's rows (two
    housekeeping runs at once) fails on the key, rolls back, and raises nothing;
    the counts are not doubled (R-ADM-58)."""
    workflows = _seed()
    assert _roll_up(NOW) == 23
    rows = _stored_rows()
    assert _roll_up(NOW) == 0
    assert _stored_rows() == rows
    seen_nothing = outcome_rollup.counted_hours
    try:
        outcome_rollup.counted_hours = lambda *args, **kwargs: {}
        assert _roll_up(NOW) == 0
    finally:
        outcome_rollup.counted_hours = seen_nothing
    assert _stored_rows() == rows
    with clock.frozen(NOW):
        assert _page_counts(client) == _direct_count(workflows)


def test_housekeeping_stores_the_hours_and_deletes_old_ones():
    """Each housekeeping run rolls up; hours older than 48 hours are deleted (R-ADM-58)."""
    _seed()
    with clock.frozen(NOW):
        run_housekeeping()
    hours = {hour for hour, _, _, _ in _stored_rows()}
    assert min(hours) == CURRENT - 23 * HOUR
    assert max(hours) == CURRENT - HOUR
    later = NOW + timedelta(days=3)
    _roll_up(later)
    hours = {hour for hour, _, _, _ in _stored_rows()}
    assert min(hours) == later.replace(minute=0) - 23 * HOUR


def test_without_the_unit_the_overview_counts_live(client):
    """Without geneva_drive_outcome_hours the overview counts every hour from the
    executions and housekeeping runs as before (R-ADM-58, R-DM-30)."""
    workflows = _seed()
    db.session.remove()
    with db.engine.begin() as connection:
        connection.execute(sa.text(f"DROP TABLE {HOURS_TABLE}"))
    reset_column_caches()
    try:
        assert not optional_columns(db.session).outcome_hours
        db.session.rollback()
        assert _roll_up(NOW) == 0
        with clock.frozen(NOW):
            run_housekeeping()
            assert _page_counts(client) == _direct_count(workflows)
    finally:
        db.session.remove()
        from tests import conftest

        conftest._server_schema_ready = False
        reset_column_caches()


@pytest.mark.backends("postgresql")
def test_the_count_turns_jit_off_for_its_transaction_only(client):
    """A short range's per-execution class lookups would be JIT-compiled on
    PostgreSQL; it sets ``jit = off`` with ``SET LOCAL``, which ends with the
    transaction; a day's range (a join) leaves JIT alone (R-ADM-54)."""
    from flask_geneva.db.queries import admin_stats as admin_stats_queries

    geneva = current_context()
    session = db.session
    before = session.execute(sa.text("SHOW jit")).scalar_one()
    session.rollback()
    models = geneva.models
    admin_stats_queries.outcome_counts(
        session, models.StepExecution, models.Workflow, _edges()[-3:]
    )
    assert session.execute(sa.text("SHOW jit")).scalar_one() == "off"
    session.rollback()
    assert session.execute(sa.text("SHOW jit")).scalar_one() == before
    admin_stats_queries.outcome_counts(
        session, models.StepExecution, models.Workflow, _edges()
    )
    assert session.execute(sa.text("SHOW jit")).scalar_one() == before
    session.rollback()


def test_two_roll_ups_racing_store_each_hour_once(app):
    """Two housekeeping runs in two threads, each with its own connection, count
    the same hours and insert them at the same moment (PostgreSQL, MariaDB; on
    SQLite the runs serialize): every hour is stored once with the right
    counts, and neither run raises (R-ADM-58)."""
    import threading

    from sqlalchemy import orm

    from flask_geneva.db import outcome_hours as outcome_hour_rows

    workflows = _seed()
    context = current_context()
    engine = db.engine
    barrier = threading.Barrier(2, timeout=30)
    insert = outcome_hour_rows.record_hour
    waited: set[int] = set()

    # On SQLite a transaction holds the database's write lock from its BEGIN
    # IMMEDIATE: two runs serialize there, and a barrier inside would deadlock.
    race = engine.dialect.name != "sqlite"

    def record_hour(*args, **kwargs):
        if race and threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            barrier.wait()
        return insert(*args, **kwargs)

    results: list[object] = []

    def run() -> None:
        session = context.bind(orm.Session(engine))
        try:
            results.append(outcome_rollup.roll_up_outcome_hours(session, now=NOW))
        except Exception as error:  # noqa: BLE001 - the test reports it
            results.append(error)
        finally:
            session.close()

    db.session.remove()  # the test's own transaction would hold SQLite's lock
    outcome_hour_rows.record_hour = record_hour
    try:
        threads = [threading.Thread(target=run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        outcome_hour_rows.record_hour = insert
    assert sorted(results) == [0, 23] or sum(results) == 23, results  # type: ignore[arg-type]
    rows = _stored_rows()
    markers = [row for row in rows if row[1] == ""]
    assert len(markers) == len({row[0] for row in markers}) == 23
    expected = _direct_count(workflows)
    stored = {
        (type_name, hour, state): count
        for hour, type_name, state, count in rows
        if type_name and hour < CURRENT
    }
    assert stored == {key: count for key, count in expected.items() if key[1] < CURRENT}


def test_short_ranges_look_classes_up_and_long_ones_join_with_equal_counts(client):
    """Ranges of up to three hours read each execution's class by primary key,
    longer ones join the workflows: both count what a row-by-row count does,
    hour edges included (R-ADM-54)."""
    from flask_geneva.db.queries import admin_stats as admin_stats_queries

    workflows = _seed()
    models = current_context().models
    session = db.session
    edges = _edges()

    def count(bounds):
        counts = {}
        for type_name, index, state, number in admin_stats_queries.outcome_counts(
            session, models.StepExecution, models.Workflow, bounds
        ):
            counts[(type_name, bounds[index], state)] = number
        session.rollback()
        return counts

    assert admin_stats_queries.LOOKUP_SPAN == 3 * HOUR
    joined = count(edges)
    looked_up: dict[tuple[str, datetime, str], int] = {}
    for start in range(0, 24, 3):
        looked_up.update(count(edges[start : start + 4]))
    assert joined == looked_up == _direct_count(workflows)
