"""Structured log fields on the package's records (SPEC §28.3, R-OLOG-01..07).

The adapters of ``core.tagged_logging`` pass the workflow fields (their own, or
those of the current context) and the current span's trace ids in ``extra``;
these tests drive them directly, with stand-in rows, and the OpenTelemetry
SDK's tracer for the trace ids.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import TaggedLoggerAdapter
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import execution_logger
from flask_geneva.core.tagged_logging import module_logger
from flask_geneva.core.tagged_logging import workflow_log_fields
from flask_geneva.core.tagged_logging import workflow_logger

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

WORKFLOW = SimpleNamespace(type="Signup", id=1, hero_type="User", hero_id="7")
EXECUTION = SimpleNamespace(id=9, step_name="send")
ALL_FIELDS = (*log_fields.WORKFLOW_FIELD_NAMES, *log_fields.TRACE_FIELD_NAMES)


@pytest.fixture
def records():
    """The records logged to ``tests.fields`` during the test."""
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            captured.append(record)

    logger = logging.getLogger("tests.fields")
    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield captured
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


def _fields(record):
    return {key: record.__dict__.get(key, "<absent>") for key in ALL_FIELDS}


def _adapter(**options):
    return TaggedLoggerAdapter(logging.getLogger("tests.fields"), **options)


def test_execution_logger_records_carry_the_workflow_and_execution_fields(records):
    """The executor's adapter passes workflow_id, workflow_type, execution_id,
    step, hero_type and hero_id; the text prefixes stay (R-OLOG-01, R-LOG-01..03)."""
    adapter = execution_logger(WORKFLOW, EXECUTION, _adapter())
    adapter.info("sent")
    (record,) = records
    assert record.getMessage() == (
        "[Signup id=1 hero_type=User hero_id=7] [execution_id=9 step_name=send] sent"
    )
    assert _fields(record) == {
        "workflow_id": 1,
        "workflow_type": "Signup",
        "execution_id": 9,
        "step": "send",
        "hero_type": "User",
        "hero_id": "7",
        "trace_id": "<absent>",
        "span_id": "<absent>",
    }


def test_workflow_logger_has_no_execution_and_no_hero_without_one(records):
    """Outside an execution, execution_id and step are None; a workflow without a
    hero has hero_type and hero_id None, every key present (R-OLOG-01)."""
    heroless = SimpleNamespace(type=None, id=uuid.UUID(int=5), hero_type="", hero_id="")
    workflow_logger(heroless, _adapter()).info("created")
    workflow_logger(WORKFLOW, _adapter()).tagged("more").info("tagged keeps fields")
    first, second = records
    assert _fields(first) == {
        "workflow_id": str(uuid.UUID(int=5)),  # a UUID key is given as a str
        "workflow_type": "SimpleNamespace",  # as the tag names it
        "execution_id": None,
        "step": None,
        "hero_type": None,
        "hero_id": None,
        "trace_id": "<absent>",
        "span_id": "<absent>",
    }
    assert second.workflow_id == 1
    assert second.getMessage().endswith("[more] tagged keeps fields")


def test_module_logger_reads_the_current_context(records):
    """An adapter without fields passes those of the workflow acted on in the
    context, and none outside it (R-OLOG-02)."""
    log = _adapter()
    log.info("before")
    with log_fields.logging_about(workflow_log_fields(WORKFLOW, EXECUTION)):
        log.info("during")
        with log_fields.logging_about(log_fields.id_fields(3)):
            log.info("nested")
        log.info("after nested")
    log.info("after")
    before, during, nested, after_nested, after = records
    assert "workflow_id" not in before.__dict__
    assert (during.workflow_id, during.execution_id, during.step) == (1, 9, "send")
    assert (nested.workflow_id, nested.execution_id, nested.workflow_type) == (
        3,
        None,
        None,
    )
    assert after_nested.workflow_id == 1
    assert "workflow_id" not in after.__dict__


def test_an_adapter_own_fields_win_over_the_context(records):
    """A workflow's own logger names its workflow, whatever the context is about
    (a step logging on another workflow's logger) (R-OLOG-02)."""
    other = SimpleNamespace(type="Other", id=2, hero_type=None, hero_id=None)
    with log_fields.logging_about(workflow_log_fields(WORKFLOW, EXECUTION)):
        workflow_logger(other, _adapter()).info("about the other")
    (record,) = records
    assert (record.workflow_id, record.workflow_type, record.execution_id) == (
        2,
        "Other",
        None,
    )


def test_keys_the_caller_passes_in_extra_win(records):
    """``extra`` given by the caller is kept over the fields; other keys are added
    (R-OLOG-02)."""
    adapter = execution_logger(WORKFLOW, EXECUTION, _adapter())
    adapter.info("x", extra={"step": "mine", "order": 4})
    (record,) = records
    assert (record.step, record.order, record.workflow_id) == ("mine", 4, 1)


def test_field_names_never_clash_with_log_record_attributes():
    """No field is an attribute a LogRecord has, or one logging refuses in extra
    (R-OLOG-05)."""
    record = logging.LogRecord("n", logging.INFO, "p", 1, "m", (), None)
    reserved = {*record.__dict__, "message", "asctime"}
    assert reserved.isdisjoint(ALL_FIELDS)


def test_fields_are_data_not_escaped(records):
    """The prefixes escape control characters (R-LOG-07); the fields hold the
    stored value as it is, for the JSON formatter to encode (R-OLOG-04)."""
    poisoned = SimpleNamespace(id=9, step_name="a\nb")
    execution_logger(WORKFLOW, poisoned, _adapter()).info("x")
    (record,) = records
    assert record.step == "a\nb"
    assert "step_name=a\\x0ab" in record.getMessage()


class StdlibAdapter(logging.LoggerAdapter):
    """The stdlib's process(): replaces ``extra`` with the adapter's own."""


def test_a_foreign_base_adapter_keeps_its_extra_and_ours(records):
    """A base adapter whose process() replaces ``extra`` keeps its keys, and the
    workflow fields are added under them (R-OLOG-02, R-LOG-03)."""
    base = StdlibAdapter(logging.getLogger("tests.fields"), {"request_id": "r-1"})
    execution_logger(WORKFLOW, EXECUTION, base).info("hello")
    (record,) = records
    assert (record.request_id, record.workflow_id, record.step) == ("r-1", 1, "send")
    assert base.extra == {"request_id": "r-1"}  # not mutated
    assert record.funcName == "test_a_foreign_base_adapter_keeps_its_extra_and_ours"


def test_disabled_records_build_nothing(records, monkeypatch):
    """A record below the level is dropped before any field is read (R-OLOG-07)."""
    logging.getLogger("tests.fields").setLevel(logging.INFO)
    monkeypatch.setattr(log_fields, "record_extra", _fail)
    execution_logger(WORKFLOW, EXECUTION, _adapter()).debug("dropped")
    assert records == []


def _fail(*args):
    raise AssertionError("fields read for a dropped record")


@pytest.fixture(scope="module")
def tracer():
    """A tracer of an SDK provider built here; the global provider is not set."""
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider().get_tracer("tests.log_fields")


def test_records_in_a_span_carry_its_trace_and_span_ids(records, tracer):
    """In a current valid span every record carries trace_id (32) and span_id (16)
    as lower-case hex, on module loggers too; outside it none (R-OLOG-03)."""
    from opentelemetry import trace

    with tracer.start_as_current_span("outer") as span:
        execution_logger(WORKFLOW, EXECUTION, _adapter()).info("in span")
        _adapter().info("module logger in span")
    with trace.use_span(trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)):
        _adapter().info("invalid span")
    _adapter().info("no span")
    context = span.get_span_context()
    in_span, module_in_span, invalid, none = records
    for record in (in_span, module_in_span):
        assert record.trace_id == format(context.trace_id, "032x")
        assert record.span_id == format(context.span_id, "016x")
        assert len(record.trace_id) == 32
        assert record.trace_id == record.trace_id.lower()
    assert in_span.workflow_id == 1
    assert "workflow_id" not in module_in_span.__dict__
    for record in (invalid, none):
        assert "trace_id" not in record.__dict__
        assert "span_id" not in record.__dict__


