"""The overview at a glance as served: two throughput charts and the work in
flight per class, server-rendered and readable without sight (R-ADM-130..132)."""

from __future__ import annotations

import re
from datetime import timedelta

from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import new_user
from tests.admin.support import store_finished
from tests.admin.workflows import AdminSignalWait
from tests.admin.workflows import AdminTwoStep


def test_the_overview_charts_throughput_and_work_in_flight(client):
    """The last hour's and the last day's throughput are SVGs named by a
    <title> and a <desc> (aria-labelledby) with the numbers in a table; the
    per-class table counts the workflows running, waiting and paused, with
    links to exactly those workflows; no script (R-ADM-130, R-ADM-131,
    R-ADM-132)."""
    now = clock.now()
    workflow = AdminTwoStep.create(hero=new_user())
    store_finished(
        workflow.id,
        [(now - timedelta(seconds=1), "completed", "success")] * 3
        + [(now - timedelta(hours=2), "failed", "failed")],
    )
    parked = AdminSignalWait.create(hero=new_user("parked@example.com"))
    perform_next_step(parked)
    html = client.get("/geneva/").get_data(as_text=True)
    hour = re.search(r'data-geneva-chart="hour">(.*?)</figure>', html, re.S).group(1)
    day = re.search(r'data-geneva-chart="day">(.*?)</figure>', html, re.S).group(1)
    assert 'role="img" aria-labelledby="geneva-hour-title geneva-hour-desc"' in hour
    assert (
        '<title id="geneva-hour-title">Finished per minute, last hour</title>' in hour
    )
    desc = re.search(r'<desc id="geneva-hour-desc">(.*?)</desc>', hour).group(1)
    assert desc.startswith(
        "Step executions finished per minute over the last hour, by outcome, 60 "
        "bars of one minute (UTC): 3 in all; 3 succeeded"
    )
    assert hour.count('<g class="geneva-tp-bar">') == 60
    assert hour.count("geneva-tp--succeeded") == 1
    assert day.count('<g class="geneva-tp-bar">') == 24
    assert "geneva-tp--failed" in day
    # The same numbers as a table behind the chart.
    table = re.search(r"<tbody>(.*?)</tbody>", day, re.S).group(1)
    assert len(re.findall(r"<tr>", table)) in (1, 2)  # the failure's hour, now's
    assert "<script" not in hour + day
    active = re.search(
        r'<table class="table table-sm geneva-active"(.*?)</table>', html, re.S
    ).group(1)
    assert "<caption" in active
    two_step = re.search(
        r'data-geneva-class="AdminTwoStep">(.*?)</tr>', active, re.S
    ).group(1)
    assert (
        '<a href="/geneva/workflows/?type=AdminTwoStep&amp;state=ready">1</a>'
        in two_step
    )
    signal_wait = re.search(
        r'data-geneva-class="AdminSignalWait">(.*?)</tr>', active, re.S
    ).group(1)
    assert 'aria-label="AdminSignalWait: 1 waiting"' in signal_wait


def test_an_idle_overview_says_nothing_finished_and_nothing_waits(client):
    """With no executions the charts say so in words (R-ADM-130, R-ADM-131)."""
    html = client.get("/geneva/").get_data(as_text=True)
    assert 'data-geneva-empty="throughput-hour"' in html
    assert 'data-geneva-empty="throughput-day"' in html
    assert 'data-geneva-empty="active"' in html
