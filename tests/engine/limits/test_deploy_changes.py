"""A deploy changes a limit, or a step's limits, while executions run or wait.

R-LIM-17: the cap is what the claiming process declares; a raised cap is
honoured at the next claim (which grants the waiters behind), a lowered one
lets nothing new start until the key is below it, and stops nothing running.
R-LIM-21: a waiter whose step lost its limit leaves the queue at its claim
(a grant it had goes on to the next waiter) and runs.
R-LIM-25: a changed rate counts afresh.

A deploy is simulated in-process: the module-level ``Limit`` (frozen) or the
step definition gets its new settings with ``object.__setattr__``, restored
after each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import assert_consistent
from tests.support.limits import assert_idle
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import key_row
from tests.support.limits import published_ids
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_row

NAME = "test-deploy"
deployed = Limit(NAME, concurrency=1)
RUNS: list[str] = []
DURING: list[Any] = []


class Deployed(geneva.Workflow):
    @step(limit=deployed)
    def work(self):
        while DURING:
            DURING.pop(0)()
        RUNS.append(self.hero.email)


def _work_step() -> Any:
    return Deployed.step_collection().named("work")


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    RUNS.clear()
    DURING.clear()
    work = _work_step()
    yield
    object.__setattr__(deployed, "concurrency", 1)
    object.__setattr__(work, "limits", (deployed,))


def _drain(geneva_jobs: Any) -> None:
    for _ in range(20):
        batch = published_ids(geneva_jobs)
        geneva_jobs.clear()
        if not batch:
            return
        for execution_id in batch:
            perform_step_execution(execution_id, continue_inline=False)
            assert_consistent(NAME, "")
    raise AssertionError("publications never ran out")


def test_a_raised_cap_grants_the_waiters_behind_at_the_next_claim(app, geneva_jobs):
    """R-LIM-17: cap 1, H runs, W1 and W2 wait; the cap goes to 3. H's release
    grants W1 by the stored cap; W1's claim stores 3 and grants W2 at once."""
    _, holder = first_execution(Deployed, "h@example.com")
    _, w1 = first_execution(Deployed, "w1@example.com")
    _, w2 = first_execution(Deployed, "w2@example.com")
    db.session.remove()

    def park_and_raise() -> None:
        deliver(w1)
        deliver(w2)
        assert assert_consistent(NAME, "") == (1, 0, 2)
        object.__setattr__(deployed, "concurrency", 3)

    DURING.append(park_and_raise)
    geneva_jobs.clear()
    perform_step_execution(holder, continue_inline=False)
    assert published_ids(geneva_jobs) == [w1]
    geneva_jobs.clear()

    def w2_is_granted_while_w1_runs() -> None:
        assert assert_consistent(NAME, "") == (1, 1, 0)
        assert key_row(NAME, "")["concurrency"] == 3

    DURING.append(w2_is_granted_while_w1_runs)
    perform_step_execution(w1, continue_inline=False)
    assert published_ids(geneva_jobs) == [w2]
    _drain(geneva_jobs)
    assert RUNS == ["h@example.com", "w1@example.com", "w2@example.com"]
    assert_idle(NAME, "")


def test_a_lowered_cap_starts_nothing_new_and_stops_nothing(app, geneva_jobs):
    """R-LIM-17: cap 2 with one running; lowered to 1, a newcomer waits (the
    fast path's guard uses the new cap) and runs after the holder."""
    object.__setattr__(deployed, "concurrency", 2)
    _, holder = first_execution(Deployed, "h@example.com")
    _, newcomer = first_execution(Deployed, "n@example.com")
    db.session.remove()

    def lower_and_deliver() -> None:
        object.__setattr__(deployed, "concurrency", 1)
        deliver(newcomer)
        assert execution_row(newcomer)["state"] == "scheduled"
        assert assert_consistent(NAME, "") == (1, 0, 1)
        assert key_row(NAME, "")["concurrency"] == 1

    DURING.append(lower_and_deliver)
    geneva_jobs.clear()
    perform_step_execution(holder, continue_inline=False)
    assert published_ids(geneva_jobs) == [newcomer]
    _drain(geneva_jobs)
    assert RUNS == ["h@example.com", "n@example.com"]
    assert_idle(NAME, "")


@pytest.mark.parametrize("granted", [False, True], ids=["waiting", "granted"])
def test_a_waiter_whose_step_lost_its_limit_leaves_the_queue_and_runs(
    app, geneva_jobs, granted
):
    """R-LIM-21: W1 (granted or not) and W2 wait; a deploy removes the step's
    limit; W1's delivery leaves the queue (its grant goes to W2) and runs
    unlimited; the key ends idle."""
    _, holder = first_execution(Deployed, "h@example.com")
    _, w1 = first_execution(Deployed, "w1@example.com")
    _, w2 = first_execution(Deployed, "w2@example.com")
    db.session.remove()
    work = _work_step()

    def park_both() -> None:
        deliver(w1)
        deliver(w2)

    DURING.append(park_both)
    geneva_jobs.clear()
    if granted:
        perform_step_execution(holder, continue_inline=False)
        assert assert_consistent(NAME, "") == (0, 1, 1)
        object.__setattr__(work, "limits", ())
        geneva_jobs.clear()
        perform_step_execution(w1, continue_inline=False)
    else:
        # Not granted: delivered again (a resume, a duplicate) while H runs.
        DURING.append(lambda: object.__setattr__(work, "limits", ()))
        DURING.append(lambda: deliver(w1))
        perform_step_execution(holder, continue_inline=False)
    assert execution_row(w1)["state"] == "completed"
    assert execution_row(w1)["limit_holds"] is None
    assert [w["execution_id"] for w in waiter_rows(NAME, "")] == [w2]
    assert assert_consistent(NAME, "") == (0, 1, 0)
    assert published_ids(geneva_jobs) == [w2]
    _drain(geneva_jobs)
    assert sorted(RUNS) == ["h@example.com", "w1@example.com", "w2@example.com"]
    assert_idle(NAME, "")
