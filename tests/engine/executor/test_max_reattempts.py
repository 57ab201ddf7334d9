"""Consecutive reattempt counting and max_reattempts (R-CNT-01..06)."""

from __future__ import annotations

import pytest

from flask_geneva import step
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import perform_step_inline
from tests.apps.basic import geneva
from tests.support.workflow import execution_history
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


class Flaky(Exception):
    """A step failure."""


class Script:
    """Per-test script of step results: "fail", "ok" or "reattempt" (manual)."""

    plan: list[str] = []

    @classmethod
    def next(cls, workflow):
        action = cls.plan.pop(0) if cls.plan else "ok"
        if action == "fail":
            raise Flaky("scripted failure")
        if action == "reattempt":
            workflow.reattempt()


class MaxReattemptsThree(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=3)
    def flaky(self):
        Script.next(self)

    @step
    def tail(self):
        pass


class MaxReattemptsUnlimited(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=None)
    def flaky(self):
        Script.next(self)


class MaxReattemptsTwo(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=2)
    def flaky(self):
        Script.next(self)

    @step
    def tail(self):
        pass


class MaxReattemptsOne(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=1)
    def flaky(self):
        Script.next(self)


def _explode(workflow):
    raise Flaky("condition failure")


class MaxReattemptsCondition(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=2, skip_if=_explode)
    def guarded(self):
        pass


def _run(workflow, times):
    for _ in range(times):
        with pytest.raises(Flaky):
            perform_next_step(workflow)


def test_limit_three_gives_four_executions_then_pauses(user):
    """max_reattempts=3: three reattempts, the fourth failure fails and pauses
    (R-CNT-04).
    """
    Script.plan = ["fail"] * 10
    workflow = MaxReattemptsThree.create(hero=user)
    _run(workflow, 4)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("failed", "failed"),
    ]
    assert rows[-1]["error_message"] == "scripted failure"
    assert workflow_row(workflow.id)["state"] == "paused"
    assert perform_next_step(workflow) is None
    assert len(execution_rows(workflow.id)) == 4


def test_none_means_unlimited(user):
    """max_reattempts=None never stops reattempting (R-DEF-10, R-POL-04)."""
    Script.plan = ["fail"] * 10
    workflow = MaxReattemptsUnlimited.create(hero=user)
    _run(workflow, 10)
    rows = execution_rows(workflow.id)
    assert [r["outcome"] for r in rows[:10]] == ["reattempted"] * 10
    assert (rows[10]["state"], len(rows)) == ("scheduled", 11)
    assert workflow_row(workflow.id)["state"] == "ready"


def test_count_resets_after_success(user):
    """A successful completion resets the count; only consecutive reattempts count
    (R-CNT-01, R-CNT-05).
    """
    Script.plan = ["fail", "fail", "ok", "fail", "fail", "fail"]
    workflow = MaxReattemptsTwo.create(hero=user)
    _run(workflow, 2)
    perform_next_step(workflow)  # ok: flaky completes, tail scheduled
    with pytest.raises(Flaky):
        perform_step_inline(workflow, "flaky")
    _run(workflow, 1)  # two reattempts are allowed again after the success
    assert workflow_row(workflow.id)["state"] == "ready"
    _run(workflow, 1)
    assert workflow_row(workflow.id)["state"] == "paused"
    assert [h[2] for h in execution_history(workflow.id) if h[0] == "flaky"] == [
        "reattempted",
        "reattempted",
        "success",
        "reattempted",
        "reattempted",
        "failed",
    ]


def test_terminal_failure_does_not_reset_the_count(user):
    """After a terminal pause and resume the next failure is terminal again
    (R-CNT-05).
    """
    Script.plan = ["fail"] * 10
    workflow = MaxReattemptsTwo.create(hero=user)
    _run(workflow, 3)
    assert workflow_row(workflow.id)["state"] == "paused"
    workflow.resume()
    _run(workflow, 1)
    assert workflow_row(workflow.id)["state"] == "paused"
    assert [h[2] for h in execution_history(workflow.id)] == [
        "reattempted",
        "reattempted",
        "failed",
        "failed",
    ]


def test_limit_applies_to_condition_exceptions(user):
    """Condition exceptions are counted like body exceptions (R-EXE-23, R-CNT-01)."""
    workflow = MaxReattemptsCondition.create(hero=user)
    _run(workflow, 3)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("failed", "failed"),
    ]
    assert [r["metadata"].get("reattempt_reason") for r in rows[:2]] == [
        "precondition",
        "precondition",
    ]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_manual_reattempts_are_not_limited(user):
    """reattempt() from the step is never capped and not counted (R-FC-16, R-CNT-03)."""
    Script.plan = ["reattempt"] * 5 + ["fail", "fail"]
    workflow = MaxReattemptsOne.create(hero=user)
    for _ in range(5):
        perform_next_step(workflow)
    assert workflow_row(workflow.id)["state"] == "ready"
    _run(workflow, 2)
    rows = execution_rows(workflow.id)
    assert [r["metadata"].get("reattempt_reason") for r in rows[:6]] == [
        "flow_control"
    ] * 5 + ["exception_policy"]
    assert (rows[6]["state"], rows[6]["outcome"]) == ("failed", "failed")
    assert workflow_row(workflow.id)["state"] == "paused"
