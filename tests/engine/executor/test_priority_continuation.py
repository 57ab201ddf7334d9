"""Inline continuation keeps the same-priority rule for every priority spelling (R-PRI-05).

The executor claims the next step inline only when it would be published with
the same merged priority as the step that completed (R-EXE-71): a step
``priority=`` that differs ends the chain and the next step is published with
its own priority; one shared through the class attribute or ``create(priority=)``
does not.
"""

from __future__ import annotations

import pytest

from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row


class PriorityInlineStepKeyword(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(priority=7)
    def second(self):
        pass


class PriorityInlineSameKeyword(geneva.Workflow):
    @step(priority=7)
    def first(self):
        pass

    @step(priority=7)
    def second(self):
        pass


class PriorityInlineClassAttribute(geneva.Workflow):
    priority = 4

    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


def test_a_different_step_priority_ends_the_chain(app, user, geneva_jobs):
    """``@step(priority=7)`` after a step of priority 0: the next step is
    scheduled and published with 7, not claimed inline (R-PRI-05, R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(
        PriorityInlineStepKeyword, user, geneva_jobs
    )
    perform_step_execution(first_id)
    assert [r["state"] for r in execution_rows(workflow_id)] == [
        "completed",
        "scheduled",
    ]
    [publication] = geneva_jobs.enqueued
    assert publication.priority == 7


@pytest.mark.parametrize(
    "workflow_cls", [PriorityInlineSameKeyword, PriorityInlineClassAttribute]
)
def test_the_same_priority_continues(app, user, geneva_jobs, workflow_cls):
    """Equal priorities, from the step keyword on both steps or from the class
    attribute, continue inline (R-PRI-05, R-EXE-71)."""
    workflow_id, first_id = start_without_jobs(workflow_cls, user, geneva_jobs)
    perform_step_execution(first_id)
    assert workflow_row(workflow_id)["state"] == "finished"
    assert geneva_jobs.enqueued == []
