"""Resumable steps end to end: policies, chains, pause/resume, recovery (SPEC §10).

The gem's ``resumable_step_integration_test.rb`` scenarios (SPEC §17), plus the
port's rewind and interrupt-record rules.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

from flask_geneva import InvalidStateError
from flask_geneva import on_exception
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_current_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

SEEN: list[object] = []
FAIL_ONCE: set[object] = set()


class Flaky(RuntimeError):
    """Raised once per item listed in FAIL_ONCE."""


def _process(item: object) -> None:
    SEEN.append(item)
    if item in FAIL_ONCE:
        FAIL_ONCE.discard(item)
        raise Flaky(f"item {item!r} failed")


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()
    FAIL_ONCE.clear()


def _rows(workflow_id: object, step_name: str) -> list[object]:
    return [r for r in execution_rows(workflow_id) if r["step_name"] == step_name]


class ClassLevelReattempt(geneva.Workflow):
    exception_policies = [on_exception(Flaky, action="reattempt")]

    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3, 4, 5]):
            _process(item)

    @step
    def after(self):
        pass


def test_class_level_reattempt_continues_from_the_cursor(user, geneva_jobs):
    """A class-level reattempt policy continues from the last checkpoint (R-RES-34, R-EXE-45)."""
    FAIL_ONCE.add(3)
    workflow = ClassLevelReattempt.create(hero=user)
    with pytest.raises(Flaky):
        speedrun_workflow(workflow)
    speedrun_workflow(workflow)
    assert SEEN == [1, 2, 3, 3, 4, 5]
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "reattempted"),
        ("completed", "success"),
    ]
    assert walk[0]["cursor"] == 2
    assert walk[1]["continues_from_id"] == walk[0]["id"]
    assert walk[1]["metadata"] is None or "reattempt_reason" not in walk[1]["metadata"]
    assert walk[0]["metadata"]["reattempt_reason"] == "exception_policy"
    assert workflow_row(workflow.id)["state"] == "finished"


class TerminalSkip(geneva.Workflow):
    @resumable_step(on_exception="reattempt", max_reattempts=2, terminal_action="skip")
    def walk(self, it):
        for item in it.iterate_over(["x"]):
            raise Flaky(f"always {item}")

    @step
    def after(self):
        SEEN.append("after")


def test_terminal_skip_skips_the_step_after_the_reattempt_budget(user, geneva_jobs):
    """max_reattempts=2 with terminal skip: three failures, step skipped, workflow finishes (R-RES-36, R-CNT-04)."""
    workflow = TerminalSkip.create(hero=user)
    for _ in range(3):
        with pytest.raises(Flaky):
            speedrun_workflow(workflow)
    speedrun_workflow(workflow)
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("skipped", "skipped"),
    ]
    assert walk[1]["continues_from_id"] == walk[0]["id"]
    assert walk[2]["continues_from_id"] == walk[1]["id"]
    assert SEEN == ["after"]
    assert workflow_row(workflow.id)["state"] == "finished"


class ChunkBudget(geneva.Workflow):
    @resumable_step(max_iterations=2, on_exception="reattempt", max_reattempts=1)
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3, 4, 5, 6]):
            _process(item)

    @step
    def after(self):
        SEEN.append("after")


def test_the_reattempt_budget_is_per_chunk(user, geneva_jobs):
    """max_reattempts=1 allows one failure in each chunk: a continued completion resets
    the count, so the second chunk's failure is reattempted, not terminal (R-RES-37,
    R-CNT-01).
    """
    FAIL_ONCE.update({2, 4})
    workflow = ChunkBudget.create(hero=user)
    for _ in range(6):
        with contextlib.suppress(Flaky):
            perform_next_step(workflow)
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "reattempted"),
        ("completed", "continued"),
        ("completed", "reattempted"),
        ("completed", "continued"),
        ("completed", "success"),
    ]
    assert SEEN == [1, 2, 2, 3, 4, 4, 5, 6, "after"]
    assert workflow_row(workflow.id)["state"] == "finished"


class ReturnsNormally(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)
        SEEN.append(("cursor at the end", it.cursor))

    @step
    def after(self):
        pass


def test_a_returning_body_succeeds_and_keeps_its_last_cursor(user, geneva_jobs):
    """A body that returns completes with success, the next step is scheduled and the
    stored cursor keeps its last checkpointed value (R-RES-05).
    """
    workflow = ReturnsNormally.create(hero=user)
    perform_next_step(workflow)
    assert SEEN == [1, 2, 3, ("cursor at the end", 3)]
    walk, after = execution_rows(workflow.id)
    assert (walk["state"], walk["outcome"], walk["cursor"]) == (
        "completed",
        "success",
        3,
    )
    assert (after["step_name"], after["state"]) == ("after", "scheduled")
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"]) == ("ready", "after")


class SignalsMidway(geneva.Workflow):
    """Calls the action its hero's email names after the second item."""

    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)
            if item == 2:
                getattr(self, self.hero.email.split("@")[0])()

    @step
    def after(self):
        SEEN.append("after")


