"""Job options end to end on the recording backend (SPEC §5.5, §6.1, R-JOB-01..09).

Validation messages at each level, precedence of class < instance < step, and the
merged options reaching every publication of a workflow: first enqueue, next step,
reattempts (flow control and exception policy), resume (re-enqueue and new
execution) and the dispatcher, with the instance options read back from the
stored metadata.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

T0 = datetime(2031, 3, 1, 9, 0, tzinfo=UTC)
ALLOWED = "'queue', 'priority', 'wait', 'wait_until'"
ATTEMPTS: Counter[tuple[int, str]] = Counter()


class JobOptPrecedence(geneva.Workflow):
    __geneva_type__ = "JobOptPrecedence"
    default_job_options = {"queue": "class-q", "priority": 1}

    @step
    def plain(self):
        pass

    @step(job_options={"queue": "step-q"})
    def routed(self):
        pass

    @step(job_options={"priority": 9})
    def urgent(self):
        pass


class JobOptLifecycle(geneva.Workflow):
    """Reattempts once by flow control, once by policy, pauses once, then ends."""

    __geneva_type__ = "JobOptLifecycle"
    default_job_options = {"queue": "class-q", "priority": 1}

    @step
    def first(self):
        ATTEMPTS[(self.id, "first")] += 1
        if ATTEMPTS[(self.id, "first")] == 1:
            self.reattempt()

    @step(on_exception="reattempt", max_reattempts=3)
    def flaky(self):
        ATTEMPTS[(self.id, "flaky")] += 1
        if ATTEMPTS[(self.id, "flaky")] == 1:
            raise RuntimeError("transient failure")

    @step
    def review(self):
        ATTEMPTS[(self.id, "review")] += 1
        if ATTEMPTS[(self.id, "review")] == 1:
            self.pause()

    @step(job_options={"queue": "step-q"})
    def last(self):
        pass


class JobOptLongWait(geneva.Workflow):
    __geneva_type__ = "JobOptLongWait"
    default_job_options = {"queue": "class-q"}

    @step
    def now(self):
        pass

    @step(wait=timedelta(days=3))
    def later(self):
        pass


@pytest.fixture(autouse=True)
def _fast_lookup(app):
    app.config["GENEVA_FIND_DELAY"] = 0.0
    geneva.reload_settings(app)
    ATTEMPTS.clear()


def run_recorded(geneva_jobs, limit=50):
    """Run recorded publications FIFO like a worker; return every one that ran.

    The clock is frozen, so each task runs as if the broker had held it until its
    eta: ``run_early`` lets the executor run it before its time (R-EXE-18).
    """
    ran = []
    while geneva_jobs.enqueued and len(ran) < limit:
        publication = geneva_jobs.enqueued.pop(0)
        ran.append(publication)
        try:
            # One step per task: each step's publication is what these tests check
            # (without continuation, R-EXE-72).
            perform_step_execution(
                publication.step_execution_id, run_early=True, continue_inline=False
            )
        except Exception:  # noqa: BLE001 - a failing task fails only itself
            db.session.rollback()
        db.session.remove()
    return ran


def routing(publications):
    """``[(step name, queue, priority)]`` of publications, from the stored rows."""
    return [
        (execution_row(p.step_execution_id)["step_name"], p.queue, p.priority)
        for p in publications
    ]


# -- validation messages (R-JOB-03..07) -------------------------------------------------


def test_misspelled_class_option_names_the_key_and_the_allowed_keys():
    """A typo in default_job_options fails at class creation naming it and the allowed set (R-JOB-03, R-JOB-06, R-JOB-07)."""
    with pytest.raises(StepConfigurationError) as caught:

        class JobOptTypoClass(geneva.Workflow):
            __geneva_type__ = "JobOptTypoClass"
            default_job_options = {"piority": 1}

            @step
            def only(self):
                pass

    message = str(caught.value)
    assert message.startswith("JobOptTypoClass.default_job_options:")
    assert "'piority'" in message
    assert ALLOWED in message


def test_misspelled_step_option_names_the_step_and_the_allowed_keys():
    """A typo in a step's job_options fails at definition with the step context (R-JOB-03, R-JOB-06)."""
    with pytest.raises(StepConfigurationError) as caught:

        class JobOptTypoStep(geneva.Workflow):
            __geneva_type__ = "JobOptTypoStep"

            @step(job_options={"queue": "q", "quene": "x"})
            def deliver(self):
                pass

    message = str(caught.value)
    assert message.startswith("Step 'deliver'")
    assert "'quene'" in message
    assert "'queue'," not in message.split("allowed")[0]
    assert ALLOWED in message


