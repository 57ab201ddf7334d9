"""skip() of a paused workflow whose last step is preserved (R-EXT-04, R-EXT-05).

A paused workflow keeps its pending execution for ``resume()`` (R-EXT-01, and
R-EXE-42a when the pause lands while the step before runs). ``skip()`` from
``paused`` marks nothing itself: the INSERT of the next step's execution cancels
the preserved one (R-SCH-03). After the last step there is no INSERT; the workflow
finishes (R-SCH-06), and the preserved execution used to be left ``scheduled``
(or ``waiting``) behind a finished workflow, against the one-active rule's intent
(R-DM-09): a finished workflow beside an active execution. No race is needed:
these tests drive it in order. The operator race of
``test_merged_insert_races.py`` (walk variant) met it when its pause landed after
``walk``'s last chunk, with ``d`` preserved, and its skip came next.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import start_without_jobs
from tests.support.workflow import workflow_row

ACTIVE = ("scheduled", "in_progress", "waiting")
#: Step names (``walk`` with its cursor) in the order their bodies ran.
RUNS: list[str] = []


class SkipLastWaits(geneva.Workflow):
    """``last`` waits an hour: it stays scheduled while the workflow is paused."""

    @step
    def first(self):
        RUNS.append("first")

    @step(wait=timedelta(hours=1))
    def last(self):
        RUNS.append("last")


class SkipLastGated(geneva.Workflow):
    """``last`` parks at its gate (``waiting``) until ``go`` arrives (R-WSIG-10)."""

    @step
    def first(self):
        RUNS.append("first")

    @step(wait_for="go")
    def last(self):
        RUNS.append("last")


class SkipLastAfterWalk(geneva.Workflow):
    """The race test's walk: ``walk`` continues three times (skip_to), and its
    last chunk is paused from outside while it runs (R-EXT-02)."""

    @step
    def a(self):
        RUNS.append("a")

    @resumable_step
    def walk(self, it):
        cursor = it.cursor or 0
        RUNS.append(f"walk{cursor}")
        if cursor < 3:
            it.skip_to(cursor + 1)
        else:
            externally(self.id, "pause")

    @step
    def d(self):
        RUNS.append("d")


@pytest.fixture(autouse=True)
def _clear_runs():
    RUNS.clear()


def _active(workflow_id: Any) -> list[Any]:
    return [r for r in execution_rows(workflow_id) if r["state"] in ACTIVE]


def _run_due(workflow_id: Any) -> None:
    """Run the workflow's due scheduled executions one by one while it is ready."""
    for _ in range(10):
        if workflow_row(workflow_id)["state"] != "ready":
            return
        (due,) = [r["id"] for r in _active(workflow_id)]
        perform_step_execution(due, continue_inline=False)
        db.session.remove()


def _skip_and_check(workflow_id: Any, via: str, preserved: Any) -> None:
    """skip() finishes the workflow and ends the preserved execution canceled."""
    geneva.Workflow.get(workflow_id).skip(via=via)
    db.session.remove()
    row = workflow_row(workflow_id)
    assert (row["state"], row["current_step_name"], row["next_step_name"]) == (
        "finished",
        None,
        None,
    )
    assert _active(workflow_id) == []
    (ended,) = [r for r in execution_rows(workflow_id) if r["id"] == preserved]
    assert (ended["state"], ended["outcome"]) == ("canceled", "canceled")
    assert ended["canceled_at"] is not None
    assert ended["finished_at"] == ended["canceled_at"]  # R-SE-03
    actions = row["metadata"]["operator_actions"]
    assert [(a["action"], a["from_state"], a["to_state"]) for a in actions][-1] == (
        "skip",
        "paused",
        "finished",
    )


@pytest.mark.parametrize("via", ["api", "admin", "cli"])
def test_skip_at_a_preserved_last_step_cancels_it_and_finishes(
    app, user, geneva_jobs, via
):
    """Paused while its last step waits, skip() finishes the workflow and the
    preserved execution ends canceled/``canceled`` as R-SCH-03 ends one before a
    next step; its task, delivered later, runs nothing (R-EXT-04, R-EXT-05,
    R-SCH-03, R-SE-03, R-EXE-11).
    """
    workflow_id, first_id = start_without_jobs(SkipLastWaits, user, geneva_jobs)
    perform_step_execution(first_id, continue_inline=False)
    db.session.remove()
    (preserved,) = [r["id"] for r in _active(workflow_id)]
    geneva.Workflow.get(workflow_id).pause()
    db.session.remove()
    _skip_and_check(workflow_id, via, preserved)
    perform_step_execution(preserved, continue_inline=False, run_early=True)
    assert RUNS == ["first"]
    assert workflow_row(workflow_id)["state"] == "finished"


def test_skip_at_a_last_step_parked_at_its_gate_cancels_it(app, user, geneva_jobs):
    """A ``waiting`` execution (parked at its wait_for gate, then paused) is
    pending too: skip() at the last step cancels it and finishes; a later
    signal wakes nothing (R-EXT-04, R-WSIG-12, R-WSIG-16).
    """
    workflow_id, first_id = start_without_jobs(SkipLastGated, user, geneva_jobs)
    perform_step_execution(first_id, continue_inline=False)
    db.session.remove()
    (parked,) = _active(workflow_id)
    perform_step_execution(parked["id"], continue_inline=False)  # parks (R-WSIG-10)
    db.session.remove()
    assert [r["state"] for r in _active(workflow_id)] == ["waiting"]
    geneva.Workflow.get(workflow_id).pause()
    db.session.remove()
    _skip_and_check(workflow_id, "api", parked["id"])
    assert RUNS == ["first"]


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "published"])
def test_skip_after_a_walk_paused_in_its_last_chunk_finishes_cleanly(
    app, user, geneva_jobs, inline
):
    """The race test's leftover, in order: ``walk``'s last chunk completes under an
    external pause, so ``d`` is preserved (R-EXE-42a); skip() finishes the
    workflow and cancels ``d``, which never runs; no finished workflow keeps an
    active execution (R-EXT-04, R-EXT-05, R-RES-20, R-EXE-79).
    """
    workflow_id, first_id = start_without_jobs(SkipLastAfterWalk, user, geneva_jobs)
    perform_step_execution(first_id, continue_inline=inline)
    db.session.remove()
    _run_due(workflow_id)
    row = workflow_row(workflow_id)
    assert (row["state"], row["current_step_name"], row["next_step_name"]) == (
        "paused",
        None,
        "d",
    )
    (preserved,) = _active(workflow_id)
    assert (preserved["step_name"], preserved["state"]) == ("d", "scheduled")
    _skip_and_check(workflow_id, "api", preserved["id"])
    assert RUNS == ["a", "walk0", "walk1", "walk2", "walk3"]
