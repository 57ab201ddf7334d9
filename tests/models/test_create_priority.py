"""The three spellings of ``priority`` reach the publications as the job option does.

``create(priority=n)`` is ``step_job_options={"priority": n}``, the class
attribute ``priority = n`` is ``default_job_options={"priority": n}`` and
``@step(priority=n)`` is ``job_options={"priority": n}`` (R-PRI-01): the same
stored metadata and the same priorities on the recording backend, merged class
< instance < step (R-JOB-02). Refusals at ``create()`` store nothing.
"""

from __future__ import annotations

import pytest

from flask_geneva import step
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_row
from tests.support.workflow import workflow_row


class PriorityByKeywords(geneva.Workflow):
    __geneva_type__ = "PriorityByKeywords"
    priority = 2

    @step
    def plain(self):
        pass

    @step(priority=9)
    def urgent(self):
        pass


class PriorityByOptions(geneva.Workflow):
    __geneva_type__ = "PriorityByOptions"
    default_job_options = {"priority": 2}

    @step
    def plain(self):
        pass

    @step(job_options={"priority": 9})
    def urgent(self):
        pass


@pytest.fixture(autouse=True)
def _fast_lookup(app):
    app.config["GENEVA_FIND_DELAY"] = 0.0
    geneva.reload_settings(app)


def _run_all(geneva_jobs):
    """Run every recorded publication, one step per task; return (step, priority)."""
    ran = []
    while geneva_jobs.enqueued:
        publication = geneva_jobs.enqueued.pop(0)
        step_name = execution_row(publication.step_execution_id)["step_name"]
        ran.append((step_name, publication.priority))
        perform_step_execution(
            publication.step_execution_id, run_early=True, continue_inline=False
        )
        db.session.remove()
    return ran


@pytest.mark.parametrize(
    ("cls", "create_options"),
    [
        (PriorityByKeywords, {"priority": 5}),
        (PriorityByOptions, {"step_job_options": {"priority": 5}}),
    ],
    ids=["keywords", "job-options"],
)
def test_each_spelling_publishes_the_same_priorities(
    user, geneva_jobs, cls, create_options
):
    """Class, instance and step spellings publish what the job options do: the
    instance's 5 over the class's 2, the step's 9 over both (R-PRI-01, R-JOB-02)."""
    workflow = cls.create(hero=user, **create_options)
    workflow_id = workflow.id
    db.session.remove()
    assert workflow_row(workflow_id)["metadata"]["step_job_options"] == {"priority": 5}
    assert _run_all(geneva_jobs) == [("plain", 5), ("urgent", 9)]


def test_without_an_instance_priority_the_class_attribute_applies(user, geneva_jobs):
    """``priority = 2`` on the class is the class-level job option (R-PRI-01)."""
    PriorityByKeywords.create(hero=user)
    assert _run_all(geneva_jobs) == [("plain", 2), ("urgent", 9)]


def test_create_keeps_the_other_instance_options(user, geneva_jobs):
    """``priority=`` joins the given ``step_job_options`` (R-PRI-01)."""
    workflow = PriorityByKeywords.create(
        hero=user, priority=4, step_job_options={"queue": "mine"}
    )
    assert workflow.step_job_options == {"queue": "mine", "priority": 4}
    [publication] = geneva_jobs.enqueued
    assert (publication.queue, publication.priority) == ("mine", 4)


def test_the_same_value_given_both_ways_is_accepted(user, geneva_jobs):
    """One priority given as keyword and in ``step_job_options`` is one value."""
    workflow = PriorityByKeywords.create(
        hero=user, priority=4, step_job_options={"priority": 4}
    )
    assert workflow.step_job_options == {"priority": 4}


def test_two_different_priorities_at_create_are_refused(user, geneva_jobs):
    """``create(priority=5, step_job_options={"priority": 3})`` raises a
    ValueError (StepConfigurationError) naming both values; nothing is stored or
    published (R-PRI-01)."""
    with pytest.raises(StepConfigurationError) as raised:
        PriorityByKeywords.create(
            hero=user, priority=5, step_job_options={"priority": 3}
        )
    assert isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert message.startswith("PriorityByKeywords.create(): two different priorities")
    assert "priority=5" in message
    assert "step_job_options={'priority': 3}" in message
    assert count_workflows() == 0
    assert geneva_jobs.enqueued == []


@pytest.mark.parametrize("value", [True, "5", 2.0])
def test_a_create_priority_that_is_not_an_int_is_refused(user, geneva_jobs, value):
    """``create(priority=...)`` is checked as the job option: an int, bools
    refused; nothing is stored (R-PRI-01, R-JOB-05)."""
    with pytest.raises(StepConfigurationError) as raised:
        PriorityByKeywords.create(hero=user, priority=value)
    assert "job option 'priority' must be an int" in str(raised.value)
    assert repr(value) in str(raised.value)
    assert count_workflows() == 0
    assert geneva_jobs.enqueued == []


def test_create_unless_ongoing_passes_the_priority(user, geneva_jobs):
    """``create_unless_ongoing(priority=...)`` creates with it (R-PRI-01)."""
    workflow, created = PriorityByKeywords.create_unless_ongoing(hero=user, priority=7)
    assert created
    assert workflow.step_job_options == {"priority": 7}
    assert geneva_jobs.enqueued[0].priority == 7


@pytest.mark.parametrize(
    ("mapper", "published"),
    [("rabbitmq", [9, 9]), ("redis", [0, 0]), (None, [12, 9])],
)
def test_a_named_mapper_maps_the_published_priority(
    app, user, geneva_jobs, mapper, published
):
    """GENEVA_PRIORITY_MAPPER = "rabbitmq" clamps to 0..9, "redis" sends
    9 - clamp(p, 0, 9), None passes it unchanged; the instance's 12 for the
    first step, the step's own 9 for the second (R-PRI-03)."""
    app.config["GENEVA_PRIORITY_MAPPER"] = mapper
    geneva.reload_settings(app)
    PriorityByKeywords.create(hero=user, priority=12)
    assert [priority for _, priority in _run_all(geneva_jobs)] == published
