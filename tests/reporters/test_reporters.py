"""The ready-made reporter adapters: Sentry and logging (R-REP-03, R-REP-10)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from flask_geneva import GenevaConfigurationError
from flask_geneva import step
from flask_geneva.core.error_reporting import logging_reporter as base_logging_reporter
from flask_geneva.reporters.logging import LoggingReporter
from flask_geneva.reporters.logging import logging_reporter
from flask_geneva.reporters.sentry import MISSING_SDK_MESSAGE
from flask_geneva.reporters.sentry import SentryReporter
from flask_geneva.reporters.sentry import sentry_reporter
from flask_geneva.testing import perform_next_step
from tests.apps.basic import geneva
from tests.support.worker_harness import python_code
from tests.support.worker_harness import run
from tests.support.workflow import execution_rows

REPO = Path(__file__).resolve().parents[2]


class Boom(Exception):
    """A step failure."""


class ReportersFailing(geneva.Workflow):
    @step
    def work(self):
        raise Boom("to the tracker")


@pytest.fixture
def sentry_events():
    """A Sentry client with a recording transport, active in an isolation scope."""
    sentry_sdk = pytest.importorskip("sentry_sdk")
    from sentry_sdk.transport import Transport

    class RecordingTransport(Transport):
        def __init__(self, options=None):
            super().__init__(options)
            self.envelopes = []

        def capture_envelope(self, envelope):
            self.envelopes.append(envelope)

    client = sentry_sdk.Client(
        dsn="https://public@sentry.invalid/1",
        transport=RecordingTransport,
        default_integrations=False,
    )
    with sentry_sdk.isolation_scope() as scope:
        scope.set_client(client)
        yield client
    client.close()


def _collect(client):
    client.flush()
    return [envelope.get_event() for envelope in client.transport.envelopes]


@pytest.mark.parametrize("reporter", [SentryReporter, lambda: sentry_reporter])
def test_sentry_reporter_sends_the_error_with_context_tags(
    app, user, sentry_events, reporter
):
    """The Sentry adapter sends one event with geneva_drive tags, context and a handled mechanism (R-REP-03, R-REP-10)."""
    app.config["GENEVA_ERROR_REPORTER"] = reporter()
    geneva.reload_settings(app)
    workflow = ReportersFailing.create(hero=user)
    execution_id = workflow.current_execution.id
    with pytest.raises(Boom):
        perform_next_step(workflow)
    events = _collect(sentry_events)
    assert len(events) == 1
    event = events[0]
    assert event["level"] == "error"
    exception = event["exception"]["values"][-1]
    assert (exception["type"], exception["value"]) == ("Boom", "to the tracker")
    # sentry-sdk 3 adds its own exception_id to the mechanism.
    mechanism = {k: v for k, v in exception["mechanism"].items() if k != "exception_id"}
    assert mechanism == {"type": "flask_geneva", "handled": True}
    assert event["tags"] == {
        "geneva_drive.workflow_id": str(workflow.id),
        "geneva_drive.workflow_class": "ReportersFailing",
        "geneva_drive.step_execution_id": str(execution_id),
        "geneva_drive.step_name": "work",
        "geneva_drive.hero_type": "User",
        "geneva_drive.hero_id": str(user.id),
    }
    assert event["contexts"]["geneva_drive"]["workflow_id"] == workflow.id
    assert event["extra"]["source"] == "flask_geneva"
    decision = execution_rows(workflow.id)[0]["metadata"]["policy_decision"]
    assert decision["reported"] is True
    assert "report_error" not in decision


def test_sentry_reporter_puts_call_keys_in_extras(sentry_events):
    """Call-specific context keys become extras; the level is configurable (R-REP-03, R-REP-10)."""
    error = Boom("dropped")
    SentryReporter(level="warning", tag_prefix="wf.")(
        error,
        handled=True,
        context={"geneva_drive": {"workflow_id": 5}, "dropped": True},
        source="flask_geneva",
    )
    (event,) = _collect(sentry_events)
    assert event["level"] == "warning"
    assert event["tags"] == {"wf.workflow_id": "5"}
    assert event["extra"] == {"source": "flask_geneva", "dropped": True}


def test_sentry_reporter_rejects_unknown_levels():
    """An unknown Sentry level is rejected naming the allowed ones."""
    pytest.importorskip("sentry_sdk")
    with pytest.raises(GenevaConfigurationError, match="'fatal', 'error', 'warning'"):
        SentryReporter(level="loud")


def test_missing_sentry_sdk_names_the_extra(monkeypatch):
    """Without sentry_sdk the adapter fails with a message naming the 'sentry' extra."""
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)
    with pytest.raises(GenevaConfigurationError, match=r"flask-geneva\[sentry\]"):
        SentryReporter()
    with pytest.raises(GenevaConfigurationError) as caught:
        sentry_reporter(Boom("x"), handled=True, context={}, source="flask_geneva")
    assert str(caught.value) == MISSING_SDK_MESSAGE


def test_missing_sdk_at_report_time_is_stored_as_report_error(app, user, monkeypatch):
    """A reporter that cannot load the SDK is recorded as report_error; execution goes on (R-REP-03, R-PDR-02)."""
    app.config["GENEVA_ERROR_REPORTER"] = sentry_reporter
    geneva.reload_settings(app)
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)
    workflow = ReportersFailing.create(hero=user)
    with pytest.raises(Boom):
        perform_next_step(workflow)
    decision = execution_rows(workflow.id)[0]["metadata"]["policy_decision"]
    assert decision["report_error"].startswith("GenevaConfigurationError: ")
    assert "flask-geneva[sentry]" in decision["report_error"]


def test_flask_geneva_does_not_import_sentry():
    """Importing flask_geneva and the adapter module loads no sentry_sdk module."""
    code = (
        "import sys, flask_geneva, flask_geneva.engine.executor.step, flask_geneva.reporters.sentry\n"
        "print(any(m.split('.')[0] == 'sentry_sdk' for m in sys.modules))\n"
    )
    result = run(python_code(code), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_logging_reporter_logs_error_with_context(app, user, caplog):
    """The logging adapter logs the error at ERROR with traceback and context (R-REP-03, R-REP-10)."""
    assert logging_reporter is base_logging_reporter
    app.config["GENEVA_ERROR_REPORTER"] = (
        "flask_geneva.reporters.logging:logging_reporter"
    )
    geneva.reload_settings(app)
    workflow = ReportersFailing.create(hero=user)
    with (
        caplog.at_level(logging.ERROR, logger="flask_geneva"),
        pytest.raises(Boom),
    ):
        perform_next_step(workflow)
    records = [r for r in caplog.records if "reported Boom" in r.getMessage()]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.ERROR
    assert record.exc_info[1].args == ("to the tracker",)
    assert f"'workflow_id': {workflow.id}" in record.getMessage()
    assert "handled=True" in record.getMessage()


def test_logging_reporter_class_uses_its_logger_and_level(caplog):
    """LoggingReporter logs to the chosen logger and level with the context attached."""
    reporter = LoggingReporter("tests.reports", level="warning")
    with caplog.at_level(logging.WARNING, logger="tests.reports"):
        reporter(
            Boom("careful"),
            handled=True,
            context={"geneva_drive": {"workflow_id": 3}},
            source="flask_geneva",
        )
    (record,) = [r for r in caplog.records if r.name == "tests.reports"]
    assert record.levelno == logging.WARNING
    assert record.geneva_context == {"geneva_drive": {"workflow_id": 3}}
    assert "flask_geneva reported Boom: careful" in record.getMessage()


def test_logging_reporter_rejects_unknown_level_names():
    """An unknown level name is rejected listing the known names."""
    with pytest.raises(ValueError, match=r"invalid log level 'LOUD'.*WARNING"):
        LoggingReporter(level="LOUD")
