"""An operator's start of a workflow: create()'s path plus its audit record (R-ADM-201)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import DuplicateWorkflowError
from flask_geneva import StepConfigurationError
from flask_geneva.core import clock
from flask_geneva.ext.operations import start_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.common_workflows import CountingTwoSteps
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


def _workflow_count() -> int:
    return db.session.query(CountingTwoSteps).count()


def test_start_creates_the_workflow_and_records_who_started_it(user, geneva_jobs):
    """The start is create()'s: ready, first step scheduled and published after the
    commit; the operator action 'start' names the actor, via and first execution (R-ADM-201, R-PDR-05)."""
    workflow = start_workflow(
        CountingTwoSteps, hero=user, priority=7, actor="alice", via="admin"
    )
    row = workflow_row(workflow.id)
    assert row["state"] == "ready"
    [execution] = execution_rows(workflow.id)
    assert execution["state"] == "scheduled"
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [execution["id"]]
    assert row["metadata"]["step_job_options"] == {"priority": 7}
    [entry] = row["metadata"]["operator_actions"]
    assert entry["action"] == "start"
    assert entry["actor"] == "alice"
    assert entry["via"] == "admin"
    assert entry["from_state"] is None
    assert entry["to_state"] == "ready"
    assert entry["execution_id"] == execution["id"]


def test_start_at_delays_the_first_step(user, geneva_jobs):
    """start_at is the workflow's wait_until: its first execution is due then, and
    beyond GENEVA_MAX_BROKER_DELAY left to the dispatcher (R-ADM-201, R-JOB-09)."""
    later = clock.now() + timedelta(hours=3)
    workflow = start_workflow(CountingTwoSteps, hero=user, start_at=later)
    [execution] = execution_rows(workflow.id)
    assert abs(execution["scheduled_for"] - later) < timedelta(seconds=1)
    assert execution["job_id"] == "geneva:deferred"
    assert geneva_jobs.enqueued == []


def test_refusals_leave_no_row(user):
    """A duplicate, a priority out of range, a naive start time and a bad actor are
    create()'s errors and write nothing (R-ADM-201, R-UNQ-02, R-JOB-05, R-EXT-27)."""
    first = start_workflow(CountingTwoSteps, hero=user)
    with pytest.raises(DuplicateWorkflowError, match=f"workflow {first.id}"):
        start_workflow(CountingTwoSteps, hero=user)
    other = User(email="other@example.com")
    db.session.add(other)
    db.session.commit()
    with pytest.raises(StepConfigurationError, match="priority"):
        start_workflow(CountingTwoSteps, hero=other, priority=2**40)
    with pytest.raises(StepConfigurationError, match="wait_until"):
        start_workflow(
            CountingTwoSteps, hero=other, start_at=clock.now().replace(tzinfo=None)
        )
    with pytest.raises(ValueError, match="actor must be None or a str"):
        start_workflow(CountingTwoSteps, hero=other, actor=42)
    with pytest.raises(TypeError, match="needs a hero"):
        start_workflow(CountingTwoSteps, hero=None)
    assert _workflow_count() == 1
    assert db.session.query(CountingTwoSteps).one().id == first.id