def test_the_filter_gives_other_loggers_records_the_fields(tracer):
    """WorkflowFieldsFilter on a handler sets the current fields on records of
    any logger, keeping attributes they have (R-OLOG-06)."""
    captured = []

    class Keep(logging.Handler):
        def emit(self, record):
            captured.append(record)

    handler = Keep()
    handler.addFilter(log_fields.WorkflowFieldsFilter())
    logger = logging.getLogger("tests.application")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("outside")
        with (
            log_fields.logging_about(workflow_log_fields(WORKFLOW, EXECUTION)),
            tracer.start_as_current_span("s"),
        ):
            logger.info("inside", extra={"workflow_id": "given"})
    finally:
        logger.removeHandler(handler)
    outside, inside = captured
    assert "workflow_id" not in outside.__dict__
    assert (inside.workflow_id, inside.step, len(inside.span_id)) == (
        "given",
        "send",
        16,
    )


ROOT = Path(__file__).resolve().parents[2]

_LOGS_IMPORT_NOTHING = """
import logging, sys

from tests.support.no_opentelemetry import NoOpenTelemetry as Blocker

if sys.argv[1] == "absent":
    sys.meta_path.insert(0, Blocker())
logging.basicConfig(level=logging.DEBUG)
import flask_geneva
from pathlib import Path
from types import SimpleNamespace
from flask_geneva.core.tagged_logging import execution_logger, module_logger
before = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
Blocker.attempts.clear()
w = SimpleNamespace(type="T", id=1, hero_type=None, hero_id=None)
e = SimpleNamespace(id=2, step_name="s")
execution_logger(w, e).info("x")
module_logger("flask_geneva").info("y")
after = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
assert after == before, (before, after)
assert Blocker.attempts == [], Blocker.attempts
if sys.argv[1] == "absent":
    assert after == [], after
print("imported:", after)
"""


@pytest.mark.parametrize("otel", ["absent", "installed"])
def test_the_logs_never_import_opentelemetry(otel):
    """The package never imports OpenTelemetry for its logs: logging a step's
    records with every field imports no opentelemetry module and tries none,
    whether the API is absent (then none is loaded at all) or installed (then
    only what the tracing module imported with flask_geneva is there,
    R-OTEL-01) (R-OLOG-03, R-OLOG-07)."""
    result = subprocess.run(
        [sys.executable, "-c", _LOGS_IMPORT_NOTHING, otel],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("imported: ["), result.stdout
    if otel == "absent":
        assert result.stdout.strip() == "imported: []"


def test_as_tagged_keeps_an_adapter_and_its_fields():
    """as_tagged returns a tagged adapter as it is, fields included (R-LOG-03)."""
    adapter = workflow_logger(WORKFLOW)
    assert as_tagged(adapter) is adapter
    assert adapter.fields is not None
    assert adapter.fields["workflow_id"] == 1
    assert module_logger("x").fields is None
