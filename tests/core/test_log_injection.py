"""Log lines never carry raw control characters from user data (issue 34, R-LOG-07).

An exception message, a stored type, hero type or step name, a signal name, an
operator's name: each can hold an ANSI escape (``ESC [2J`` clears a terminal
tailing the log) or a newline that forges a second log line. Every logger of
the package escapes the arguments it formats and the tags it prefixes, as the
CLI escapes what it prints (``core.terminal_text``).

The call sites that format user data, and the test that drives each:

=========================================================  =========================
call site                                                  test
=========================================================  =========================
every tagged line: workflow type, hero type, step name     ``test_stored_text_*``,
                                                           ``test_tagged_logging``
``prepare``: captured prepare error (``task_failures``)    ``test_stored_text_*``
``body``: before/after hook raised, captured body error    ``test_step_errors_*``
``task_failures.log_captured`` (policy decision)           ``test_step_errors_*``
``error_reporting.log_reported_error`` (logging reporter)  ``test_step_errors_*``
``policy_decisions``: exception handler raised             ``test_handler_error_*``
``prepare``: waiting for workflow signal <name>            ``test_signal_names_*``
``workflow_signals.delivery``: signal received, woke step  ``test_signal_names_*``
``error_reporting.report_row_error`` (recovery failed)     ``test_recovery_error_*``
``stuck_recovery`` / ``worker_lost``: recovered execution  ``test_recovery_error_*``
``admin.signal_delivery`` audit line: actor, name          ``test_admin_audit_*``
any other module logger (broker, database, config errors)  ``test_every_logger_*``
=========================================================  =========================
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import pkgutil
import re
from datetime import timedelta

import pytest

import flask_geneva
from flask_geneva import ExceptionPolicy
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core.tagged_logging import TaggedLoggerAdapter
from flask_geneva.reporters.logging import logging_reporter
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingOneStep
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow

#: What the CLI escapes (``terminal_text``): C0 (newline, CR, ESC), DEL, C1, bidi.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
POISON = "\x1b[2J\x1b[31mred\u202e\nFORGED flask_geneva: payment ok\r"
#: ``POISON`` as an escaped log line shows it.
SHOWN = "\\x1b[2J\\x1b[31mred\\u202e\\x0aFORGED flask_geneva: payment ok\\x0d"
SIGNAL = "pay\x1b[8mhidden\nment"


class InjectedStepError(geneva.Workflow):
    """A step and its after hook raise with ANSI escapes and a newline."""

    def after_step_execution(self, execution):
        raise ValueError(POISON)

    @step
    def charge(self):
        raise ValueError(POISON)


class InjectedBeforeHook(geneva.Workflow):
    def before_step_execution(self, execution):
        raise ValueError(POISON)

    @step
    def charge(self):
        pass


def _handler_raising(workflow, error):
    raise RuntimeError(POISON)


class InjectedHandler(geneva.Workflow):
    @step(on_exception=ExceptionPolicy(handler=_handler_raising))
    def charge(self):
        raise ValueError("step failed")


class InjectedSignalName(geneva.Workflow):
    @step(wait_for=SIGNAL)
    def paid(self):
        pass


@pytest.fixture
def app_config():
    return {"GENEVA_ERROR_REPORTER": logging_reporter}


@pytest.fixture
def logs(caplog):
    """The messages of every record the package logged, as handlers format them."""
    caplog.set_level(logging.DEBUG, logger="flask_geneva")

    def messages():
        return [
            record.getMessage()
            for record in caplog.records
            if record.name.startswith("flask_geneva")
        ]

    return messages


def _assert_escaped(messages, *expected):
    """No message holds a raw control character; each ``expected`` fragment is in
    one (the call site ran and logged the user data, escaped)."""
    raw = [message for message in messages if CONTROL.search(message)]
    assert raw == [], "raw control characters in log lines"
    for fragment in expected:
        assert any(fragment in message for message in messages), (fragment, messages)


def _run(workflow):
    with contextlib.suppress(Exception):
        perform_next_step(workflow)
    db.session.rollback()


def test_step_errors_and_hook_errors_are_logged_escaped(app, logs):
    """The captured exception (with its policy decision), the after hook's and
    the before hook's exceptions and the logging reporter's record carry the
    message escaped (R-LOG-07, R-EXE-37, R-REP-03)."""
    _run(InjectedStepError.create(hero=make_user()))
    _run(InjectedBeforeHook.create(hero=make_user()))
    _assert_escaped(
        logs(),
        f"after_step_execution raised ValueError: {SHOWN}",
        f"ValueError: {SHOWN}; exception policy: pause",
        f"flask_geneva reported ValueError: {SHOWN}",
        f"hook raised ValueError: {SHOWN}",
    )


def test_handler_error_is_logged_escaped(app, logs):
    """An imperative handler's exception is logged escaped (R-LOG-07, R-POL-11)."""
    _run(InjectedHandler.create(hero=make_user()))
    _assert_escaped(logs(), f"raised RuntimeError: {SHOWN}")


