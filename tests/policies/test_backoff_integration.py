"""A failing step is rescheduled at the backoff's time and the decision says so (SPEC §9.7)."""

from __future__ import annotations

import contextlib
import itertools
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import Backoff
from flask_geneva import BackoffError
from flask_geneva import ExceptionPolicy
from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.core import clock
from flask_geneva.policies.backoff import jitter_fraction
from flask_geneva.policies.backoff import jitter_key
from flask_geneva.policies.resolution import decide
from flask_geneva.policies.resolution import resolve_policy
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class ServiceDown(Exception):
    """Raised by the test steps."""


class RateLimited(Exception):
    """An HTTP 429 carrying the server's Retry-After header value."""

    retry_after = "120"


class ExponentialCalls(geneva.Workflow):
    exception_policies = [
        on_exception(
            ServiceDown,
            action="reattempt",
            max_reattempts=10,
            wait=Backoff.exponential(30, cap=timedelta(hours=1)),
        )
    ]

    @step
    def call(self):
        raise ServiceDown("still down")


class RetryAfterCalls(geneva.Workflow):
    @step(
        on_exception=ExceptionPolicy(
            "reattempt", matching=RateLimited, wait=Backoff.retry_after(default=5)
        )
    )
    def call(self):
        raise RateLimited("slow down")


def bad_wait(attempt, error):
    return 5  # seconds instead of a timedelta


class BadCallableWait(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("reattempt", wait=bad_wait))
    def call(self):
        raise ServiceDown("down")


def as_utc(value):
    """Stored timestamps come back naive on SQLite/MariaDB: they are UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@pytest.fixture
def reports(app):
    calls = []
    app.config["GENEVA_ERROR_REPORTER"] = lambda error, **kw: calls.append(error)
    geneva.reload_settings(app)
    return calls


def run_failing(workflow, error_class):
    with contextlib.suppress(error_class):
        perform_next_step(workflow)


def test_exponential_backoff_reschedules_at_the_computed_time(user, geneva_jobs):
    """Each reattempt is due base * 2 ** (attempt - 1) plus its jitter later (R-POL-51..53, R-PDR-07)."""
    with clock.frozen(START):
        workflow = ExponentialCalls.create(hero=user)
        for _ in range(3):
            run_failing(workflow, ServiceDown)
        rows = execution_rows(workflow.id)
    assert [(row["state"], row["outcome"]) for row in rows[:3]] == [
        ("completed", "reattempted")
    ] * 3
    for attempt, (failed, following) in enumerate(itertools.pairwise(rows), start=1):
        plain = 30 * 2 ** (attempt - 1)
        fraction = jitter_fraction(jitter_key(workflow.id, "call", attempt))
        expected = timedelta(seconds=plain * (1 + 0.1 * fraction))
        decision = failed["metadata"]["policy_decision"]
        assert decision["backoff"] == "exponential backoff"
        assert decision["consecutive_reattempts"] == attempt - 1
        assert decision["wait_seconds"] == pytest.approx(expected.total_seconds())
        assert plain <= decision["wait_seconds"] <= plain * 1.1
        delay = as_utc(following["scheduled_for"]) - START
        assert abs(delay - expected) < timedelta(milliseconds=2)
    third = describe_policy_decision(rows[2]["metadata"]["policy_decision"])
    assert third.startswith("reattempt 3 of 10 in 2 min ")
    assert "(exponential backoff) — class-level policy #1 for " in third


def test_the_same_failures_get_the_same_waits_again(user, geneva_jobs):
    """Replaying the same workflow's failures computes the same waits (R-POL-52)."""
    with clock.frozen(START):
        workflow = ExponentialCalls.create(hero=user)
        run_failing(workflow, ServiceDown)
        run_failing(workflow, ServiceDown)
    first = [r["metadata"]["policy_decision"] for r in execution_rows(workflow.id)[:2]]
    resolution = resolve_policy(
        None, ExponentialCalls.__geneva_definitions__.exception_policies, ServiceDown()
    )
    again = [
        decide(
            resolution,
            count,
            error=ServiceDown(),
            workflow_id=workflow.id,
            step_name="call",
        ).wait.total_seconds()
        for count in (0, 1)
    ]
    assert [d["wait_seconds"] for d in first] == pytest.approx(again)


def test_retry_after_waits_as_long_as_the_error_says(user, geneva_jobs):
    """A 429's Retry-After: 120 reschedules 120 s later, no jitter (R-POL-54, R-PDR-07)."""
    with clock.frozen(START):
        workflow = RetryAfterCalls.create(hero=user)
        run_failing(workflow, RateLimited)
    failed, following = execution_rows(workflow.id)
    decision = failed["metadata"]["policy_decision"]
    assert decision["wait_seconds"] == 120.0
    assert decision["backoff"] == "Retry-After"
    assert as_utc(following["scheduled_for"]) == START + timedelta(seconds=120)
    assert describe_policy_decision(decision).startswith(
        "reattempt 1 of 100 in 2 min (Retry-After) — step policy"
    )


def test_a_callable_returning_a_number_pauses_and_reports(user, reports, geneva_jobs):
    """A bad wait is recorded through the failure path; the worker goes on (R-POL-55)."""
    workflow = BadCallableWait.create(hero=user)
    with pytest.raises(ServiceDown):
        perform_next_step(workflow)  # the step's own error, not a crash
    assert workflow_row(workflow.id)["state"] == "paused"
    (failed,) = execution_rows(workflow.id)
    assert (failed["state"], failed["outcome"]) == ("failed", "failed")
    decision = failed["metadata"]["policy_decision"]
    assert decision["action"] == "pause"
    assert decision["wait_error"].startswith(
        "BackoffError: wait callable bad_wait returned 5 (int) for attempt 1"
    )
    assert "the reattempt wait failed: BackoffError" in describe_policy_decision(
        decision
    )
    assert [type(error) for error in reports] == [BackoffError, ServiceDown]
    db.session.rollback()
