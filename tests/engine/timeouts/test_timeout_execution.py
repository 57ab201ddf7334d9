"""A step that runs longer than its timeout ends in StepTimeout, handled by its
exception policies (R-STO-03, R-STO-04, R-STO-10..14).

In a prefork worker Celery's soft time limit raises ``SoftTimeLimitExceeded`` in
the body (``tests/worker/test_step_timeout_worker.py`` shows it): here the body
raises that exception itself, as the signal handler would. A body that returns
after its timeout is judged by geneva's clock, frozen and moved by the body.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from flask_geneva import ExceptionPolicy
from flask_geneva import StepTimeout
from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.ext.tasks import perform_step_execution
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import CONDITION_ERROR_OUTCOMES
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row

T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
TIMEOUT = timedelta(seconds=60)
STEP_TIMEOUT = "flask_geneva.exceptions.StepTimeout"


class Body:
    """What the next body run does: raise the soft limit, or let time pass."""

    soft_limit = False
    advance: timedelta | None = None
    frozen = None
    then: BaseException | None = None

    @classmethod
    def reset(cls, frozen=None):
        cls.soft_limit, cls.advance, cls.frozen, cls.then = False, None, frozen, None

    @classmethod
    def run(cls, workflow):
        if cls.advance is not None:
            cls.frozen.advance(cls.advance)
        if cls.soft_limit:
            raise SoftTimeLimitExceeded()
        if cls.then is not None:
            raise cls.then


@pytest.fixture
def body():
    with clock.frozen(T0) as frozen:
        Body.reset(frozen)
        yield Body
    Body.reset()


class TimedPause(geneva.Workflow):
    @step(timeout=TIMEOUT, on_exception="pause")
    def work(self):
        Body.run(self)

    @step
    def tail(self):
        pass


class TimedCancel(geneva.Workflow):
    @step(timeout=TIMEOUT, on_exception="cancel")
    def work(self):
        Body.run(self)

    @step
    def tail(self):
        pass


class TimedReattempt(geneva.Workflow):
    @step(timeout=TIMEOUT, on_exception="reattempt")
    def work(self):
        Body.run(self)

    @step
    def tail(self):
        pass


class TimedSkip(geneva.Workflow):
    @step(timeout=TIMEOUT, on_exception="skip")
    def work(self):
        Body.run(self)

    @step
    def tail(self):
        pass


TIMED = {
    "pause": TimedPause,
    "cancel": TimedCancel,
    "reattempt": TimedReattempt,
    "skip": TimedSkip,
}


class TimedMatching(geneva.Workflow):
    @step(
        timeout=TIMEOUT,
        on_exception=[
            ExceptionPolicy("cancel", matching=KeyError),
            ExceptionPolicy("skip", matching=StepTimeout),
        ],
    )
    def work(self):
        Body.run(self)

    @step
    def tail(self):
        pass


class TimedClassPolicy(geneva.Workflow):
    exception_policies = [on_exception(StepTimeout, action="cancel")]

    @step(timeout=TIMEOUT)
    def work(self):
        Body.run(self)


class TimedDefault(geneva.Workflow):
    @step(timeout=TIMEOUT)
    def work(self):
        Body.run(self)

    @step
    def tail(self):
        pass


@CONDITION_ERROR_OUTCOMES
def test_the_soft_time_limit_goes_to_each_step_policy(
    app, user, body, action, history, workflow_state
):
    """Celery's SoftTimeLimitExceeded in the body becomes StepTimeout, which the
    step's policy handles like any exception: pause, cancel, reattempt, skip
    (R-STO-10, R-STO-13, R-EXE-45)."""
    workflow = TIMED[action].create(hero=user)
    body.soft_limit = True
    with pytest.raises(StepTimeout) as raised:
        perform_next_step(workflow)
    assert isinstance(raised.value.__cause__, SoftTimeLimitExceeded)
    assert str(raised.value) == (
        "step 'work' ran longer than its timeout of 1 min: Celery's soft time "
        "limit interrupted it"
    )
    assert execution_history(workflow.id) == history
    assert workflow_row(workflow.id)["state"] == workflow_state
    first = execution_rows(workflow.id)[0]
    if action == "reattempt":  # R-SE-21: in the metadata only
        reattempted = db.session.get(geneva.StepExecution, first["id"])
        assert reattempted.exception_info["class"] == STEP_TIMEOUT
    else:
        assert first["error_class_name"] == STEP_TIMEOUT
        assert "Celery's soft time limit interrupted it" in first["error_message"]
        # The backtrace is the interrupted body's.
        assert "in run" in first["error_backtrace"]


def test_a_policy_matching_step_timeout_and_a_class_policy_see_it(app, user, body):
    """matching=StepTimeout captures it, a policy for another class does not; a
    class-level on_exception(StepTimeout) applies too (R-STO-13, R-POL-30, R-POL-40)."""
    matched = TimedMatching.create(hero=user)
    body.soft_limit = True
    with pytest.raises(StepTimeout):
        perform_next_step(matched)
    assert execution_history(matched.id) == [
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]
    classwide = TimedClassPolicy.create(hero=user)
    with pytest.raises(StepTimeout):
        perform_next_step(classwide)
    assert workflow_row(classwide.id)["state"] == "canceled"


def test_a_body_that_returns_after_its_timeout_ends_in_step_timeout(app, user, body):
    """A body that returned normally after its timeout passed (no pool
    interrupted it) ends in StepTimeout, its uncommitted writes discarded; the
    default policy pauses (R-STO-11, R-EXE-38)."""
    workflow = TimedDefault.create(hero=user)
    body.advance = TIMEOUT + timedelta(seconds=1)
    with pytest.raises(StepTimeout) as raised:
        perform_next_step(workflow)
    assert raised.value.__cause__ is None
    assert str(raised.value).startswith(
        "step 'work' ran 1 min 1 s, longer than its timeout of 1 min: its body "
        "returned after the timeout, so its outcome is not used"
    )
    assert (raised.value.step_name, raised.value.timeout_seconds) == ("work", 60.0)
    assert execution_history(workflow.id) == [("work", "failed", "failed")]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_a_body_within_its_timeout_completes(app, user, body):
    """Exactly the timeout is not longer than it: the step completes (R-STO-11)."""
    workflow = TimedDefault.create(hero=user)
    body.advance = TIMEOUT
    perform_next_step(workflow)
    assert execution_history(workflow.id)[0] == ("work", "completed", "success")


def test_other_ends_after_the_timeout_keep_their_meaning(app, user, body):
    """An exception other than the soft limit, and flow control, raised after the
    timeout, keep their meaning; an error raised while handling the soft limit
    is the timeout (R-STO-12, R-STO-10)."""
    other = TimedDefault.create(hero=user)
    body.advance, body.then = TIMEOUT * 2, KeyError("own")
    with pytest.raises(KeyError):
        perform_next_step(other)
    assert execution_rows(other.id)[0]["error_class_name"] == "KeyError"

    class TimedSkipsLate(geneva.Workflow):
        @step(timeout=TIMEOUT)
        def work(self):
            Body.frozen.advance(TIMEOUT * 2)
            self.skip()

        @step
        def tail(self):
            pass

    skipped = TimedSkipsLate.create(hero=user)
    perform_next_step(skipped)
    assert execution_history(skipped.id)[0] == ("work", "skipped", "skipped")

    class TimedRewraps(geneva.Workflow):
        @step(timeout=TIMEOUT)
        def work(self):
            try:
                raise SoftTimeLimitExceeded()
            except SoftTimeLimitExceeded:
                raise RuntimeError("cleanup after the limit failed") from None

    rewrapped = TimedRewraps.create(hero=user)
    with pytest.raises(StepTimeout) as raised:
        perform_next_step(rewrapped)
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_a_soft_limit_in_a_step_without_timeout_is_an_ordinary_error(app, user, body):
    """Without a timeout the soft limit (a task limit of the host's) is not
    converted: the policies see SoftTimeLimitExceeded (R-STO-12)."""

    class TimedNone(geneva.Workflow):
        @step
        def work(self):
            Body.run(self)

    workflow = TimedNone.create(hero=user)
    body.soft_limit = True
    with pytest.raises(SoftTimeLimitExceeded):
        perform_next_step(workflow)
    assert execution_rows(workflow.id)[0]["error_class_name"] == (
        "billiard.exceptions.SoftTimeLimitExceeded"
    )


class TimedMiddle(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(timeout=timedelta(seconds=30))
    def second(self):
        pass

    @step
    def third(self):
        pass


def test_publications_carry_the_time_limits_and_no_timeout_runs_inline(
    app, user, geneva_jobs
):
    """A step with a timeout is published with soft limit = timeout and hard limit =
    timeout + GENEVA_STEP_TIMEOUT_GRACE; a task claims it not inline, and its own
    task claims no step inline after it (R-STO-03, R-STO-04, R-EXE-71)."""
    app.config["GENEVA_STEP_TIMEOUT_GRACE"] = 5
    geneva.reload_settings(app)
    workflow_id, first_id = start_without_jobs(TimedMiddle, user, geneva_jobs)
    perform_step_execution(first_id)
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "scheduled"),
    ]
    (second,) = geneva_jobs.enqueued
    assert second.step_execution_id == rows[1]["id"]
    assert (second.soft_time_limit, second.time_limit) == (30.0, 35.0)
    geneva_jobs.clear()
    perform_step_execution(rows[1]["id"])
    rows = execution_rows(workflow_id)
    assert [(r["step_name"], r["state"]) for r in rows] == [
        ("first", "completed"),
        ("second", "completed"),
        ("third", "scheduled"),
    ]
    (third,) = geneva_jobs.enqueued
    assert (third.soft_time_limit, third.time_limit) == (None, None)


def test_the_publications_of_a_reattempt_and_a_resume_carry_the_limits(
    app, user, body, geneva_jobs
):
    """Every publication of the step's executions carries its limits: a
    reattempt's and resume()'s (R-STO-03, R-SCH-09)."""
    workflow = TIMED["reattempt"].create(hero=user)
    (created,) = geneva_jobs.enqueued
    assert (created.soft_time_limit, created.time_limit) == (60.0, 90.0)
    geneva_jobs.clear()
    body.soft_limit = True
    with pytest.raises(StepTimeout):
        perform_next_step(workflow)
    (reattempt,) = geneva_jobs.enqueued
    assert (reattempt.soft_time_limit, reattempt.time_limit) == (60.0, 90.0)
    geneva_jobs.clear()
    workflow.pause()
    workflow.resume()
    (resumed,) = geneva_jobs.enqueued
    assert (resumed.soft_time_limit, resumed.time_limit) == (60.0, 90.0)


def test_the_celery_publisher_sends_the_limits(app):
    """The Celery backend passes soft_time_limit and time_limit: the message's
    ``timelimit`` header is (hard, soft) (R-STO-03)."""
    from celery import Celery
    from celery.signals import before_task_publish

    from flask_geneva.core.publications import Publication
    from flask_geneva.ext.celery_publisher import CeleryBackend

    celery = Celery("timeout-publisher", set_as_current=False)
    celery.conf.update(broker_url="memory://")
    seen = []

    def record(sender=None, headers=None, **kwargs):
        seen.append(headers)

    before_task_publish.connect(record, weak=False)
    try:
        backend = CeleryBackend(celery)
        backend.publish(
            Publication("flask_geneva.perform_step", 1, "t-1", "default", None, None)
        )
        backend.publish(
            Publication(
                "flask_geneva.perform_step",
                2,
                "t-2",
                "default",
                None,
                None,
                soft_time_limit=30.0,
                time_limit=60.0,
            )
        )
    finally:
        before_task_publish.disconnect(record)
    assert [list(h["timelimit"]) for h in seen] == [[None, None], [60.0, 30.0]]