@pytest.mark.parametrize(
    ("action", "execution", "workflow_state", "next_step"),
    [
        ("cancel", ("canceled", "canceled"), "canceled", "walk"),
        ("skip", ("skipped", "skipped"), "ready", "after"),
        ("finish", ("completed", "success"), "finished", None),
    ],
)
def test_cancel_skip_and_finish_behave_as_in_regular_steps(
    user, geneva_jobs, action, execution, workflow_state, next_step
):
    """In a resumable step cancel(), skip() and finish() end the execution and the
    workflow exactly as in a regular one (R-RES-33, R-FC-10, R-FC-12, R-FC-14).
    """
    user.email = f"{action}@example.com"
    workflow = SignalsMidway.create(hero=user)
    perform_next_step(workflow)
    assert SEEN == [1, 2]
    rows = execution_rows(workflow.id)
    assert (rows[0]["state"], rows[0]["outcome"]) == execution
    wf = workflow_row(workflow.id)
    assert (wf["state"], wf["next_step_name"], wf["current_step_name"]) == (
        workflow_state,
        next_step,
        None,
    )
    assert [(r["step_name"], r["state"]) for r in rows[1:]] == (
        [("after", "scheduled")] if action == "skip" else []
    )


class QueuedChunks(geneva.Workflow):
    @resumable_step(max_iterations=1, job_options={"queue": "bulk"})
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)


def test_successors_are_published_with_the_step_queue(user, geneva_jobs):
    """Every successor is published with the step's job options (R-RES-06, R-SCH-08, R-JOB-02)."""
    workflow = QueuedChunks.create(hero=user)
    geneva_jobs.clear()
    run_iterations(workflow, 1)
    run_iterations(workflow, 1)
    walk = _rows(workflow.id, "walk")
    assert [r["outcome"] for r in walk] == ["continued", "continued", None]
    published = [p.step_execution_id for p in geneva_jobs.enqueued]
    assert published == [walk[1]["id"], walk[2]["id"]]
    assert {p.queue for p in geneva_jobs.enqueued} == {"bulk"}


class PausesOnFailure(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over(["a", "b", "c", "d"]):
            _process(item)

    @step
    def after(self):
        pass


def test_failed_step_resumes_from_its_cursor_and_is_not_skipped(user, geneva_jobs):
    """A failure pauses; resume() continues the failed execution's cursor (R-RES-35, R-EXT-22)."""
    FAIL_ONCE.add("c")
    workflow = PausesOnFailure.create(hero=user)
    with pytest.raises(Flaky):
        speedrun_workflow(workflow)
    failed = _rows(workflow.id, "walk")[0]
    assert (failed["state"], failed["outcome"], failed["cursor"]) == (
        "failed",
        "failed",
        2,
    )
    assert workflow_row(workflow.id)["state"] == "paused"
    successor = workflow.resume()
    assert successor.continues_from_id == failed["id"]
    assert successor.cursor_value == 2
    assert workflow_row(workflow.id)["next_step_name"] == "walk"
    speedrun_workflow(workflow)
    assert SEEN == ["a", "b", "c", "c", "d"]
    assert workflow_row(workflow.id)["state"] == "finished"


class PausedFromOutside(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3, 4]):
            _process(item)
            if item == 2 and not it.resumed:
                externally(self.id, "pause")

    @step
    def after(self):
        pass