def test_wrong_value_type_names_key_value_and_type():
    """A bool priority is refused with key, value and type in the message (R-JOB-05)."""
    with pytest.raises(StepConfigurationError) as caught:

        class JobOptBoolPriority(geneva.Workflow):
            __geneva_type__ = "JobOptBoolPriority"
            default_job_options = {"priority": True}

    message = str(caught.value)
    assert "'priority'" in message
    assert "True (bool)" in message


def test_invalid_instance_options_on_create_leave_no_row_and_publish_nothing(
    user, geneva_jobs
):
    """Invalid step_job_options on create raise with the instance context; nothing is stored or sent (R-JOB-03, R-JOB-06, R-JOB-07)."""
    with pytest.raises(StepConfigurationError) as caught:
        JobOptPrecedence.create(hero=user, step_job_options={"piority": 5})
    db.session.rollback()
    message = str(caught.value)
    assert message.startswith("JobOptPrecedence.step_job_options=:")
    assert "'piority'" in message
    assert ALLOWED in message
    assert count_workflows() == 0
    assert geneva_jobs.enqueued == []


def test_instance_options_that_are_not_a_mapping_are_refused(user, geneva_jobs):
    """A non-mapping step_job_options assignment fails with "cannot coerce" (R-JOB-04, R-JOB-07)."""
    workflow = JobOptPrecedence.create(hero=user)
    with pytest.raises(StepConfigurationError, match="cannot coerce 'fast'"):
        workflow.step_job_options = "fast"
    with pytest.raises(StepConfigurationError, match=r"'wait'.*-1 \(int\)"):
        workflow.step_job_options = {"wait": -1}
    db.session.rollback()
    assert json.loads(json.dumps(workflow_row(workflow.id)["metadata"] or {})) == {}


# -- precedence (R-JOB-01, R-JOB-02, R-JOB-23) ------------------------------------------


def test_class_instance_and_step_options_merge_key_by_key(user, geneva_jobs):
    """Each step is published with class < instance < step options, key by key (R-JOB-02, R-JOB-08)."""
    JobOptPrecedence.create(hero=user, step_job_options={"priority": 5})
    ran = run_recorded(geneva_jobs)
    assert routing(ran) == [
        ("plain", "class-q", 5),
        ("routed", "step-q", 5),
        ("urgent", "class-q", 9),
    ]


def test_none_instance_values_do_not_override(user, geneva_jobs):
    """An instance option set to None leaves the class value in force (R-JOB-02, R-JOB-05)."""
    JobOptPrecedence.create(hero=user, step_job_options={"queue": None, "priority": 4})
    ran = run_recorded(geneva_jobs)
    assert routing(ran)[0] == ("plain", "class-q", 4)


def test_default_queue_applies_only_without_a_queue_option(app, user, geneva_jobs):
    """GENEVA_DEFAULT_QUEUE fills in when no level names a queue (R-JOB-23)."""
    app.config["GENEVA_DEFAULT_QUEUE"] = "geneva-default"
    geneva.reload_settings(app)
    JobOptLongWait.create(hero=user, step_job_options={"queue": "mine"})
    other = JobOptPrecedence.create(hero=user)
    assert geneva_jobs.enqueued[0].queue == "mine"
    assert geneva_jobs.enqueued[1].queue == "class-q"
    assert other.current_execution is not None


def test_priority_mapper_rewrites_the_merged_priority(app, user, geneva_jobs):
    """GENEVA_PRIORITY_MAPPER maps the merged priority before publication (R-JOB-08)."""
    app.config["GENEVA_PRIORITY_MAPPER"] = lambda priority: 10 - priority
    geneva.reload_settings(app)
    JobOptPrecedence.create(hero=user, step_job_options={"priority": 3})
    assert geneva_jobs.enqueued[0].priority == 7


