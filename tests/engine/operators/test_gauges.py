"""Workflow gauges emitted through GENEVA_METRICS (R-MET-01..06)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import PrometheusMetrics
from flask_geneva import StatsdMetrics
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import geneva
from tests.support.housekeeping import T0
from tests.support.housekeeping import RecordingMetrics
from tests.support.housekeeping import make_in_progress
from tests.support.statements import recorded_statements
from tests.support.workflow import make_user

STATES = ("ready", "performing", "paused", "finished", "canceled")


class HkGaugeAlpha(geneva.Workflow):
    @step
    def only(self):
        pass


class HkGaugeBeta(geneva.Workflow):
    @step
    def only(self):
        pass


@pytest.fixture
def metrics():
    return RecordingMetrics()


@pytest.fixture
def app_config(metrics):
    return {"GENEVA_METRICS": metrics}


def _corpus():
    for i in range(3):
        HkGaugeAlpha.create(hero=make_user(f"a{i}@example.com"))
    paused = HkGaugeAlpha.create(hero=make_user("ap@example.com"))
    paused.pause()
    beta = HkGaugeBeta.create(hero=make_user("b@example.com"))
    beta.cancel()


def test_gauges_per_state_and_class_zero_filled(app, geneva_jobs, metrics):
    """Totals and per-class counts for all five states, zeros included (R-MET-02/03/05)."""
    _corpus()
    run_housekeeping()
    for state in STATES:
        expected = {"ready": 3, "paused": 1, "canceled": 1}.get(state, 0)
        assert metrics.value(f"geneva_drive.{state}") == expected
    assert metrics.value("geneva_drive.ready", "HkGaugeAlpha") == 3
    assert metrics.value("geneva_drive.paused", "HkGaugeAlpha") == 1
    assert metrics.value("geneva_drive.canceled", "HkGaugeAlpha") == 0
    assert metrics.value("geneva_drive.finished", "HkGaugeBeta") == 0
    assert metrics.value("geneva_drive.canceled", "HkGaugeBeta") == 1
    tags = {t["workflow"] for _, _, t in metrics.calls if t is not None}
    assert tags == {"HkGaugeAlpha", "HkGaugeBeta"}


def test_paused_ratio_per_class(app, geneva_jobs, metrics):
    """paused_ratio is paused / all rows of the class, a float in [0, 1] (R-MET-04)."""
    _corpus()
    run_housekeeping()
    assert metrics.value("geneva_drive.paused_ratio", "HkGaugeAlpha") == 0.25
    assert metrics.value("geneva_drive.paused_ratio", "HkGaugeBeta") == 0.0


def test_gauges_reflect_recovery_and_use_one_grouped_query(app, geneva_jobs, metrics):
    """Gauges come after recovery, from one GROUP BY query (R-MET-01, R-HK-01)."""
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "cancel"
    geneva.reload_settings(app)
    with clock.frozen(T0) as frozen:
        workflow = HkGaugeAlpha.create(hero=make_user("s@example.com"))
        make_in_progress(workflow, T0)
        frozen.advance(timedelta(hours=2))
        with recorded_statements() as sent:
            run_housekeeping()
        # The outcome hours' roll-up that ends the run groups too (R-ADM-58),
        # and so do the limit gauges' sums over the limit tables (R-LIM-44)
        # and the signal waits per class (R-WSIG-65, R-OMET-20).
        statements = [
            s
            for s in sent
            if "GROUP BY" in s.upper()
            and "AS outcomes" not in s
            and "geneva_drive_limit_" not in s
            and "geneva_drive_signals" not in s
            and "geneva_drive_step_executions" not in s
        ]
    assert metrics.value("geneva_drive.canceled", "HkGaugeAlpha") == 1
    assert metrics.value("geneva_drive.performing") == 0
    assert len(statements) == 1


def test_failing_metrics_hook_is_logged_and_swallowed(app, geneva_jobs, caplog):
    """A hook that raises never breaks housekeeping (R-MET-06)."""

    class Broken:
        def gauge(self, name, value, tags):
            raise RuntimeError("statsd down")

    app.config["GENEVA_METRICS"] = Broken()
    geneva.reload_settings(app)
    HkGaugeAlpha.create(hero=make_user("x@example.com"))
    summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 0
    assert "statsd down" in caplog.text


def test_prometheus_adapter_sets_labelled_gauges(app, geneva_jobs):
    """PrometheusMetrics maps gauges to metrics with a workflow label (R-MET-06)."""
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    app.config["GENEVA_METRICS"] = PrometheusMetrics(registry=registry)
    geneva.reload_settings(app)
    _corpus()
    run_housekeeping()
    value = registry.get_sample_value
    assert value("geneva_drive_ready", {"workflow": "HkGaugeAlpha"}) == 3
    assert value("geneva_drive_paused_ratio", {"workflow": "HkGaugeAlpha"}) == 0.25
    assert value("geneva_drive_ready_all_workflows") == 3
    assert value("geneva_drive_performing_all_workflows") == 0


def test_statsd_adapter_appends_the_workflow_to_the_name(app, geneva_jobs):
    """StatsdMetrics sends totals and per-class gauges as plain stats (R-MET-06)."""

    class Client:
        def __init__(self):
            self.sent = {}

        def gauge(self, stat, value):
            self.sent[stat] = value

    client = Client()
    app.config["GENEVA_METRICS"] = StatsdMetrics(client)
    geneva.reload_settings(app)
    _corpus()
    run_housekeeping()
    assert client.sent["geneva_drive.ready"] == 3
    assert client.sent["geneva_drive.ready.HkGaugeAlpha"] == 3
    assert client.sent["geneva_drive.paused_ratio.HkGaugeAlpha"] == 0.25
