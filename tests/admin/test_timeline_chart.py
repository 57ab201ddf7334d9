"""The detail page's SVG timeline chart: layout, gap compression, escaping (R-ADM-12, R-ADM-06)."""

from __future__ import annotations

import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva.admin import timeline_chart
from flask_geneva.admin.timeline_chart import MIN_BAR_WIDTH
from flask_geneva.admin.timeline_chart import format_span
from flask_geneva.admin.timeline_chart import layout
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import paused_resumable_workflow
from tests.admin.support import ready_workflow
from tests.support.workflow import execution_rows
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer
from tests.support.workflow import update_execution

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
IDLE = timedelta(days=3, hours=4)
SCRIPT = "<script>alert(1)</script>"
#: A geometry attribute (or path data) of the chart.
GEOMETRY = re.compile(r' (?:x|y|x1|x2|y1|y2|width|height|d)="([^"]*)"')


def ms(value: float) -> timedelta:
    return timedelta(milliseconds=value)


def execution(
    execution_id: int,
    scheduled_for: datetime,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    *,
    state: str = "completed",
    step_name: str = "step",
) -> Any:
    """A stand-in with the attributes layout() reads from a StepExecution."""
    return SimpleNamespace(
        id=execution_id,
        step_name=step_name,
        state=state,
        outcome=None,
        scheduled_for=scheduled_for,
        started_at=started_at,
        finished_at=finished_at,
    )


def two_steps_three_days_apart() -> list[Any]:
    """Two 40 ms steps (each waited 5 ms) with 3 d 4 h idle between them."""
    later = T0 + ms(45) + IDLE
    return [
        execution(1, T0, T0 + ms(5), T0 + ms(45), step_name="first"),
        execution(2, later, later + ms(5), later + ms(45), step_name="second"),
    ]


def svg_of(page_text: str) -> str:
    """The chart's <svg> element out of a detail page."""
    match = re.search(r'<svg class="geneva-chart".*?</svg>', page_text, re.S)
    assert match is not None, "no timeline chart on the page"
    return match.group(0)


def long_numbers(svg: str) -> list[str]:
    """Coordinates printed with float noise; the layout rounds them to 0.1 px."""
    return [
        number
        for value in GEOMETRY.findall(svg)
        for number in re.findall(r"\d+\.\d{2,}", value)
    ]


# -- layout ----------------------------------------------------------------------------


def test_a_three_day_gap_is_compressed_into_a_labelled_break():
    """A 3-day wait between two 40 ms steps is one fixed-width break labelled '3 d 4 h idle'; the steps stay wide (R-ADM-12)."""
    chart = layout(two_steps_three_days_apart(), now=T0 + timedelta(days=30))
    assert len(chart.breaks) == 1
    gap = chart.breaks[0]
    assert gap.label == "3 d 4 h idle"
    assert gap.width == timeline_chart.BREAK_WIDTH
    assert gap.duration == IDLE
    assert "2024-05-01 12:00:00.045 UTC" in gap.title
    first, second = chart.bars
    assert first.right <= gap.x < gap.x + gap.width <= second.x
    # Without compression a 40 ms run in a 3-day span would be far below 1 px.
    assert first.run[1] > 100
    assert second.run[1] > 100
    assert chart.summary == "2 executions; 1 idle gap compressed"


def test_short_gaps_stay_on_the_linear_axis():
    """A gap shorter than the threshold is not compressed: no break (R-ADM-12)."""
    rows = [
        execution(1, T0, T0, T0 + ms(400)),
        execution(2, T0 + ms(600), T0 + ms(600), T0 + ms(1000)),
    ]
    chart = layout(rows, now=T0 + timedelta(days=1))
    assert chart.breaks == ()
    assert chart.summary == "2 executions"


def test_bars_keep_the_given_order_one_lane_each():
    """Each execution gets its own lane in the order given, even when its times are earlier (R-ADM-12)."""
    rows = [
        execution(7, T0 + ms(100), T0 + ms(100), T0 + ms(140)),
        execution(3, T0, T0, T0 + ms(40)),
        execution(9, T0 + ms(200), T0 + ms(200), T0 + ms(240)),
    ]
    chart = layout(rows, now=T0 + timedelta(days=1))
    assert [bar.execution_id for bar in chart.bars] == [7, 3, 9]
    ys = [bar.y for bar in chart.bars]
    assert ys == sorted(ys)
    assert len(set(ys)) == 3
    xs = {bar.execution_id: bar.x for bar in chart.bars}
    assert xs[3] < xs[7] < xs[9]