def test_external_pause_stops_at_the_next_checkpoint_and_resume_continues(
    user, geneva_jobs
):
    """An external pause ends the chunk workflow_paused with its cursor; resume continues (R-INT-04, R-EXE-42, R-RES-30)."""
    workflow = PausedFromOutside.create(hero=user)
    perform_next_step(workflow)
    first = _rows(workflow.id, "walk")[0]
    assert (first["state"], first["outcome"], first["cursor"]) == (
        "completed",
        "workflow_paused",
        2,
    )
    assert first["metadata"]["interrupt"]["reason"] == "workflow_paused"
    assert first["metadata"]["interrupt"]["iterations"] == 2
    assert workflow_row(workflow.id)["state"] == "paused"
    successor = workflow.resume()
    assert successor.continues_from_id == first["id"]
    speedrun_workflow(workflow)
    assert SEEN == [1, 2, 3, 4]
    assert workflow_row(workflow.id)["state"] == "finished"


class CanceledFromOutside(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)
            externally(self.id, "cancel")


def test_external_cancel_stops_at_the_next_checkpoint(user, geneva_jobs):
    """An external cancel stops the iteration at its next checkpoint; the execution is canceled (R-INT-04, R-EXE-42)."""
    workflow = CanceledFromOutside.create(hero=user)
    perform_next_step(workflow)
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [("canceled", "canceled")]
    assert walk[0]["cursor"] == 1
    assert SEEN == [1]
    assert workflow_row(workflow.id)["state"] == "canceled"


SKIP_CONTINUATIONS: list[bool] = [False]


class SkipOnContinuation(geneva.Workflow):
    @resumable_step(max_iterations=1, skip_if="skip_now")
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)

    @step
    def after(self):
        SEEN.append("after")

    def skip_now(self) -> bool:
        return SKIP_CONTINUATIONS[0]


def test_skip_if_is_evaluated_for_continuations(user, geneva_jobs):
    """skip_if runs again for a successor and can skip the rest of the chain (R-RES-02)."""
    SKIP_CONTINUATIONS[0] = False
    workflow = SkipOnContinuation.create(hero=user)
    run_iterations(workflow, 1)
    SKIP_CONTINUATIONS[0] = True
    try:
        perform_next_step(workflow)
    finally:
        SKIP_CONTINUATIONS[0] = False
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "continued"),
        ("skipped", "skipped"),
    ]
    assert workflow_row(workflow.id)["next_step_name"] == "after"
    speedrun_workflow(workflow)
    assert SEEN == [1, "after"]


class SuspendsInRegularStep(geneva.Workflow):
    @step
    def regular(self):
        self.suspend(wait=timedelta(seconds=5))


