"""Tagged logging: tag formats, base adapters and levels (SPEC §12.2, R-LOG-01..06)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.core.tagged_logging import TaggedLoggerAdapter
from flask_geneva.core.tagged_logging import as_tagged
from flask_geneva.core.tagged_logging import execution_logger
from flask_geneva.core.tagged_logging import execution_tag
from flask_geneva.core.tagged_logging import workflow_tag
from tests.apps.basic import db
from tests.apps.basic import geneva


class Boom(Exception):
    """A step failure."""


class LoggingFailing(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=1)
    def work(self):
        self.logger.info("about to fail")
        raise Boom("logged failure")


class PrefixAdapter(logging.LoggerAdapter):
    """A foreign adapter adding its own prefix and an extra field."""

    def process(self, msg, kwargs):
        kwargs.setdefault("extra", {})["request_id"] = "r-1"
        return f"<req r-1> {msg}", kwargs


def _fake_workflow(hero_id=7):
    return SimpleNamespace(
        type="SignupWorkflow", id=1, hero_type="User", hero_id=hero_id
    )


def test_workflow_tag_with_and_without_hero():
    """The workflow tag is '<Type> id=<id>' plus hero type and id when set (R-LOG-01)."""
    assert (
        workflow_tag(_fake_workflow()) == "SignupWorkflow id=1 hero_type=User hero_id=7"
    )
    assert workflow_tag(_fake_workflow(hero_id=None)) == "SignupWorkflow id=1"
    assert workflow_tag(_fake_workflow(hero_id="")) == "SignupWorkflow id=1"


def test_execution_tag():
    """The execution tag is 'execution_id=<id> step_name=<name>' (R-LOG-02)."""
    execution = SimpleNamespace(id=9, step_name="send")
    assert execution_tag(execution) == "execution_id=9 step_name=send"


def test_tags_prefix_messages_in_order(caplog):
    """Messages get '[tag] ' per tag, base tags first; tagged() appends without mutating (R-LOG-03)."""
    base = TaggedLoggerAdapter(logging.getLogger("tests.tags"), ("task_id=abc",))
    adapter = execution_logger(
        _fake_workflow(), SimpleNamespace(id=9, step_name="send"), base
    )
    with caplog.at_level(logging.INFO, logger="tests.tags"):
        adapter.info("sent %s", "mail")
        base.tagged("extra").info("plain")
    assert caplog.messages == [
        "[task_id=abc] [SignupWorkflow id=1 hero_type=User hero_id=7] "
        "[execution_id=9 step_name=send] sent mail",
        "[task_id=abc] [extra] plain",
    ]
    assert base.tags == ("task_id=abc",)
    assert isinstance(adapter, logging.LoggerAdapter)


def test_foreign_adapter_processing_is_kept_and_comes_first(caplog):
    """A non-tagged base adapter is wrapped: its prefix comes first and its extra survives (R-LOG-03)."""
    foreign = PrefixAdapter(logging.getLogger("tests.foreign"), {})
    adapter = as_tagged(foreign).tagged("wf")
    with caplog.at_level(logging.INFO, logger="tests.foreign"):
        adapter.info("hello")
    (record,) = caplog.records
    assert record.getMessage() == "<req r-1> [wf] hello"
    assert record.request_id == "r-1"
    assert record.name == "tests.foreign"


def test_default_base_logger_and_bad_base():
    """None means the flask_geneva logger; other objects are rejected by type (R-LOG-04)."""
    assert as_tagged(None).logger is logging.getLogger("flask_geneva")
    tagged = TaggedLoggerAdapter(logging.getLogger("x"), ("a",))
    assert as_tagged(tagged) is tagged
    with pytest.raises(TypeError, match="got 42 \\(int\\)"):
        as_tagged(42)


def test_execution_logger_outside_the_executor(user):
    """Outside executor calls the workflow logger has the workflow tag, the execution logger both (R-LOG-05, R-SE-45)."""
    workflow = LoggingFailing.create(hero=user)
    execution = workflow.current_execution
    assert workflow.logger.tags == (
        f"LoggingFailing id={workflow.id} hero_type=User hero_id={user.id}",
    )
    assert execution.logger.tags == (
        f"LoggingFailing id={workflow.id} hero_type=User hero_id={user.id}",
        f"execution_id={execution.id} step_name=work",
    )


def test_levels_of_executor_log_lines(user, caplog):
    """A captured exception logs once with its policy decision: at WARNING when the policy handles it (reattempt), at ERROR when it ends terminal; the reattempt cap at WARNING; all tagged (R-LOG-06 amended)."""
    workflow = LoggingFailing.create(hero=user)
    tags = f"[LoggingFailing id={workflow.id} hero_type=User hero_id={user.id}]"
    with caplog.at_level(logging.DEBUG, logger="flask_geneva"):
        for _ in range(2):
            db.session.refresh(workflow)
            execution_id = workflow.current_execution.id
            db.session.commit()
            with pytest.raises(Boom):
                Executor.execute(execution_id)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    step_lines = [(level, message) for level, message in lines if tags in message]
    assert (
        logging.INFO,
        f"{tags} [execution_id={execution_id} step_name=work] about to fail",
    ) in step_lines
    captured = [
        (level, message.split("] ")[-1])
        for level, message in step_lines
        if "encountered" in message
    ]
    assert captured == [
        (
            logging.WARNING,
            "encountered Boom: logged failure; exception policy: reattempt (wait=None)",
        ),
        (
            logging.ERROR,
            "encountered Boom: logged failure; exception policy: pause "
            "(wait=None, terminal)",
        ),
    ]
    assert any(
        level == logging.WARNING and "max reattempts (1) reached" in message
        for level, message in step_lines
    )


def test_tags_and_arguments_are_logged_escaped(caplog):
    """Tags and message arguments (str, exception, an object's repr, a mapping's
    values) are logged with control characters escaped; numbers keep %d/%.1f;
    the record names the caller and keeps exc_info (R-LOG-03, R-LOG-07)."""

    class Hero:
        def __repr__(self):
            return "<Hero \x1b[31mred\n>"

    caplog.set_level(logging.INFO, logger="escape-test")
    adapter = TaggedLoggerAdapter(logging.getLogger("escape-test"), ("t\x1b]0;x\x07",))
    error = ValueError("bad\r\nline")
    adapter.info("%s|%r|%s|%d|%.1f", "a\nb", Hero(), error, 3, 1.25, exc_info=error)
    adapter.info("%(name)s", {"name": "\u202eevil"})
    first, second = caplog.records
    assert first.getMessage() == (
        "[t\\x1b]0;x\\x07] a\\x0ab|<Hero \\x1b[31mred\\x0a>|bad\\x0d\\x0aline|3|1.2"
    )
    assert second.getMessage() == "[t\\x1b]0;x\\x07] \\u202eevil"
    assert (first.funcName, first.pathname) == (
        "test_tags_and_arguments_are_logged_escaped",
        __file__,
    )
    assert first.exc_info[1] is error
