"""When the error reporter is called, what it sees, and when tasks fail (SPEC §9.6).

Reporting and failing the task are independent (R-REP-04): the report mode only
decides the reporter call; ``GENEVA_TASK_RERAISE`` decides whether the task
re-raises (R-EXE-50 amended). With the default ``"unhandled"`` a handled
reattempt returns normally and a terminal result raises; ``"always"`` raises both.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import ExceptionPolicy
from flask_geneva import cancel_if
from flask_geneva import current_error_context
from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


class Fatal(Exception):
    """The step failure every workflow here raises."""


class ReportAlways(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("reattempt", max_reattempts=1))
    def work(self):
        raise Fatal("always")


class ReportContextInBody(geneva.Workflow):
    seen: list[dict] = []

    @step
    def work(self):
        ReportContextInBody.seen.append(current_error_context())


class ReportNever(geneva.Workflow):
    @step(
        on_exception=ExceptionPolicy(
            "reattempt", max_reattempts=1, terminal_action="cancel", report="never"
        )
    )
    def work(self):
        raise Fatal("never")


class ReportTerminalOnly(geneva.Workflow):
    @step(
        on_exception=ExceptionPolicy(
            "reattempt",
            max_reattempts=1,
            terminal_action="cancel",
            report="terminal_only",
        )
    )
    def work(self):
        raise Fatal("terminal only")


class ReportHandlerTerminalOnly(geneva.Workflow):
    @on_exception(Fatal, report="terminal_only")
    def give_up(self, error):
        self.cancel()

    @step
    def work(self):
        raise Fatal("handler")


class ReportCondition(geneva.Workflow):
    mode = "always"

    @cancel_if
    def exploding(self):
        raise Fatal("condition")

    @step(
        on_exception=lambda wf, error: (
            wf.pause() if ReportCondition.mode == "always" else wf.cancel()
        )
    )
    def work(self):
        pass


class ReportConditionNever(geneva.Workflow):
    @cancel_if
    def exploding(self):
        raise Fatal("condition, never reported")

    @step(on_exception=ExceptionPolicy("pause", report="never"))
    def work(self):
        pass


calls_by_path: list[BaseException] = []


def module_reporter(error, *, handled, context, source):
    """A reporter configured by import path."""
    calls_by_path.append(error)


class CommittedStateReporter:
    """Records each call with the rows as another connection sees them."""

    def __init__(self):
        self.calls = []

    def __call__(self, error, *, handled, context, source):
        workflow_id = context["geneva_drive"]["workflow_id"]
        with db.engine.connect() as connection:
            table = geneva.Workflow.__table__
            state = connection.scalar(
                sa.select(table.c.state).where(table.c.id == workflow_id)
            )
            executions = geneva.StepExecution.__table__
            history = [
                (row.state, row.outcome)
                for row in connection.execute(
                    sa.select(executions.c.state, executions.c.outcome)
                    .where(executions.c.workflow_id == workflow_id)
                    .order_by(executions.c.created_at, executions.c.id)
                )
            ]
        self.calls.append(
            {
                "error": str(error),
                "handled": handled,
                "source": source,
                "context": context,
                "state": state,
                "history": history,
            }
        )


@pytest.fixture
def reporter(app):
    recorder = CommittedStateReporter()
    app.config["GENEVA_ERROR_REPORTER"] = recorder
    geneva.reload_settings(app)
    return recorder


def _run_task(workflow, *, raises=True):
    """Run the current execution through the task function; return the error.

    ``raises=False`` asserts that the task function returns normally (a handled
    reattempt under the default ``GENEVA_TASK_RERAISE="unhandled"``).
    """
    db.session.refresh(workflow)
    execution_id = workflow.current_execution.id
    db.session.commit()
    if not raises:
        perform_step_execution(execution_id)
        db.session.rollback()
        return None
    with pytest.raises(Fatal) as caught:
        perform_step_execution(execution_id)
    db.session.rollback()
    return caught.value


def test_always_reports_every_failure_after_the_commit(user, reporter):
    """report='always' reports reattempts and the terminal failure, each after its commit (R-REP-01/02, R-REP-10)."""
    workflow = ReportAlways.create(hero=user)
    first_id = workflow.current_execution.id
    _run_task(workflow, raises=False)
    _run_task(workflow)
    assert [call["error"] for call in reporter.calls] == ["always", "always"]
    first, second = reporter.calls
    assert first["history"] == [("completed", "reattempted"), ("scheduled", None)]
    assert first["state"] == "ready"
    assert second["history"] == [("completed", "reattempted"), ("failed", "failed")]
    assert second["state"] == "paused"
    assert (first["handled"], first["source"]) == (True, "flask_geneva")
    assert first["context"] == {
        "geneva_drive": {
            "workflow_id": workflow.id,
            "workflow_class": "ReportAlways",
            "step_execution_id": first_id,
            "step_name": "work",
            "hero_type": "User",
            "hero_id": user.id,
        }
    }


def test_never_reports_nothing_even_when_terminal(user, reporter):
    """report='never' suppresses reattempt and terminal reports (R-REP-01)."""
    workflow = ReportNever.create(hero=user)
    _run_task(workflow, raises=False)
    _run_task(workflow)
    assert reporter.calls == []
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert [
        r["metadata"]["policy_decision"]["reported"]
        for r in execution_rows(workflow.id)
    ] == [False, False]


def test_terminal_only_reports_just_the_terminal_failure(user, reporter):
    """report='terminal_only' skips the reattempt and reports the terminal cancel after its commit (R-REP-01/02)."""
    workflow = ReportTerminalOnly.create(hero=user)
    _run_task(workflow, raises=False)
    assert reporter.calls == []
    _run_task(workflow)
    assert [call["error"] for call in reporter.calls] == ["terminal only"]
    assert reporter.calls[0]["state"] == "canceled"
    assert reporter.calls[0]["history"] == [
        ("completed", "reattempted"),
        ("failed", "canceled"),
    ]
    assert [
        r["metadata"]["policy_decision"]["reported"]
        for r in execution_rows(workflow.id)
    ] == [False, True]


def test_terminal_only_handler_results_are_never_terminal(user, reporter):
    """Imperative results are not terminal, so terminal_only does not report them (R-POL-11, R-REP-01)."""
    workflow = ReportHandlerTerminalOnly.create(hero=user)
    _run_task(workflow)
    assert reporter.calls == []
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_condition_exceptions_are_reported_after_the_commit(user, reporter):
    """A condition exception's report comes after the precondition commit (R-REP-01/02, R-EXE-23/24)."""
    workflow = ReportCondition.create(hero=user)
    _run_task(workflow)
    assert [call["error"] for call in reporter.calls] == ["condition"]
    assert reporter.calls[0]["state"] == "paused"
    assert reporter.calls[0]["history"] == [("failed", "failed")]