def test_suspend_in_a_regular_step_raises_and_pauses(user, geneva_jobs):
    """suspend() outside a resumable step is an ordinary error mentioning resumable_step (R-FC-15)."""
    workflow = SuspendsInRegularStep.create(hero=user)
    with pytest.raises(InvalidStateError, match="resumable_step"):
        perform_next_step(workflow)
    (row,) = execution_rows(workflow.id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert "resumable_step" in row["error_message"]
    assert workflow_row(workflow.id)["state"] == "paused"


class RateLimited(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over(range(6)):
            _process(item)
            if item % 2 == 1 and item < 5:
                it.skip_to(item + 1, wait=timedelta(minutes=10))

    @step
    def after(self):
        SEEN.append("after")


def test_speedrun_current_step_follows_suspensions(user, geneva_jobs):
    """skip_to(wait=) chains successors after the wait; speedrun_current_step follows them (R-IT-05, R-RES-20, R-TH-02)."""
    before = clock.now()
    workflow = RateLimited.create(hero=user)
    final = speedrun_current_step(workflow)
    assert (final.state, final.outcome) == ("completed", "success")
    assert SEEN == [0, 1, 2, 3, 4, 5]
    walk = _rows(workflow.id, "walk")
    assert [r["outcome"] for r in walk] == ["continued", "continued", "success"]
    assert [r["cursor"] for r in walk] == [2, 4, 6]
    assert walk[1]["scheduled_for"] >= before + timedelta(minutes=10)
    assert walk[0]["metadata"]["interrupt"]["reason"] == "skip_to"
    assert workflow_row(workflow.id)["next_step_name"] == "after"


class SuspendsItself(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over(range(3)):
            _process(item)
            if item == 0 and not it.resumed:
                self.suspend(wait=timedelta(seconds=30))


def test_suspend_in_a_resumable_step_continues_after_the_wait(user, geneva_jobs):
    """suspend(wait) completes the chunk continued and schedules a successor after wait (R-RES-32, R-FC-15, R-PDR-03)."""
    before = clock.now()
    workflow = SuspendsItself.create(hero=user)
    perform_next_step(workflow)
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "continued"),
        ("scheduled", None),
    ]
    # The item was not checkpointed: suspend() left the loop body early.
    assert walk[1]["cursor"] is None
    assert walk[1]["continues_from_id"] == walk[0]["id"]
    assert walk[1]["scheduled_for"] >= before + timedelta(seconds=30)
    assert walk[0]["metadata"]["interrupt"]["reason"] == "suspend"
    speedrun_workflow(workflow)
    assert SEEN == [0, 0, 1, 2]


class ReattemptsItself(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)
            if item == 2 and not it.resumed:
                self.reattempt(rewind=self.hero.archived)


@pytest.mark.parametrize(
    ("rewind", "expected_seen", "expected_cursor"),
    [(False, [1, 2, 2, 3], 1), (True, [1, 2, 1, 2, 3], None)],
)
def test_reattempt_keeps_or_rewinds_the_cursor(
    user, geneva_jobs, rewind, expected_seen, expected_cursor
):
    """reattempt() continues from the cursor; reattempt(rewind=True) restarts with resumed=True (R-RES-31, R-FC-13)."""
    user.archived = rewind
    workflow = ReattemptsItself.create(hero=user)
    perform_next_step(workflow)
    walk = _rows(workflow.id, "walk")
    assert (walk[0]["state"], walk[0]["outcome"]) == ("completed", "reattempted")
    assert walk[0]["metadata"]["reattempt_reason"] == "flow_control"
    assert walk[1]["continues_from_id"] == walk[0]["id"]
    assert walk[1]["cursor"] == expected_cursor
    speedrun_workflow(workflow)
    assert expected_seen == SEEN


class PausesItself(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([1, 2, 3]):
            _process(item)
            if item == 2 and not it.resumed:
                self.pause()


@pytest.mark.parametrize(
    ("rewind", "expected_seen"),
    [(False, [1, 2, 2, 3]), (True, [1, 2, 1, 2, 3])],
)
def test_in_step_pause_then_resume_with_or_without_rewind(
    user, geneva_jobs, rewind, expected_seen
):
    """pause() keeps the cursor; resume() continues it, resume(rewind=True) restarts (R-RES-30, R-FC-11, R-EXT-22, R-EXT-26, R-SE-10)."""
    workflow = PausesItself.create(hero=user)
    perform_next_step(workflow)
    first = _rows(workflow.id, "walk")[0]
    assert (first["state"], first["outcome"], first["cursor"]) == (
        "completed",
        "workflow_paused",
        1,
    )
    successor = workflow.resume(rewind=rewind)
    assert successor.continues_from_id == first["id"]
    assert successor.cursor_value == (None if rewind else 1)
    speedrun_workflow(workflow)
    assert expected_seen == SEEN


def test_resume_rewind_clears_the_cursor_of_a_preserved_execution(user, geneva_jobs):
    """resume(rewind=True) empties a preserved scheduled successor's cursor (R-EXT-26, R-EXT-21)."""
    workflow = QueuedChunks.create(hero=user)
    run_iterations(workflow, 1)
    workflow.pause()
    scheduled = _rows(workflow.id, "walk")[1]
    assert scheduled["cursor"] == 1
    again = workflow.resume(rewind=True)
    assert again.id == scheduled["id"]
    assert _rows(workflow.id, "walk")[1]["cursor"] is None
    speedrun_workflow(workflow)
    assert SEEN == [1, 1, 2, 3]


class Walk5(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        for item in it.iterate_over([0, 1, 2, 3, 4]):
            _process(item)

    @step
    def after(self):
        pass


def test_housekeeping_recovers_a_stuck_execution_through_a_successor(user, geneva_jobs):
    """A stuck in-progress resumable execution is recovered by a successor carrying its cursor (R-HK-24)."""
    workflow = Walk5.create(hero=user)
    (row,) = execution_rows(workflow.id)
    long_ago = clock.now() - timedelta(hours=3)
    update_execution(row["id"], state="in_progress", started_at=long_ago, cursor=4)
    update_workflow(workflow.id, state="performing", current_step_name="walk")
    summary = geneva.run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    walk = _rows(workflow.id, "walk")
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "recovered"),
        ("scheduled", None),
    ]
    assert walk[1]["continues_from_id"] == walk[0]["id"]
    assert walk[1]["cursor"] == 4
    speedrun_workflow(workflow)
    assert SEEN == [4]
    assert workflow_row(workflow.id)["state"] == "finished"
