"""Outcomes per class over time, step durations, oldest overdue (issue 21; R-ADM-54..56)."""

from __future__ import annotations

import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva.admin import outcome_cache
from flask_geneva.admin.activity import activity_charts
from flask_geneva.admin.activity import hour_edges
from flask_geneva.admin.activity import percentile
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution


def _finished_workflow():
    workflow = ready_workflow()
    perform_next_step(workflow)
    perform_next_step(workflow)
    return workflow


def test_overview_charts_completed_and_failed_per_class(client):
    """The overview has one SVG per class with its completed and failed executions of the last 24 h; older ones are left out (R-ADM-54)."""
    done = _finished_workflow()
    _finished_workflow()
    failed_workflow()
    old = _finished_workflow()
    for row in execution_rows(old.id):
        update_execution(row["id"], finished_at=clock.now() - timedelta(days=2))
    del done
    page = client.get("/geneva/").get_data(as_text=True)
    rows = dict(
        re.findall(
            r'<tr data-geneva-class="([^"]+)">.*?geneva-activity-completed">(\d+)</td>',
            page,
            re.S,
        )
    )
    assert rows == {"AdminFailing": "0", "AdminTwoStep": "4"}
    failed = re.search(
        r'data-geneva-class="AdminFailing">.*?geneva-activity-failed-count">(\d+)',
        page,
        re.S,
    )
    assert failed.group(1) == "1"
    assert page.count('<svg class="geneva-activity"') == 2
    assert 'class="geneva-activity-failed"' in page


def test_chart_layout_stacks_failed_on_completed_on_the_class_scale():
    """The busiest hour is full height; failed sits on completed; titles give the counts (R-ADM-54)."""
    edges = hour_edges(datetime(2026, 1, 1, 12, 30, tzinfo=UTC), hours=2)
    assert edges[0] == datetime(2026, 1, 1, 11, tzinfo=UTC)
    assert edges[-1] == datetime(2026, 1, 1, 13, tzinfo=UTC)
    (chart,) = activity_charts(
        [("A", 0, "completed", 3), ("A", 1, "completed", 2), ("A", 1, "failed", 4)],
        edges,
    )
    first, second = chart.bars
    assert chart.peak == 6
    assert second.done_height + second.failed_height == pytest.approx(48)
    assert second.failed_y + second.failed_height == pytest.approx(second.done_y)
    assert first.done_height == pytest.approx(24)
    assert second.title == "2026-01-01 12:00 UTC, 1 h: 2 completed, 4 failed"


def test_percentile_nearest_rank():
    """p50 and p95 by nearest rank; bad input names the value (R-ADM-55)."""
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.95) == 95
    assert percentile([7.0], 0.95) == 7
    with pytest.raises(ValueError, match="share must be from 0 to 1, got 2"):
        percentile(values, 2)


def test_class_page_shows_median_and_p95_per_step(client):
    """The class page lists each step in order with median and p95 of its durations (R-ADM-55)."""
    now = clock.now()
    for seconds in (1, 2, 3, 4, 100):
        workflow = _finished_workflow()
        for row in execution_rows(workflow.id):
            update_execution(
                row["id"],
                started_at=now - timedelta(seconds=seconds + 5),
                finished_at=now - timedelta(seconds=5),
            )
    page = client.get("/geneva/class/AdminTwoStep")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    steps = re.findall(
        r'<tr data-geneva-step="([^"]+)"><td>[^<]*</td><td>(\d+)</td>'
        r'<td class="geneva-median">([^<]*)</td><td class="geneva-p95">([^<]*)</td>',
        text,
    )
    assert steps == [
        ("first", "5", "3 s", "1 min 40 s"),
        ("second", "5", "3 s", "1 min 40 s"),
    ]
    assert client.get("/geneva/class/NoSuchClass").status_code == 404
    overview = client.get("/geneva/").get_data(as_text=True)
    assert 'href="/geneva/class/AdminTwoStep"' in overview


def test_oldest_overdue_execution_on_the_overview(client):
    """The overview names the ready workflows' scheduled execution due longest ago; a paused one's does not count (R-ADM-56)."""
    page = client.get("/geneva/").get_data(as_text=True)
    assert "Oldest overdue execution: none" in page
    first = ready_workflow()
    second = ready_workflow()
    paused = paused_workflow()
    now = clock.now()
    update_execution(
        execution_rows(first.id)[0]["id"], scheduled_for=now - timedelta(minutes=5)
    )
    older = execution_rows(second.id)[0]["id"]
    update_execution(older, scheduled_for=now - timedelta(hours=3))
    update_execution(
        execution_rows(paused.id)[0]["id"], scheduled_for=now - timedelta(days=3)
    )
    page = client.get("/geneva/").get_data(as_text=True)
    line = re.search(r'<p class="geneva-oldest-overdue">(.*?)</p>', page, re.S).group(1)
    assert f'/geneva/step-executions/{older}"' in line
    assert "AdminTwoStep, step first" in line
    assert "3 h ago" in line


def _completed_counts(page: str) -> dict[str, str]:
    return dict(
        re.findall(
            r'<tr data-geneva-class="([^"]+)">.*?geneva-activity-completed">(\d+)</td>',
            page,
            re.S,
        )
    )


