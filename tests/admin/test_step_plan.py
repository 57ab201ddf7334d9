"""The step plan in words: each step's settings and its policies' reporting
(R-ADM-122, R-ADM-123). Pure presenters: no app, no database."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import Limit
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.admin.presenters import NO_REPORTER
from flask_geneva.admin.presenters import describe_policy
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.admin.step_plan import policy_summary
from flask_geneva.admin.step_plan import step_settings
from tests.apps.basic import geneva

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def tenant_of(workflow):
    return "acme"


plan_partner = Limit("plan-partner-api", concurrency=2, key=tenant_of)
plan_rate = Limit("plan-rate", rate=10, per=timedelta(minutes=1))


class PlanSettings(geneva.Workflow):
    """One step per setting the plan writes in words."""

    @step(
        wait_for="payment_confirmed",
        wait_timeout=timedelta(days=2),
        on_wait_timeout="pause",
    )
    def confirm(self):
        pass

    @step(wait_for="approved")
    def approve(self):
        pass

    @step(wait_for_children="any", on_child_failure="ignore")
    def gather(self):
        pass

    @step(limit=[plan_partner, plan_rate], timeout=timedelta(seconds=30))
    def push(self):
        pass

    @resumable_step(max_iterations=50, max_runtime=timedelta(minutes=5))
    def walk(self, it):
        pass

    @step(
        wait_for_children=True,
        on_exception=ExceptionPolicy("skip", report="terminal_only"),
    )
    def report(self):
        pass

    @step
    def plain(self):
        pass


def _settings(name):
    return step_settings(PlanSettings.step_collection().named(name))


def test_each_step_setting_reads_as_words():
    """wait_for with its timeout and what follows it, children and their
    failures, limits (concurrency, rate, key), the body's timeout and a
    resumable step's bounds each read as one line; a plain step has none
    (R-ADM-122)."""
    assert _settings("confirm") == [
        "waits for signal payment_confirmed; times out after 2 d, then pause"
    ]
    assert _settings("approve") == ["waits for signal approved; no timeout"]
    assert _settings("gather") == [
        "waits for any one child to settle; failed children are ignored"
    ]
    assert _settings("report") == [
        "waits for all its children to settle; a failed child fails the step "
        "(ChildWorkflowFailed)"
    ]
    assert _settings("push") == [
        "limit plan-partner-api: 2 at once, per key tenant_of",
        "limit plan-rate: 10 starts per 1 min, one key for all",
        "timeout 30 s a run (then StepTimeout)",
    ]
    assert _settings("walk") == [
        "at most 50 iterations an execution",
        "at most 5 min an execution",
    ]
    assert _settings("plain") == []


def test_without_a_reporter_the_plan_and_the_decisions_say_the_same():
    """With no GENEVA_ERROR_REPORTER the plan and the recorded decisions both say
    that no error reporter is configured, never "reported" beside "not
    reported (always)"; with one, the plan says "reported" and a decision
    "reported (always)"; a mode that does not ask for a report is said as it is
    (R-ADM-123)."""
    steps = PlanSettings.step_collection()
    workflow = PlanSettings()
    without = policy_summary(workflow, steps.named("plain"), reporter_configured=False)
    assert without == [
        f"default: pause — for any error — {NO_REPORTER} (report: always)"
    ]
    with_reporter = policy_summary(workflow, steps.named("plain"))
    assert with_reporter == ["default: pause — for any error — reported"]
    decision = {"action": "pause", "source": "default", "report": "always"}
    assert describe_policy_decision({**decision, "reported": False}) == (
        f"pause — default policy — {NO_REPORTER} (report: always)"
    )
    assert describe_policy_decision({**decision, "reported": True}) == (
        "pause — default policy — reported (always)"
    )
    # terminal_only: a report is asked for only when terminal.
    terminal_only = {"action": "skip", "source": "step", "report": "terminal_only"}
    assert describe_policy_decision({**terminal_only, "reported": False}) == (
        "skip — step policy — not reported (terminal_only)"
    )
    assert describe_policy_decision(
        {**terminal_only, "terminal": True, "reported": False}
    ) == (f"skip (terminal) — step policy — {NO_REPORTER} (report: terminal_only)")
    assert policy_summary(
        workflow, steps.named("report"), reporter_configured=False
    ) == [f"skip — for any error — {NO_REPORTER} (report: terminal_only)"]
    never = ExceptionPolicy("skip", report="never")
    assert describe_policy(never, reporter_configured=False) == (
        "skip — for any error — not reported"
    )