def test_durations_are_proportional_within_a_segment():
    """Back-to-back runs of 10, 20 and 40 ms get widths in ratio 1:2:4; a 5 ms wait is half a 10 ms run (R-ADM-12)."""
    rows = [
        execution(1, T0, T0, T0 + ms(10)),
        execution(2, T0 + ms(10), T0 + ms(15), T0 + ms(35)),
        execution(3, T0 + ms(35), T0 + ms(35), T0 + ms(75)),
    ]
    chart = layout(rows, now=T0 + timedelta(days=1))
    widths = [bar.run[1] for bar in chart.bars]
    assert widths[1] == pytest.approx(2 * widths[0], abs=0.3)
    assert widths[2] == pytest.approx(4 * widths[0], abs=0.3)
    assert chart.bars[1].wait[1] == pytest.approx(widths[0] / 2, abs=0.3)
    assert chart.bars[0].wait is None  # started on time: nothing waited


def test_zero_length_executions_get_the_minimum_width():
    """A single execution with identical timestamps, and one among longer ones, are MIN_BAR_WIDTH wide (R-ADM-12)."""
    alone = layout([execution(1, T0, T0, T0)], now=T0)
    assert alone.bars[0].run[1] == MIN_BAR_WIDTH
    assert alone.bars[0].wait is None
    assert alone.breaks == ()
    assert alone.bars[0].right <= alone.plot_right
    mixed = layout(
        [execution(1, T0, T0, T0 + timedelta(hours=1)), execution(2, T0, T0, T0)],
        now=T0 + timedelta(days=1),
    )
    assert mixed.bars[1].run[1] == MIN_BAR_WIDTH


def test_an_in_progress_execution_ends_at_the_frozen_now():
    """An in_progress execution without an end time runs until clock.now() (R-ADM-12)."""
    rows = [
        execution(1, T0, T0, T0 + ms(40)),
        execution(2, T0 + ms(40), T0 + ms(40), state="in_progress"),
    ]
    with clock.frozen(T0 + timedelta(minutes=2)):
        chart = layout(rows)
    bar = chart.bars[1]
    assert bar.is_ongoing
    assert chart.now_x == pytest.approx(bar.right, abs=0.2)
    assert "running for 2 min (until now)" in bar.title
    assert chart.now_title == "now: 2024-05-01 12:02:00.000 UTC"
    assert not chart.bars[0].is_ongoing


def test_scheduled_executions_wait_until_now_or_mark_their_due_time():
    """An overdue scheduled execution is a waiting bar up to now; one due later is a marker (R-ADM-12)."""
    now = T0 + timedelta(minutes=10)
    overdue = layout([execution(1, T0, state="scheduled")], now=now).bars[0]
    assert overdue.run is None
    assert overdue.is_ongoing
    assert "not started, waiting 10 min" in overdue.title
    later = layout(
        [
            execution(1, T0, T0, T0 + ms(40)),
            execution(2, now + timedelta(hours=1), state="scheduled"),
        ],
        now=now,
    )
    marker = later.bars[1]
    assert marker.run is None
    assert marker.wait[1] == MIN_BAR_WIDTH
    assert not marker.is_ongoing
    assert "due in 1 h" in marker.title
    assert later.breaks[0].label == "1 h 10 min idle"


def test_a_skipped_execution_without_started_at_is_all_waiting():
    """An execution that never started is drawn as waiting only, up to its end time (R-ADM-12)."""
    row = execution(1, T0, None, None, state="skipped")
    row.skipped_at = T0 + ms(30)
    bar = layout([row], now=T0 + timedelta(days=1)).bars[0]
    assert bar.run is None
    assert bar.wait is not None
    assert bar.state_class == "skipped"
    assert "never started, ended 12:00:00.030" in bar.title


