"""The GENEVA_METRICS hook's optional methods, its failures, signal deliveries and the
per-class signal-wait gauges (R-OMET-02, R-OMET-03, R-OMET-14, R-OMET-20, R-MET-06).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import GenevaConfigurationError
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.common_workflows import WaitsForGo
from tests.support.housekeeping import T0
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row
from tests.telemetry.recording import RecordingHook


class HookedFlow(geneva.Workflow):
    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


class GaugeOnly:
    """A hook written before counters existed (R-MET-06)."""

    def __init__(self):
        self.calls = []

    def gauge(self, name, value, tags):
        self.calls.append((name, value, tags))


class RaisingCounters(RecordingHook):
    def increment(self, name, value, tags):
        raise RuntimeError("statsd down")

    def observe(self, name, value, tags):
        raise RuntimeError("histogram down")


def _use(app, hook):
    app.config["GENEVA_METRICS"] = hook
    geneva.reload_settings(app)


def test_the_optional_methods_are_found_once_at_validation(app):
    """The settings list the hook's optional methods; a gauge-only hook has none
    (R-OMET-02).
    """
    _use(app, RecordingHook())
    assert app.extensions["geneva"].config.metrics_methods == {"increment", "observe"}
    _use(app, GaugeOnly())
    assert app.extensions["geneva"].config.metrics_methods == frozenset()


def test_a_non_callable_optional_method_is_refused(app):
    """``increment`` that is not a method is a configuration error naming it (R-OMET-02)."""

    class Broken(GaugeOnly):
        increment = 42

    app.config["GENEVA_METRICS"] = Broken()
    with pytest.raises(
        GenevaConfigurationError, match=r"GENEVA_METRICS\.increment .*42"
    ):
        geneva.reload_settings(app)


def test_a_gauge_only_hook_still_gets_gauges_and_no_counter(app, caplog):
    """Workflows run unchanged with a hook that has only gauge(); housekeeping's gauges
    still reach it and nothing is logged about counters (R-OMET-02, R-MET-06).
    """
    hook = GaugeOnly()
    _use(app, hook)
    workflow = HookedFlow.create(hero=make_user("old@example.com"))
    speedrun_workflow(workflow)
    run_housekeeping()
    assert workflow_row(workflow.id)["state"] == "finished"
    assert ("geneva_drive.finished", 1, {"workflow": "HookedFlow"}) in hook.calls
    assert "metrics hook raised" not in caplog.text


def test_a_hook_that_raises_changes_no_state(app, caplog):
    """A counter or histogram that raises is logged and swallowed; the workflow runs
    and its rows are as without metrics (R-OMET-03, R-MET-06).
    """
    _use(app, RaisingCounters())
    workflow = HookedFlow.create(hero=make_user("raising@example.com"))
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert [
        (row["step_name"], row["state"], row["outcome"])
        for row in execution_rows(workflow.id)
    ] == [
        ("first", "completed", "success"),
        ("second", "completed", "success"),
    ]
    assert "metrics hook raised RuntimeError('statsd down') for counter" in caplog.text
    assert "for histogram geneva_drive.step_duration_seconds" in caplog.text


def test_signal_deliveries_are_counted_by_awaited_name_and_result(app):
    """A delivery counts per class with the awaited name (or "(unawaited)") and
    whether it woke a step, was stored or was a duplicate (R-OMET-14).
    """
    hook = RecordingHook()
    _use(app, hook)
    parked = WaitsForGo.create(hero=make_user("parked@example.com"))
    perform_next_step(parked)
    parked.signal("go", idempotency_key="k1")
    parked.signal("go", idempotency_key="k1")
    buffered = WaitsForGo.create(hero=make_user("buffered@example.com"))
    buffered.signal("order-1234-paid", warn_unawaited=False)
    delivered = "geneva_drive.signals_delivered"
    assert hook.count(delivered, workflow="WaitsForGo", signal="go", result="woke") == 1
    assert (
        hook.count(delivered, workflow="WaitsForGo", signal="go", result="duplicate")
        == 1
    )
    assert (
        hook.count(
            delivered, workflow="WaitsForGo", signal="(unawaited)", result="stored"
        )
        == 1
    )
    assert "order-1234-paid" not in hook.tag_values()


def test_signal_wait_gauges_per_class_keep_their_totals(app):
    """The four signal-wait gauges are sent as totals and per class with a workflow
    tag (R-WSIG-65, R-OMET-20).
    """
    hook = RecordingHook()
    _use(app, hook)
    with clock.frozen(T0) as frozen:
        for email in ("a@example.com", "b@example.com"):
            perform_next_step(WaitsForGo.create(hero=make_user(email)))
        WaitsForGo.create(hero=make_user("c@example.com")).signal(
            "other", warn_unawaited=False
        )
        frozen.advance(timedelta(hours=1))
        run_housekeeping()
    sent = {
        (name, tuple(sorted((tags or {}).items()))): value
        for name, value, tags in hook.gauges
    }
    per_class = (("workflow", "WaitsForGo"),)
    assert sent[("geneva_drive.executions_waiting", ())] == 2
    assert sent[("geneva_drive.executions_waiting", per_class)] == 2
    assert sent[("geneva_drive.signals_pending", per_class)] == 1
    assert sent[("geneva_drive.signals_pending_oldest_age_seconds", per_class)] == 3600
