"""The Prometheus, StatsD and OpenTelemetry hooks with real clients, fed by real
workflows (R-OMET-05, R-OMET-06, R-OMET-07, R-MET-06).
"""

from __future__ import annotations

import socket
import sys

import pytest

from flask_geneva import OpenTelemetryMetrics
from flask_geneva import PrometheusMetrics
from flask_geneva import StatsdMetrics
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.housekeeping import T0
from tests.support.workflow import make_user


class AdaptedFlow(geneva.Workflow):
    @step
    def first(self):
        pass

    @step
    def second(self):
        if self.hero.email.startswith("skip"):
            self.skip()


def _use(app, hook):
    app.config["GENEVA_METRICS"] = hook
    geneva.reload_settings(app)


def _run(emails):
    with clock.frozen(T0):
        for email in emails:
            speedrun_workflow(AdaptedFlow.create(hero=make_user(email)))
        run_housekeeping()


def test_prometheus_counters_histograms_and_gauges(app):
    """PrometheusMetrics labels counters and histograms by their tags and keeps the
    gauges' _all_workflows totals (R-OMET-05, R-MET-06).
    """
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    _use(app, PrometheusMetrics(registry=registry))
    _run(["one@example.com", "two@example.com", "skip@example.com"])
    value = registry.get_sample_value
    labels = {"workflow": "AdaptedFlow", "step": "second"}
    assert (
        value(
            "geneva_drive_step_executions_total",
            {**labels, "outcome": "success", "transition": "complete"},
        )
        == 2
    )
    assert (
        value(
            "geneva_drive_step_executions_total",
            {**labels, "outcome": "skipped", "transition": "skip"},
        )
        == 1
    )
    assert value("geneva_drive_step_duration_seconds_count", labels) == 3
    assert (
        value("geneva_drive_step_duration_seconds_bucket", {**labels, "le": "0.01"})
        == 3
    )
    assert (
        value("geneva_drive_workflows_created_total", {"workflow": "AdaptedFlow"}) == 3
    )
    assert (
        value(
            "geneva_drive_workflows_ended_total",
            {"workflow": "AdaptedFlow", "state": "finished"},
        )
        == 3
    )
    assert value("geneva_drive_finished", {"workflow": "AdaptedFlow"}) == 3
    assert value("geneva_drive_finished_all_workflows") == 3


def test_statsd_sends_counters_and_timers_to_a_udp_socket(app):
    """StatsdMetrics sends incr and timing (ms) with the tag values appended in a stable
    order, and gauges as before (R-OMET-06, R-MET-06).
    """
    statsd = pytest.importorskip("statsd")
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(5)
    try:
        client = statsd.StatsClient("127.0.0.1", server.getsockname()[1], prefix="app")
        _use(app, StatsdMetrics(client))
        _run(["one@example.com"])
        packets = []
        server.settimeout(0.5)
        while True:
            try:
                packets.append(server.recv(65535).decode())
            except TimeoutError:
                break
    finally:
        server.close()
    lines = {line for packet in packets for line in packet.split("\n")}
    assert (
        "app.geneva_drive.step_executions.AdaptedFlow.first.success.complete:1|c"
        in lines
    )
    assert "app.geneva_drive.workflows_created.AdaptedFlow:1|c" in lines
    assert "app.geneva_drive.workflows_ended.AdaptedFlow.finished:1|c" in lines
    assert "app.geneva_drive.step_duration_ms.AdaptedFlow.second:0.000000|ms" in lines
    assert "app.geneva_drive.finished.AdaptedFlow:1|g" in lines
    assert "app.geneva_drive.finished:1|g" in lines


def _otel_points(reader):
    points = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "flask_geneva"
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (
                        metric.name,
                        metric.unit,
                        tuple(sorted(point.attributes.items())),
                    )
                    points[key] = point
    return points


def test_opentelemetry_meter_records_counters_histograms_and_gauges(app):
    """OpenTelemetryMetrics records on the given MeterProvider: counters, a histogram
    in seconds and synchronous gauges, the tags as attributes (R-OMET-07).
    """
    metrics_sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    export = pytest.importorskip("opentelemetry.sdk.metrics.export")
    reader = export.InMemoryMetricReader()
    provider = metrics_sdk.MeterProvider(metric_readers=[reader])
    _use(app, OpenTelemetryMetrics(provider))
    _run(["one@example.com", "skip@example.com"])
    points = _otel_points(reader)
    step_tags = (
        ("outcome", "success"),
        ("step", "first"),
        ("transition", "complete"),
        ("workflow", "AdaptedFlow"),
    )
    assert points[("geneva_drive.step_executions", "1", step_tags)].value == 2
    duration = points[
        (
            "geneva_drive.step_duration_seconds",
            "s",
            (("step", "second"), ("workflow", "AdaptedFlow")),
        )
    ]
    assert (duration.count, duration.sum) == (2, 0.0)
    ended = (
        "geneva_drive.workflows_ended",
        "1",
        (("state", "finished"), ("workflow", "AdaptedFlow")),
    )
    assert points[ended].value == 2
    assert (
        points[("geneva_drive.finished", "", (("workflow", "AdaptedFlow"),))].value == 2
    )
    assert points[("geneva_drive.finished_all_workflows", "", ())].value == 2
    provider.shutdown()


def test_opentelemetry_without_the_api_names_the_extra(monkeypatch):
    """Without opentelemetry-api the adapter raises ImportError naming the extra otel
    (R-OMET-07).
    """
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError, match=r"flask-geneva\[otel\]"):
        OpenTelemetryMetrics()


def test_importing_flask_geneva_does_not_import_the_metrics_api():
    """The meter module imports OpenTelemetry's metrics API only when an adapter is
    created (R-OMET-07; the tracing API is R-OTEL-01's).
    """
    import subprocess

    code = (
        "import sys, flask_geneva, flask_geneva.telemetry.meters; "
        "print('opentelemetry.metrics' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_a_parked_step_counts_nothing_until_it_ends(app):
    """Parking at a wait_for gate is no end: nothing is counted (R-OMET-10)."""
    from tests.support.common_workflows import WaitsForGo
    from tests.telemetry.recording import RecordingHook

    hook = RecordingHook()
    _use(app, hook)
    perform_next_step(WaitsForGo.create(hero=make_user("wait@example.com")))
    assert hook.counts("geneva_drive.step_executions") == {}