def test_naive_datetimes_are_read_as_utc_and_other_zones_are_shown_in_utc():
    """Naive, UTC and +02:00 datetimes of the same instants give the same chart, labelled in UTC (R-ADM-12)."""
    aware = two_steps_three_days_apart()
    naive = [
        execution(
            row.id,
            row.scheduled_for.replace(tzinfo=None),
            row.started_at.replace(tzinfo=None),
            row.finished_at.replace(tzinfo=None),
            step_name=row.step_name,
        )
        for row in aware
    ]
    plus_two = timezone(timedelta(hours=2))
    shifted = [
        execution(
            row.id,
            row.scheduled_for.astimezone(plus_two),
            row.started_at.astimezone(plus_two),
            row.finished_at.astimezone(plus_two),
            step_name=row.step_name,
        )
        for row in aware
    ]
    now = T0 + timedelta(days=30)
    expected = layout(aware, now=now)
    assert layout(naive, now=now.replace(tzinfo=None)) == expected
    assert layout(shifted, now=now) == expected
    assert expected.segment_starts[0].text == "2024-05-01 12:00:00.000 UTC"
    assert expected.ticks[0].text == "12:00:00.000"


def test_an_unknown_state_gets_a_neutral_class():
    """A stored state outside the six known ones is drawn with class 'other', never used as a class name (R-ADM-06)."""
    bar = layout([execution(1, T0, T0, T0, state='x" onload="y')], now=T0).bars[0]
    assert bar.state_class == "other"


def test_no_executions_give_no_chart():
    """Without executions there is nothing to lay out (R-ADM-12)."""
    assert layout([], now=T0) is None


def test_a_thousand_executions_get_compact_unlabelled_lanes():
    """1000 executions: one bar each inside the plot, no per-lane text labels (R-ADM-12)."""
    rows = [
        execution(n, T0 + timedelta(hours=n), T0 + timedelta(hours=n), None)
        for n in range(1000)
    ]
    for row in rows:
        row.finished_at = row.started_at + ms(40)
    chart = layout(rows, now=T0 + timedelta(days=60))
    assert len(chart.bars) == 1000
    assert not chart.is_labelled
    assert {bar.label for bar in chart.bars} == {""}
    assert len(chart.breaks) == 999
    assert all(
        chart.plot_left <= bar.x <= bar.right <= chart.plot_right for bar in chart.bars
    )


@pytest.mark.parametrize(
    ("span", "text"),
    [
        (ms(40), "40 ms"),
        (timedelta(seconds=1.5), "1.5 s"),
        (timedelta(minutes=5), "5 min"),
        (timedelta(hours=2, minutes=30), "2 h 30 min"),
        (timedelta(days=3, hours=3, minutes=59, seconds=59), "3 d 4 h"),
        (timedelta(hours=23, minutes=59, seconds=59), "1 d"),
        (timedelta(seconds=-1), "0 ms"),
    ],
)
def test_spans_are_written_with_two_units(span, text):
    """Durations read '40 ms', '2 h 30 min', '3 d 4 h' (R-ADM-12)."""
    assert format_span(span) == text


# -- rendering -------------------------------------------------------------------------


def test_detail_page_draws_one_bar_per_execution(client):
    """The detail page has an inline <svg> chart with one bar per execution and no script (R-ADM-12, R-ADM-06)."""
    workflow = paused_resumable_workflow()
    rows = execution_rows(workflow.id)
    assert len(rows) >= 2
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert "<h3>Timeline chart</h3>" in text
    svg = svg_of(text)
    bar_ids = re.findall(r'<g class="bar [^"]*" data-execution-id="([^"]+)"', svg)
    assert bar_ids == [str(row["id"]) for row in rows]
    assert svg.count("<title>") >= len(rows)
    assert "<script" not in svg
    assert "style=" not in svg


