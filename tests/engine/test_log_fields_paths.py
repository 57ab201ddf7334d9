"""Every record the package logs about a workflow names it in its fields
(SPEC §28.3, R-OLOG-01, R-OLOG-02).

The main paths run with a handler that keeps every record of the
``flask_geneva`` loggers at DEBUG: steps, a reattempt, an exception, the
operator's pause, resume and cancel, the recovery of a stuck execution, the
dispatcher enforcing a deadline and a workflow signal's delivery. A record
whose message names a workflow (``workflow 5``, the tag ``Type id=5``) or a
step execution (``execution 12``, ``execution_id=12``, ``perform_step(12)``)
must carry ``workflow_id`` (and ``execution_id`` when it names one execution)
matching a named one.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.deadlines.workflows import T0
from tests.engine.deadlines.workflows import Monthly
from tests.engine.deadlines.workflows import dispatch
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import make_user

_WORKFLOW = re.compile(r"\bworkflow (\d+)\b|\bid=(\d+)\b")
_EXECUTION = re.compile(
    r"\bexecution (\d+)\b|\bexecution_id=(\d+)\b|perform_step\((\d+)\)"
)


#: Workflows whose second step raised once (the step's writes roll back).
_RAISED: set[int] = set()


class Flaky(geneva.Workflow):
    """Reattempts once, then raises (paused by its policy), then finishes."""

    @step
    def first(self):
        self.logger.info("first ran")
        if not self.read_metadata("again"):
            self.write_metadata("again", True)
            self.reattempt()

    @step(on_exception="pause")
    def second(self):
        if self.id not in _RAISED:
            _RAISED.add(self.id)
            raise ValueError("boom")


class Signalled(geneva.Workflow):
    @step(wait_for="paid")
    def paid(self):
        pass


class Waits(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(wait=timedelta(days=1))
    def later(self):
        pass


@pytest.fixture
def records(app):
    """Every record of the package's loggers during the test."""
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            captured.append(record)

    logger = logging.getLogger("flask_geneva")
    handler = Keep(logging.DEBUG)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield captured
    logger.removeHandler(handler)
    logger.setLevel(previous)


def _owners():
    """execution id -> workflow id, for every stored execution."""
    executions = sa.table(
        "geneva_drive_step_executions", sa.column("id"), sa.column("workflow_id")
    )
    rows = db.session.execute(sa.select(executions.c.id, executions.c.workflow_id))
    owners = {str(row.id): str(row.workflow_id) for row in rows}
    db.session.rollback()
    return owners


def _check(records):
    """Each record naming a workflow or an execution carries matching fields."""
    owners = _owners()
    checked = 0
    for record in records:
        message = record.getMessage()
        workflows = {g for m in _WORKFLOW.finditer(message) for g in m.groups() if g}
        executions = {g for m in _EXECUTION.finditer(message) for g in m.groups() if g}
        named = workflows | {owners[e] for e in executions if e in owners}
        if not named:
            continue
        checked += 1
        field = getattr(record, "workflow_id", None)
        assert str(field) in named, (message, field)
        if len(executions) == 1 and record.execution_id is not None:
            assert str(record.execution_id) in executions, message
        for key in ("workflow_type", "execution_id", "step", "hero_type", "hero_id"):
            assert hasattr(record, key), (message, key)
    return checked


def test_step_runs_reattempts_and_exceptions_name_the_workflow(
    app, geneva_jobs, records
):
    """Steps run, a reattempt, a step's exception paused by its policy, the
    operator's resume: every record names its workflow; the body's own
    self.logger record names the execution and step (R-OLOG-01, R-OLOG-02)."""
    _RAISED.clear()
    workflow = Flaky.create(hero=make_user())
    geneva_jobs.drain()
    db.session.refresh(workflow)
    assert workflow.state == "paused"
    workflow.resume()
    geneva_jobs.drain()
    db.session.refresh(workflow)
    assert workflow.state == "finished"
    assert _check(records) > 10
    ran = [r for r in records if r.getMessage().endswith("first ran")]
    assert len(ran) == 2
    assert {(r.workflow_id, r.step, r.workflow_type) for r in ran} == {
        (workflow.id, "first", "Flaky")
    }
    assert ran[0].execution_id != ran[1].execution_id
    captured = [r for r in records if "ValueError: boom" in r.getMessage()]
    assert captured
    assert all(r.step == "second" for r in captured)


def test_operator_pause_resume_cancel_name_the_workflow(app, geneva_jobs, records):
    """The operator's pause, resume and cancel, their commits and publications
    (R-OLOG-02, R-EXT-01..03)."""
    workflow = Waits.create(hero=make_user())
    geneva_jobs.drain()
    workflow.pause()
    workflow.resume()
    workflow.cancel()
    assert _check(records) >= 4
    actions = [r for r in records if " via api" in r.getMessage()]
    assert len(actions) == 3
    assert {r.workflow_id for r in actions} == {workflow.id}


def test_stuck_recovery_names_each_workflow(app, records):
    """Housekeeping's recovery of stuck executions names each row's workflow
    (R-OLOG-02, R-HK-23..26)."""
    first = Waits.create(hero=make_user("a@example.com"))
    second = Waits.create(hero=make_user("b@example.com"))
    for workflow in (first, second):
        make_in_progress(workflow, clock.now() - timedelta(days=1))
    records.clear()
    run_housekeeping()
    recovered = [
        r
        for r in records
        if "execution" in r.getMessage() and "recovered:" in r.getMessage()
    ]
    assert {r.workflow_id for r in recovered} == {first.id, second.id}
    assert _check(records) >= 2


def test_deadline_enforcement_names_the_workflow(app, geneva_jobs, records):
    """The dispatcher's deadline pass: the cancel and its line name the workflow
    (R-OLOG-02, R-DL-20)."""
    with clock.frozen(T0):
        workflow = Monthly.create(hero=make_user())
        geneva_jobs.drain()
    db.session.remove()
    records.clear()
    with clock.frozen(T0 + timedelta(days=30)):
        assert dispatch().deadlines == 1
    reached = [r for r in records if "reached its deadline" in r.getMessage()]
    assert [r.workflow_id for r in reached] == [workflow.id]
    assert _check(records) >= 2


def test_signal_delivery_names_the_workflow(app, geneva_jobs, records):
    """A workflow signal's delivery and the woken step (R-OLOG-02, R-WSIG-11)."""
    workflow = Signalled.create(hero=make_user())
    geneva_jobs.drain()
    workflow.signal("paid")
    geneva_jobs.drain()
    received = [r for r in records if "received" in r.getMessage()]
    assert received
    assert {r.workflow_id for r in received} == {workflow.id}
    assert _check(records) >= 4
