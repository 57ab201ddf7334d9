"""No stale workflow fields: after a step that raised, an operator action that
was refused, or a create() that failed, the next record of the same thread
about no workflow carries none (SPEC §28.3, R-OLOG-02, R-OLOG-06).

The fields are a context variable set per run and per action; a path that
set them and left by an exception without resetting them would name the old
workflow on every later record of the thread.
"""

from __future__ import annotations

import logging

import pytest

from flask_geneva import DuplicateWorkflowError
from flask_geneva import Executor
from flask_geneva import InvalidStateError
from flask_geneva import step
from flask_geneva.core import log_fields
from flask_geneva.core.tagged_logging import module_logger
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.span_recording import recording_spans
from tests.support.workflow import make_user


class Escape(BaseException):
    """Not an Exception: escapes every policy and the executor (R-EXE-35)."""


class Raises(geneva.Workflow):
    """Its step raises: ValueError (paused by its policy, re-raised) or Escape."""

    @step(on_exception="pause")
    def explode(self):
        self.logger.info("about to raise")
        if self.read_metadata("escape"):
            raise Escape
        raise ValueError("boom")


@pytest.fixture(params=["tracing off", "tracing on"])
def after(app, request):
    """Log one record on a module logger and on an application logger with the
    filter after the block; return their workflow and trace fields."""
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            captured.append(record)

    handler = Keep(logging.DEBUG)
    handler.addFilter(log_fields.WorkflowFieldsFilter())
    loggers = [logging.getLogger("flask_geneva.stale"), logging.getLogger("app.stale")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)

    def fields() -> list[dict[str, object]]:
        captured.clear()
        module_logger("flask_geneva.stale").info("outside any workflow")
        logging.getLogger("app.stale").info("outside any workflow")
        names = (*log_fields.WORKFLOW_FIELD_NAMES, *log_fields.TRACE_FIELD_NAMES)
        return [
            {name: record.__dict__[name] for name in names if name in record.__dict__}
            for record in captured
        ]

    if request.param == "tracing on":  # the trace ids must not stay either
        with recording_spans():
            yield fields
    else:
        yield fields
    for logger in loggers:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def test_no_stale_fields_after_a_step_that_raised(app, geneva_jobs, after):
    """A step whose ValueError is re-raised by the executor after its policy, and
    one whose BaseException escapes the executor: the thread's next records
    carry no workflow fields, and no trace ids (R-OLOG-02, R-OLOG-03, R-OLOG-06,
    R-OTEL-12, R-EXE-35, R-EXE-50)."""
    workflow = Raises.create(hero=make_user())
    execution_id = workflow.current_execution.id
    geneva_jobs.clear()
    with pytest.raises(ValueError, match="boom"):
        Executor.execute(execution_id)
    assert log_fields.current_fields() is None
    assert after() == [{}, {}]

    escaping = Raises.create(hero=make_user("escape@example.com"))
    escaping.write_metadata("escape", True)
    db.session.commit()
    execution_id = escaping.current_execution.id
    geneva_jobs.clear()
    with pytest.raises(Escape):
        Executor.execute(execution_id)
    db.session.rollback()
    assert log_fields.current_fields() is None
    assert after() == [{}, {}]


def test_no_stale_fields_after_a_refused_action_or_a_failed_create(
    app, geneva_jobs, after
):
    """An operator action the state refuses (InvalidStateError), a signal to a
    finished workflow and a create() refused as a duplicate leave no workflow
    fields behind (R-OLOG-02, R-EXT-26)."""
    hero = make_user()
    workflow = Raises.create(hero=hero)
    workflow.cancel()
    with pytest.raises(InvalidStateError):
        workflow.pause()
    assert after() == [{}, {}]
    with pytest.raises(InvalidStateError):
        workflow.resume()
    assert after() == [{}, {}]
    with pytest.raises(Exception):  # noqa: B017, PT011 - whichever refusal it is
        workflow.signal("never")
    db.session.rollback()
    assert after() == [{}, {}]

    StaleFieldsKeyed.create(hero=hero)
    with pytest.raises(DuplicateWorkflowError):
        StaleFieldsKeyed.create(hero=hero)  # R-UNQ-03
    db.session.rollback()
    assert log_fields.current_fields() is None
    assert after() == [{}, {}]


class StaleFieldsKeyed(geneva.Workflow):
    @step
    def only(self):
        pass