def test_detail_page_labels_a_compressed_idle_gap(client):
    """A 3-day wait between two 40 ms steps shows as a '3 d 4 h idle' break (R-ADM-12)."""
    workflow = ready_workflow()
    perform_next_step(workflow)
    with clock.frozen(datetime.now(UTC) + timedelta(hours=2)):
        perform_next_step(workflow)
    first, second = execution_rows(workflow.id)
    later = T0 + ms(45) + IDLE
    update_execution(
        first["id"], scheduled_for=T0, started_at=T0 + ms(5), finished_at=T0 + ms(45)
    )
    update_execution(
        second["id"],
        scheduled_for=later,
        started_at=later + ms(5),
        finished_at=later + ms(45),
    )
    svg = svg_of(client.get(detail_url(workflow.id)).get_data(as_text=True))
    assert '<g class="gap">' in svg
    assert ">3 d 4 h idle</text>" in svg
    assert svg.count('<g class="bar st-completed"') == 2
    assert "2024-05-01 12:00:00.000 UTC" in svg
    assert long_numbers(svg) == []


def test_step_name_and_error_class_are_escaped_in_the_chart(client):
    """A step name with <script> and a quote, and an error class with markup, appear escaped in the SVG (R-ADM-06, R-ADM-12)."""
    workflow = failed_workflow()
    nasty = SCRIPT + '"quoted'
    values: dict[str, Any] = {"step_name": nasty}
    if "error_class_name" in executions_table().c:
        values["error_class_name"] = "<b>Boom</b>"
    update_execution(execution_rows(workflow.id)[0]["id"], **values)
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    svg = svg_of(text)
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;quoted" in svg
    assert '"quoted' not in svg
    assert "<b>" not in svg
    assert "&lt;b&gt;Boom&lt;/b&gt;" in svg
    assert '<g class="bar st-failed"' in svg


def test_a_waiting_execution_ends_at_now_in_the_page(client):
    """A scheduled, not yet started execution waits until the (frozen) now, marked by a now line (R-ADM-12)."""
    with clock.frozen(T0):
        workflow = ready_workflow()
    with clock.frozen(T0 + timedelta(minutes=2)):
        svg = svg_of(client.get(detail_url(workflow.id)).get_data(as_text=True))
    assert '<g class="bar st-scheduled ongoing"' in svg
    assert "not started, waiting 2 min" in svg
    assert '<line class="now"' in svg
    assert "now: 2024-05-01 12:02:00.000 UTC" in svg


def test_a_workflow_without_executions_shows_a_note_instead(client):
    """No executions: the chart section holds a short note and no <svg> (R-ADM-12)."""
    workflow_id = ready_workflow().id  # read before the writer's commit expires it
    table = executions_table()
    with external_writer() as connection:
        connection.execute(sa.delete(table).where(table.c.workflow_id == workflow_id))
    text = client.get(detail_url(workflow_id)).get_data(as_text=True)
    assert "No executions yet: nothing to chart." in text
    assert '<svg class="geneva-chart"' not in text


def test_a_thousand_executions_render_a_compact_chart_of_the_page(client):
    """1000 stored executions: the page charts its newest 100 as bars without lane labels, in a bounded SVG (R-ADM-12, R-ADM-57)."""
    workflow_id = ready_workflow().id  # read before the writer's commit expires it
    table = executions_table()
    rows = []
    for n in range(1000):
        start = T0 + timedelta(minutes=5 * n)
        rows.append(
            {
                "workflow_id": workflow_id,
                "step_name": f"chunk_{n % 7}",
                "state": "completed",
                "outcome": "success",
                "scheduled_for": start,
                "started_at": start + ms(3),
                "completed_at": start + ms(40 + n % 50),
                "finished_at": start + ms(40 + n % 50),
                "created_at": start,
                "updated_at": start,
            }
        )
    with external_writer() as connection:
        connection.execute(sa.delete(table).where(table.c.workflow_id == workflow_id))
        connection.execute(sa.insert(table), rows)
    text = client.get(detail_url(workflow_id)).get_data(as_text=True)
    svg = svg_of(text)
    assert svg.count('<g class="bar ') == 100
    assert 'class="lane-label"' not in svg
    # Every 5 min gap is compressed; 99 thin breaks are one path, one tooltip.
    assert '<g class="gap"><title>99 idle gaps compressed, ' in svg
    assert svg.count('<g class="gap">') == 1
    assert long_numbers(svg) == []
    # Measured about 30 KB; the bound catches a layout that grows per row.
    assert len(svg.encode()) < 45_000