def _finish_at(workflow, when) -> None:
    for row in execution_rows(workflow.id):
        update_execution(row["id"], finished_at=when)


@pytest.fixture
def kept_hours():
    """A clean outcome cache before and after the test (R-ADM-54)."""
    outcome_cache.forget_kept_hours()
    yield
    outcome_cache.forget_kept_hours()


def test_busy_ended_hour_is_counted_once_and_the_current_hour_live(
    client, kept_hours, monkeypatch
):
    """An hour that ended over 5 min ago with enough ended executions is kept; the current hour is read on every render (R-ADM-54)."""
    monkeypatch.setattr(outcome_cache, "KEEP_AT_LEAST", 2)
    now = clock.now()
    three_hours_ago = now - timedelta(hours=3)
    _finish_at(_finished_workflow(), three_hours_ago)
    assert _completed_counts(client.get("/geneva/").get_data(as_text=True)) == {
        "AdminTwoStep": "2"
    }
    # Another execution ending in that hour is not read again: the hour is kept.
    _finish_at(_finished_workflow(), three_hours_ago)
    page = client.get("/geneva/").get_data(as_text=True)
    assert _completed_counts(page) == {"AdminTwoStep": "2"}
    # The current hour is read on every render.
    _finished_workflow()
    page = client.get("/geneva/").get_data(as_text=True)
    assert _completed_counts(page) == {"AdminTwoStep": "4"}
    # The class page uses the same counts.
    page = client.get("/geneva/class/AdminTwoStep").get_data(as_text=True)
    assert _completed_counts(page) == {"AdminTwoStep": "4"}
    outcome_cache.forget_kept_hours()
    page = client.get("/geneva/").get_data(as_text=True)
    assert _completed_counts(page) == {"AdminTwoStep": "6"}


def test_quiet_and_recent_hours_are_read_live(client, kept_hours, monkeypatch):
    """Hours with fewer ended executions than the threshold, or that ended under 5 min ago, are read on every render (R-ADM-54)."""
    monkeypatch.setattr(outcome_cache, "KEEP_AT_LEAST", 3)
    now = clock.now()
    start = now.replace(minute=0, second=0, microsecond=0)
    quiet = start - timedelta(hours=5)
    recent = start - timedelta(minutes=30)  # the previous hour
    _finish_at(_finished_workflow(), quiet)
    with clock.frozen(start + timedelta(minutes=2)):
        _finish_at(_finished_workflow(), recent)
        _finish_at(_finished_workflow(), recent)
        first = _completed_counts(client.get("/geneva/").get_data(as_text=True))
        _finish_at(_finished_workflow(), quiet)
        _finish_at(_finished_workflow(), recent)
        second = _completed_counts(client.get("/geneva/").get_data(as_text=True))
    assert first == {"AdminTwoStep": "6"}
    assert second == {"AdminTwoStep": "10"}


def test_overview_reads_its_failures_in_one_statement(client):
    """The latest failures are read once, not reloaded row by row while rendering (R-ADM-10, R-ADM-30)."""
    for _ in range(3):
        failed_workflow()
    with recorded_statements() as statements:
        page = client.get("/geneva/").get_data(as_text=True)
    failures = page.split('class="table table-sm geneva-failures"', 1)[1]
    assert failures.split("</table>", 1)[0].count("<tr data-execution-id=") == 3
    # One for the failures, one for the oldest overdue execution; a reload of
    # each failure (and of its deferred error class) would add six.
    executions = [
        statement
        for statement in statements
        if "FROM geneva_drive_step_executions" in statement
        and "count(" not in statement.lower()
    ]
    assert len(executions) == 2, executions


def test_outcome_counts_of_a_single_hour(client):
    """One bucket (two edges) is counted too: the cache reads a lone live hour so once every other hour is kept (R-ADM-54)."""
    from flask_geneva.db.queries import admin_stats as admin_stats_queries
    from tests.apps import basic

    _finished_workflow()
    now = clock.now()
    start = now.replace(minute=0, second=0, microsecond=0)
    rows = admin_stats_queries.outcome_counts(
        basic.db.session,
        basic.geneva.StepExecution,
        basic.geneva.Workflow,
        [start, start + timedelta(hours=1)],
    )
    assert rows == [("AdminTwoStep", 0, "completed", 2)]


def test_class_durations_are_sampled_among_the_latest_completed_executions(
    client, monkeypatch
):
    """The class page's sample is the class's executions among the latest DURATION_SCAN completed ones of every class, so a rare class costs no more; the page says so (R-ADM-55, R-ADM-30)."""
    from flask_geneva.admin import overview_view

    now = clock.now()
    workflow = _finished_workflow()
    for row in execution_rows(workflow.id):
        update_execution(
            row["id"],
            started_at=now - timedelta(minutes=10, seconds=3),
            finished_at=now - timedelta(minutes=10),
        )
    newer = _finished_workflow()
    for row in execution_rows(newer.id):
        update_execution(row["id"], started_at=now - timedelta(seconds=1))
    monkeypatch.setattr(overview_view, "DURATION_SCAN", 2)
    text = client.get("/geneva/class/AdminTwoStep").get_data(as_text=True)
    assert "among the latest 2 completed step executions of all classes" in text
    assert "From the latest 2 completed step executions of this class" in text
