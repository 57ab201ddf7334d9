"""The limit gauges of housekeeping (R-LIM-44, R-MET-06).

Per limit name with key rows, tags ``{"limit": name}`` (never a key):
``geneva_drive.limit_running``, ``limit_waiting``, ``limit_granted`` and
``limit_oldest_wait_seconds``; none without the ``add_flow_limits`` unit. The
Prometheus adapter labels them ``limit``, the StatsD one appends the name.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import Limit
from flask_geneva import PrometheusMetrics
from flask_geneva import StatsdMetrics
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.housekeeping import RecordingMetrics
from tests.support.limit_rows import park
from tests.support.limit_rows import set_key
from tests.support.workflow import make_user

LIMIT_GAUGES = (
    "geneva_drive.limit_running",
    "geneva_drive.limit_waiting",
    "geneva_drive.limit_granted",
    "geneva_drive.limit_oldest_wait_seconds",
)

gauged = Limit("gauge-partner-api", concurrency=2, key=lambda wf: "acme")


class GaugedSync(geneva.Workflow):
    @step(limit=gauged)
    def push(self):
        pass


@pytest.fixture
def metrics():
    return RecordingMetrics()


@pytest.fixture
def app_config(metrics):
    return {"GENEVA_METRICS": metrics}


def _limit_calls(metrics):
    return {
        (name, tags["limit"]): value
        for name, value, tags in metrics.calls
        if tags is not None and "limit" in tags
    }


def _busy_keys():
    """gauge-partner-api: acme runs 2 of 2 with one waiter for 90 s and one
    grant; globex runs 1. gauge-exports: one idle key."""
    now = clock.now()
    workflow = GaugedSync.create(hero=make_user("w@example.com"))
    ids = workflow.id, workflow.current_execution.id
    db.session.commit()
    set_key("gauge-partner-api", "acme", running=2, granted=1, waiting=1)
    set_key("gauge-partner-api", "globex", running=1)
    set_key("gauge-exports", "", concurrency=5)
    park(*ids, "gauge-partner-api", "acme", since=now - timedelta(seconds=90))


def test_limit_gauges_per_limit_name(app, geneva_jobs, metrics):
    """Sums over the keys of each limit, the oldest ungranted wait (R-LIM-44)."""
    _busy_keys()
    run_housekeeping()
    calls = _limit_calls(metrics)
    assert calls[("geneva_drive.limit_running", "gauge-partner-api")] == 3
    assert calls[("geneva_drive.limit_granted", "gauge-partner-api")] == 1
    assert calls[("geneva_drive.limit_waiting", "gauge-partner-api")] == 1
    oldest = calls[("geneva_drive.limit_oldest_wait_seconds", "gauge-partner-api")]
    assert 90 <= oldest < 150
    # An idle limit with a key row reports zeros.
    for name in LIMIT_GAUGES:
        assert calls[(name, "gauge-exports")] == 0
    # Tagged by limit only, never by key (cardinality).
    tags = {frozenset(t) for n, _, t in metrics.calls if n in LIMIT_GAUGES}
    assert tags == {frozenset({"limit"})}


def test_no_limit_gauges_without_key_rows(app, geneva_jobs, metrics):
    """A limit that never ran has no key row and no gauge (R-LIM-44)."""
    run_housekeeping()
    assert not [call for call in metrics.calls if call[0] in LIMIT_GAUGES]


def test_no_limit_gauges_without_the_unit(app, geneva_jobs, metrics, without_unit):
    """Without add_flow_limits nothing is queried or sent (R-LIM-44, R-LIM-50)."""
    without_unit("add_flow_limits")
    run_housekeeping()
    assert not [call for call in metrics.calls if call[0] in LIMIT_GAUGES]
    assert metrics.value("geneva_drive.ready") == 0  # the others still are


def test_prometheus_labels_limit_gauges_by_limit(app, geneva_jobs):
    """PrometheusMetrics: ``geneva_drive_limit_waiting{limit="..."}`` (R-LIM-44)."""
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    app.config["GENEVA_METRICS"] = PrometheusMetrics(registry=registry)
    geneva.reload_settings(app)
    _busy_keys()
    run_housekeeping()
    value = registry.get_sample_value
    assert value("geneva_drive_limit_running", {"limit": "gauge-partner-api"}) == 3
    assert value("geneva_drive_limit_waiting", {"limit": "gauge-partner-api"}) == 1
    assert value("geneva_drive_limit_running", {"limit": "gauge-exports"}) == 0


def test_statsd_appends_the_limit_name(app, geneva_jobs):
    """StatsdMetrics: ``geneva_drive.limit_running.gauge-partner-api`` (R-LIM-44)."""

    class Client:
        def __init__(self):
            self.sent = {}

        def gauge(self, stat, value):
            self.sent[stat] = value

    client = Client()
    app.config["GENEVA_METRICS"] = StatsdMetrics(client)
    geneva.reload_settings(app)
    _busy_keys()
    run_housekeeping()
    assert client.sent["geneva_drive.limit_running.gauge-partner-api"] == 3
    assert client.sent["geneva_drive.limit_granted.gauge-partner-api"] == 1