def test_condition_exceptions_respect_report_never(user, reporter):
    """report='never' also silences condition exceptions (R-REP-01)."""
    workflow = ReportConditionNever.create(hero=user)
    _run_task(workflow)
    assert reporter.calls == []
    assert workflow_row(workflow.id)["state"] == "paused"


def test_reporter_by_import_path(app, user):
    """GENEVA_ERROR_REPORTER accepts an import path, resolved when the settings are read (R-REP-03, R-CFG-02)."""
    calls_by_path.clear()
    app.config["GENEVA_ERROR_REPORTER"] = "tests.ext.test_report_modes:module_reporter"
    geneva.reload_settings(app)
    workflow = ReportAlways.create(hero=user)
    _run_task(workflow, raises=False)
    assert [str(error) for error in calls_by_path] == ["always"]


@pytest.mark.parametrize(
    "workflow_cls", [ReportAlways, ReportNever, ReportTerminalOnly]
)
def test_task_fails_with_the_original_exception(app, user, reporter, workflow_cls):
    """With GENEVA_TASK_RERAISE='always', whatever the report mode, the step task function raises the step's own exception, also for a reattempt (R-REP-04, R-EXE-50 amended)."""
    app.config["GENEVA_TASK_RERAISE"] = "always"
    geneva.reload_settings(app)
    workflow = workflow_cls.create(hero=user)
    error = _run_task(workflow)
    assert type(error) is Fatal
    rows = execution_rows(workflow.id)
    assert (rows[0]["state"], rows[0]["outcome"]) == ("completed", "reattempted")