def test_stored_text_in_tags_and_errors_is_logged_escaped(app, logs):
    """A stored hero type (written by anyone with database access) reaches the
    workflow tag and the prepare error escaped (R-LOG-01..03, R-LOG-07)."""
    workflow = CountingOneStep.create(hero=make_user())
    update_workflow(workflow.id, hero_type=POISON)
    _run(workflow)
    _assert_escaped(
        logs(),
        f"hero_type={SHOWN} hero_id=",
        f"prepare phase raised HeroTypeNotFoundError: hero_type {POISON!r}",
    )


def test_signal_names_are_logged_escaped(app, logs):
    """The awaited signal's name when a step parks, and when it is delivered
    (R-LOG-07, R-WSIG-10, R-WSIG-11)."""
    workflow = InjectedSignalName.create(hero=make_user())
    _run(workflow)
    workflow.signal(SIGNAL)
    shown = "pay\\x1b[8mhidden\\x0ament"
    _assert_escaped(logs(), f"waiting for workflow signal {shown}")


def test_recovery_error_is_logged_escaped(app, logs):
    """A stuck execution whose stored step name the class does not define: the
    recovery's failure line, and a recovered execution's lines (R-LOG-07,
    R-HK-22)."""
    workflow = CountingOneStep.create(hero=make_user())
    execution_id = make_in_progress(
        workflow, flask_geneva.core.clock.now() - timedelta(days=1)
    )
    update_execution(execution_id, step_name=POISON)
    update_workflow(workflow.id, current_step_name=POISON)
    run_housekeeping()
    _assert_escaped(
        logs(),
        f"Failed to recover step execution {execution_id}: StepNotDefinedError: "
        f"Step '{SHOWN}' is not defined in CountingOneStep",
    )


def test_admin_audit_line_is_logged_escaped(app, logs):
    """The admin's signal delivery audit line names the actor and the signal
    escaped (R-LOG-07, R-WSIG-68)."""
    from flask_geneva.admin import signal_delivery

    signal_delivery._audit.info(
        "workflow %s: signal %r delivered via admin by %s: %s",
        1,
        SIGNAL,
        POISON,
        POISON,
    )
    _assert_escaped(logs(), f"delivered via admin by {SHOWN}: {SHOWN}")


def _package_modules():
    for info in pkgutil.walk_packages(flask_geneva.__path__, "flask_geneva."):
        if info.name.endswith("pytest_plugin"):
            continue
        yield importlib.import_module(info.name)


def test_every_logger_of_the_package_escapes_what_it_formats():
    """Every module-level logger of the package is an escaping adapter, so a
    call site added later escapes too; only ``flask_geneva.signals`` (the lowest
    layer, which imports nothing of ours) logs through a plain logger, with
    ``%r`` arguments only (R-LOG-07)."""
    plain = []
    for module in _package_modules():
        for name, value in vars(module).items():
            if isinstance(value, logging.Logger):
                plain.append(f"{module.__name__}.{name}")
            elif isinstance(value, logging.LoggerAdapter):
                assert isinstance(value, TaggedLoggerAdapter), (module, name)
    assert plain == ["flask_geneva.signals._log"]
