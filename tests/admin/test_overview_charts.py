"""The overview at a glance laid out: throughput by outcome, work in flight per
class (R-ADM-130, R-ADM-131). Pure presenters: no app, no database."""

from __future__ import annotations

import itertools
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva.admin.activity import hour_edges
from flask_geneva.admin.overview_charts import active_chart
from flask_geneva.admin.overview_charts import minute_edges
from flask_geneva.admin.overview_charts import series_of
from flask_geneva.admin.overview_charts import throughput_chart

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

NOW = datetime(2026, 3, 4, 14, 30, 30, tzinfo=UTC)


def test_minute_edges_end_with_the_current_minute():
    """61 edges a minute apart; the last bucket is the minute under way."""
    edges = minute_edges(NOW)
    assert len(edges) == 61
    assert edges[-1] == datetime(2026, 3, 4, 14, 31, tzinfo=UTC)
    assert edges[0] == datetime(2026, 3, 4, 13, 31, tzinfo=UTC)
    assert {b - a for a, b in itertools.pairwise(edges)} == {timedelta(minutes=1)}


def test_outcomes_fall_in_their_series():
    """success and continued are succeeded; an unknown or missing outcome is
    other (R-ADM-130)."""
    assert [series_of(o) for o in ("success", "continued", "reattempted")] == [
        "succeeded",
        "succeeded",
        "reattempted",
    ]
    assert series_of("workflow_paused") == "stopped"
    assert series_of("") == series_of("bogus") == "other"


def test_the_hour_chart_stacks_outcomes_per_minute_and_scales_to_its_peak():
    """Each minute's bar stacks its outcomes bottom up in the series order, the
    busiest minute is full height and named, each bar's title and the table
    give the counts, rows outside the window are left out (R-ADM-130)."""
    edges = minute_edges(NOW)
    first, busiest = edges[0], edges[10]
    rows = [
        (first, "success", 2),
        (first, "failed", 1),
        (busiest, "success", 4),
        (busiest, "continued", 2),
        (busiest, "reattempted", 2),
        (edges[0] - timedelta(minutes=1), "success", 99),  # outside: left out
    ]
    chart = throughput_chart(rows, edges, now=NOW, key="hour", title="Last hour")
    assert chart.total == 11
    assert chart.peak == "8 a minute"
    assert len(chart.bars) == 60
    top = chart.bars[10].segments
    assert [s.series for s in top] == ["succeeded", "reattempted"]
    # Full height: from the axis up to the top margin, 6 then 2 of 8.
    assert top[0].y + top[0].height == chart.axis_y
    assert top[1].y == 16.0
    assert top[0].height == 3 * top[1].height
    assert [s.series for s in chart.bars[0].segments] == ["succeeded", "failed"]
    assert chart.bars[0].title == (
        "2026-03-04 13:31 to 13:32 UTC: 3 finished — 2 succeeded, 1 failed"
    )
    assert chart.bars[1].segments == []
    assert [(span, total) for span, _, total, _ in chart.rows] == [
        ("2026-03-04 13:31 to 13:32 UTC", 3),
        ("2026-03-04 13:41 to 13:42 UTC", 8),
    ]
    assert [(key, count) for key, _, count in chart.series] == [
        ("succeeded", 8),
        ("reattempted", 2),
        ("failed", 1),
    ]
    assert chart.description == (
        "Step executions finished per minute over the last hour, by outcome, 60 "
        "bars of one minute (UTC): 11 in all; 8 succeeded, 2 reattempted, 1 "
        "failed; peak 8 a minute."
    )
    # Every 10 minutes under its bar; 14:30, the last bar's, would be cut.
    assert chart.ticks == [
        (95.0, "13:40"),
        (195.0, "13:50"),
        (295.0, "14:00"),
        (395.0, "14:10"),
        (495.0, "14:20"),
    ]


def test_the_day_chart_draws_each_hour_as_a_rate_per_minute():
    """An hour's bar is its executions per minute; the current hour's counts
    the minutes gone (30.5 of them at 14:30:30), so an hour half over is not
    drawn half as busy (R-ADM-130)."""
    edges = hour_edges(NOW)
    rows = [(edges[0], "success", 120), (edges[-2], "success", 61)]
    chart = throughput_chart(rows, edges, now=NOW, key="day", title="Last day")
    assert chart.peak == "2 a minute"
    old, current = chart.bars[0], chart.bars[-1]
    assert old.segments[0].height == current.segments[0].height
    assert old.title == (
        "2026-03-03 15:00 to 16:00 UTC: 120 finished, 2 a minute — 120 succeeded"
    )
    assert [rate for *_, rate in chart.rows] == ["2", "2"]


def test_an_empty_window_draws_empty_slots():
    """No execution: every bar empty, no peak, no table rows."""
    chart = throughput_chart([], minute_edges(NOW), now=NOW, key="hour", title="x")
    assert chart.total == 0
    assert chart.peak == ""
    assert all(bar.segments == [] for bar in chart.bars)
    assert chart.rows == []
    assert chart.description.endswith(": 0 in all.")


def test_the_work_in_flight_shares_one_scale_across_classes():
    """Each class's row counts its performing (running), ready (waiting) and
    paused workflows; finished and canceled ones are left out; the busiest
    class's bar is full width; the description sums every class (R-ADM-131)."""
    chart = active_chart(
        [
            ("Payment", "performing", 2),
            ("Payment", "ready", 6),
            ("Payment", "finished", 900),
            ("Export", "paused", 1),
            ("Export", "ready", 3),
            ("Export", "canceled", 7),
            ("Done", "finished", 5),
        ]
    )
    assert [row.type for row in chart.rows] == ["Export", "Payment"]
    export, payment = chart.rows
    assert export.counts == {"paused": 1, "waiting": 3}
    assert [s.series for s in export.segments] == ["waiting", "paused"]
    assert sum(s.width for s in payment.segments) == chart.width
    assert sum(s.width for s in export.segments) == chart.width / 2
    assert payment.title == "Payment: 2 running, 6 waiting"
    assert chart.total == 12
    assert chart.description == (
        "Workflows running a step, waiting or paused now, per class: 12 in all; "
        "2 running, 9 waiting, 1 paused."
    )
    assert active_chart([("Done", "finished", 5)]).rows == []