@pytest.mark.parametrize(
    "workflow_cls", [ReportAlways, ReportNever, ReportTerminalOnly]
)
def test_task_succeeds_on_a_handled_reattempt_by_default(user, reporter, workflow_cls):
    """By default, whatever the report mode, a reattempt the policy chose does not fail the task; the terminal result raises the step's own exception (R-REP-04, R-EXE-50 amended)."""
    workflow = workflow_cls.create(hero=user)
    assert _run_task(workflow, raises=False) is None
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("scheduled", None),
    ]
    assert rows[0]["metadata"]["policy_decision"]["action"] == "reattempt"
    error = _run_task(workflow)
    assert type(error) is Fatal
    assert execution_rows(workflow.id)[1]["metadata"]["policy_decision"]["terminal"]


def test_drained_task_failure_is_the_original_exception(user, reporter, geneva_jobs):
    """A worker running the published task sees the step's exception as the task failure once the reattempts end; the handled reattempt is no failure (R-REP-04, R-TH-20, R-EXE-50 amended)."""
    workflow = ReportTerminalOnly.create(hero=user)
    geneva_jobs.drain()
    assert [type(error) for _, error in geneva_jobs.failures] == [Fatal]
    assert [call["error"] for call in reporter.calls] == ["terminal only"]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_drained_task_failures_with_reraise_always(app, user, reporter, geneva_jobs):
    """With GENEVA_TASK_RERAISE='always' the handled reattempt fails its task too (R-REP-04, R-TH-20, R-EXE-50 amended)."""
    app.config["GENEVA_TASK_RERAISE"] = "always"
    geneva.reload_settings(app)
    workflow = ReportTerminalOnly.create(hero=user)
    geneva_jobs.drain()
    assert [type(error) for _, error in geneva_jobs.failures] == [Fatal, Fatal]
    assert [call["error"] for call in reporter.calls] == ["terminal only"]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_error_context_during_and_after_an_executor_call(user):
    """current_error_context() has the ids during a step and is empty after the call (R-REP-10, R-EXE-02)."""
    ReportContextInBody.seen.clear()
    workflow = ReportContextInBody.create(hero=user)
    execution_id = workflow.current_execution.id
    db.session.commit()
    perform_step_execution(execution_id)
    assert ReportContextInBody.seen == [
        {
            "geneva_drive": {
                "workflow_id": workflow.id,
                "workflow_class": "ReportContextInBody",
                "step_execution_id": execution_id,
                "step_name": "work",
                "hero_type": "User",
                "hero_id": user.id,
            }
        }
    ]
    assert current_error_context() == {}


@pytest.mark.parametrize("workflow_cls", [ReportAlways, ReportNever])
def test_celery_task_state_is_failure_with_the_original_exception(
    app, user, reporter, workflow_cls
):
    """With GENEVA_TASK_RERAISE='always' the registered Celery task ends FAILURE with the step's own exception, whatever `report` says (R-REP-04, R-JOB-22, R-EXE-50 amended)."""
    from celery import Celery

    app.config["GENEVA_TASK_RERAISE"] = "always"
    geneva.reload_settings(app)
    celery = Celery("report-modes")
    geneva.init_celery(celery, app=app)
    workflow = workflow_cls.create(hero=user)
    db.session.refresh(workflow)
    execution_id = workflow.current_execution.id
    db.session.commit()
    result = celery.tasks["flask_geneva.perform_step"].apply(args=[execution_id])
    db.session.rollback()
    assert result.state == "FAILURE"
    assert type(result.result) is Fatal
    rows = execution_rows(workflow.id)
    assert (rows[0]["state"], rows[0]["outcome"]) == ("completed", "reattempted")


@pytest.mark.parametrize(
    ("workflow_cls", "terminal_outcome"),
    [(ReportAlways, "failed"), (ReportNever, "canceled")],
)
def test_celery_task_state_by_default(
    app, user, reporter, workflow_cls, terminal_outcome
):
    """By default the registered Celery task ends SUCCESS on a handled reattempt and FAILURE with the step's own exception on the terminal result (R-JOB-22, R-EXE-50 amended)."""
    from celery import Celery

    celery = Celery("report-modes-default")
    geneva.init_celery(celery, app=app)
    task = celery.tasks["flask_geneva.perform_step"]
    workflow = workflow_cls.create(hero=user)
    states = []
    for _ in range(2):
        db.session.refresh(workflow)
        execution_id = workflow.current_execution.id
        db.session.commit()
        result = task.apply(args=[execution_id])
        db.session.rollback()
        states.append((result.state, type(result.result)))
    assert states == [("SUCCESS", type(None)), ("FAILURE", Fatal)]
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("failed", terminal_outcome),
    ]