# -- persistence across the workflow's life (R-JOB-02, R-SCH-04..09) --------------------


def test_merged_options_reach_every_publication_of_the_lifecycle(user, geneva_jobs):
    """Next step, both reattempt kinds and resume publish with the stored instance options (R-JOB-02, R-SCH-07, R-SCH-09)."""
    workflow = JobOptLifecycle.create(hero=user, step_job_options={"priority": 6})
    workflow_id = workflow.id
    db.session.remove()
    stored = workflow_row(workflow_id)["metadata"]
    assert stored["step_job_options"] == {"priority": 6}

    ran = run_recorded(geneva_jobs)
    assert workflow_row(workflow_id)["state"] == "paused"
    workflow = db.session.get(geneva.Workflow, workflow_id)
    workflow.resume()
    db.session.remove()
    ran += run_recorded(geneva_jobs)

    assert workflow_row(workflow_id)["state"] == "finished"
    assert routing(ran) == [
        ("first", "class-q", 6),
        ("first", "class-q", 6),  # reattempt() inside the step
        ("flaky", "class-q", 6),
        ("flaky", "class-q", 6),  # reattempt policy after the exception
        ("review", "class-q", 6),
        ("review", "class-q", 6),  # new execution created by resume()
        ("last", "step-q", 6),
    ]
    outcomes = [(r["step_name"], r["outcome"]) for r in execution_rows(workflow_id)]
    assert outcomes.count(("first", "reattempted")) == 1
    assert outcomes.count(("flaky", "reattempted")) == 1


def test_resume_re_enqueues_a_preserved_execution_with_the_same_options(
    user, geneva_jobs
):
    """Pausing a ready workflow keeps its execution; resume re-publishes it with the merged options (R-SCH-09, R-JOB-02)."""
    workflow = JobOptPrecedence.create(
        hero=user, step_job_options={"queue": "instance-q", "priority": 2}
    )
    workflow_id, execution_id = workflow.id, workflow.current_execution.id
    workflow.pause()
    geneva_jobs.clear()
    db.session.remove()

    workflow = db.session.get(geneva.Workflow, workflow_id)
    resumed = workflow.resume()
    assert resumed.id == execution_id
    [publication] = geneva_jobs.enqueued
    assert publication.step_execution_id == execution_id
    assert (publication.queue, publication.priority) == ("instance-q", 2)
    assert execution_row(execution_id)["state"] == "scheduled"


def test_instance_wait_is_read_back_from_metadata_for_later_steps(user, geneva_jobs):
    """A stored instance ``wait`` delays every later execution's scheduled_for and eta (R-JOB-09, R-JOB-02)."""
    with clock.frozen(T0):
        workflow = JobOptPrecedence.create(
            hero=user, step_job_options={"wait": timedelta(seconds=90)}
        )
        workflow_id = workflow.id
        db.session.remove()
        assert workflow_row(workflow_id)["metadata"]["step_job_options"] == {
            "wait": 90.0
        }
        ran = run_recorded(geneva_jobs)
    rows = execution_rows(workflow_id)
    assert [r["scheduled_for"] for r in rows] == [T0 + timedelta(seconds=90)] * 3
    assert [p.eta for p in ran] == [T0 + timedelta(seconds=90)] * 3


def test_dispatcher_publishes_deferred_executions_with_the_merged_options(
    app, user, geneva_jobs
):
    """A long wait is dispatched later with the class and stored instance options (R-DSP-02, R-JOB-02)."""
    with clock.frozen(T0):
        workflow = JobOptLongWait.create(hero=user, step_job_options={"priority": 8})
        workflow_id = workflow.id
        run_recorded(geneva_jobs)
    later = execution_rows(workflow_id)[-1]
    assert later["job_id"] == "geneva:deferred"
    assert geneva_jobs.enqueued == []

    with clock.frozen(T0 + timedelta(days=3)):
        assert geneva.dispatch_due() == 1
    [publication] = geneva_jobs.enqueued
    assert publication.step_execution_id == later["id"]
    assert (publication.queue, publication.priority) == ("class-q", 8)
    assert execution_row(later["id"])["job_id"] == publication.task_id
