"""Operator actions on a waiter's workflow racing the grant of its slot.

R-LIM-13/14/20/21: holder A of a concurrency-1 key finishes (granting its slot
to the head waiter B) while an operator pauses, resumes, skips, cancels,
resumes at a step, runs now or recovers B's workflow; C waits behind B.
Whichever commits first: no error but a clear refusal reaches the operator,
the key's counters equal its rows after the race and after every delivery,
no step body runs twice, and the key ends idle with every workflow done.
R-LIM-30: the lock order keeps the two transactions from deadlocking into a
caller. PostgreSQL and MariaDB (SQLite's single writer serializes the
threads); ``GENEVA_TEST_LIMIT_RACE_ROUNDS`` scales the rounds (default 30
here, split over the actions).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import assert_consistent
from tests.support.limits import assert_idle
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import published_ids
from tests.support.workflow import execution_row
from tests.support.workflow import run_together
from tests.support.workflow import workflow_row

ROUNDS = max(int(os.environ.get("GENEVA_TEST_LIMIT_RACE_ROUNDS", "30")) // 6, 2)
LIMIT = "test-operator-race"

GATE = threading.Event()
STARTED = threading.Event()
_runs_lock = threading.Lock()
RUNS: Counter[Any] = Counter()


class Raced(geneva.Workflow):
    @step(limit=Limit(LIMIT, concurrency=1))
    def work(self):
        with _runs_lock:
            RUNS[self.id] += 1
        if not GATE.is_set():
            STARTED.set()
            assert GATE.wait(30), "the test never opened the gate"

    @step
    def after(self):
        pass


@pytest.fixture(autouse=True)
def _servers_only(app: Any) -> None:
    if db.engine.dialect.name == "sqlite":
        pytest.skip("SQLite's single writer serializes the workers: no race")
    RUNS.clear()


def _drain(app: Any, geneva_jobs: Any) -> None:
    """Deliver what was published, in parallel batches, checking the key."""
    for _ in range(50):
        batch = published_ids(geneva_jobs)
        geneva_jobs.clear()
        if not batch:
            return
        run_together(
            app,
            [
                (
                    lambda e=execution_id: perform_step_execution(
                        e, continue_inline=False
                    )
                )
                for execution_id in batch
            ],
        )
        assert_consistent(LIMIT, "")
    raise AssertionError("publications never ran out")


def _operator(workflow_id: Any, action: str) -> Callable[[], Any]:
    def act() -> Any:
        workflow = geneva.Workflow.get(workflow_id)
        try:
            if action == "resume_at":
                workflow.resume_at("work")
            else:
                getattr(workflow, action)()
        except InvalidStateError as refusal:
            return f"refused: {refusal}"
        return "done"

    return act


def _assert_race_settles(
    app: Any, geneva_jobs: Any, action: str, *, paused_first: bool
) -> None:
    for round_number in range(ROUNDS):
        (a_wf, a_id), (b_wf, b_id), (c_wf, c_id) = [
            first_execution(Raced, f"{action}{round_number}-{n}@example.com")
            for n in "abc"
        ]
        db.session.remove()
        GATE.clear()
        STARTED.clear()
        errors: list[BaseException] = []

        def hold(execution_id: Any = a_id, caught: list[Any] = errors) -> None:
            with app.app_context():
                try:
                    perform_step_execution(execution_id, continue_inline=False)
                except BaseException as error:  # noqa: BLE001 - asserted below
                    caught.append(error)
                finally:
                    db.session.remove()

        holder = threading.Thread(target=hold)
        holder.start()
        assert STARTED.wait(30), "A's body never started"
        deliver(b_id)
        deliver(c_id)
        assert assert_consistent(LIMIT, "") == (1, 0, 2)
        if paused_first:
            _operator(b_wf, "pause")()
            db.session.remove()
        geneva_jobs.clear()

        def finish_a(thread: threading.Thread = holder) -> None:
            GATE.set()
            thread.join(30)

        _, outcome = run_together(app, [finish_a, _operator(b_wf, action)])
        assert not holder.is_alive()
        assert errors == []
        assert outcome == "done" or outcome.startswith("refused: "), outcome
        assert execution_row(a_id)["state"] == "completed"
        assert_consistent(LIMIT, "")
        _drain(app, geneva_jobs)
        if workflow_row(b_wf)["state"] == "paused":
            _operator(b_wf, "resume")()
            db.session.remove()
            _drain(app, geneva_jobs)
        assert_idle(LIMIT, "")
        for workflow_id in (a_wf, b_wf, c_wf):
            assert RUNS[workflow_id] <= 1, (action, round_number, dict(RUNS))
            assert workflow_row(workflow_id)["state"] in ("finished", "canceled"), (
                action,
                workflow_row(workflow_id)["state"],
            )
        assert RUNS[c_wf] == 1


@pytest.mark.timeout(600)
@pytest.mark.parametrize("action", ["pause", "skip", "cancel", "run_now", "recover"])
def test_an_operator_action_on_the_head_waiter_racing_its_grant(
    app, geneva_jobs, action
):
    """R-LIM-13/14/21, R-LIM-30: the action on B's workflow races A's release."""
    _assert_race_settles(app, geneva_jobs, action, paused_first=False)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("action", ["resume", "resume_at", "cancel"])
def test_an_operator_action_on_a_paused_head_waiter_racing_a_release(
    app, geneva_jobs, action
):
    """R-LIM-14: B's workflow was paused while it waited (it keeps its place,
    C is granted instead); resumed, resumed at its step or canceled while A
    releases, it is served once, after or instead of C."""
    _assert_race_settles(app, geneva_jobs, action, paused_first=True)
