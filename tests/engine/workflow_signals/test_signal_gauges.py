"""Workflow signal gauges emitted by housekeeping (R-WSIG-65)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.db.test_workflow_signals_schema import without_signals  # noqa: F401
from tests.support.common_workflows import WaitsForGo
from tests.support.housekeeping import T0
from tests.support.housekeeping import RecordingMetrics
from tests.support.workflow import make_user

SIGNAL_GAUGES = (
    "geneva_drive.executions_waiting",
    "geneva_drive.executions_waiting_long",
    "geneva_drive.signals_pending",
    "geneva_drive.signals_pending_oldest_age_seconds",
)


@pytest.fixture
def metrics():
    return RecordingMetrics()


@pytest.fixture
def app_config(metrics):
    return {
        "GENEVA_METRICS": metrics,
        "GENEVA_SIGNAL_WAIT_WARN_AFTER": timedelta(days=1),
    }


def _parked(email):
    workflow = WaitsForGo.create(hero=make_user(email))
    perform_next_step(workflow)
    assert workflow.current_execution.state == "waiting"
    return workflow


def test_signal_gauges_count_waits_long_waits_and_pending_signals(
    app, geneva_jobs, metrics
):
    """Waiting executions, those parked longer than GENEVA_SIGNAL_WAIT_WARN_AFTER, pending signals of ongoing workflows and the oldest one's age (R-WSIG-65)."""
    with clock.frozen(T0) as frozen:
        _parked("long@example.com")
        buffered = WaitsForGo.create(hero=make_user("buffer@example.com"))
        buffered.signal("other", warn_unawaited=False)
        ended = WaitsForGo.create(hero=make_user("ended@example.com"))
        ended.signal("other", warn_unawaited=False)
        ended.cancel()
        frozen.advance(timedelta(days=2))
        _parked("short@example.com")
        buffered.signal("other", warn_unawaited=False)
        run_housekeeping()
    assert metrics.value("geneva_drive.executions_waiting") == 2
    assert metrics.value("geneva_drive.executions_waiting_long") == 1
    assert metrics.value("geneva_drive.signals_pending") == 2
    age = metrics.value("geneva_drive.signals_pending_oldest_age_seconds")
    assert age == pytest.approx(timedelta(days=2).total_seconds())


def test_signal_gauges_are_zero_without_waits(app, geneva_jobs, metrics):
    """No parked execution, no pending signal: every signal gauge is 0 (R-WSIG-65, R-MET-05)."""
    run_housekeeping()
    for name in SIGNAL_GAUGES:
        assert metrics.value(name) == 0


def test_no_signal_gauges_without_the_unit(app, geneva_jobs, metrics, without_signals):  # noqa: F811
    """Without add_workflow_signals the signal gauges are not emitted; the others are (R-WSIG-65, R-WSIG-04)."""
    run_housekeeping()
    names = {name for name, _value, _tags in metrics.calls}
    assert "geneva_drive.ready" in names
    assert names.isdisjoint(SIGNAL_GAUGES)
