"""Concurrency limits under concurrent workers: no overrun, no leak, no deadlock.

R-LIM-10: the cap holds whatever the number of workers delivering at once.
R-LIM-13/20/21: every slot freed goes to a waiter, and every run ends with the
key idle.
R-LIM-30: the lock order (workflow -> execution -> key rows sorted by (limit
name, key)) means a holder's release racing an operator's cancel of the head
waiter never deadlocks into a caller.

Threads are real workers here (each its own session and connection, started
at one barrier by :func:`tests.support.workflow.run_together`); PostgreSQL and
MariaDB only: SQLite's single writer serializes the threads, so there is no
race to lose. ``GENEVA_TEST_LIMIT_RACE_ROUNDS`` scales the rounds (default
50 for the release/cancel race, a fifth of it for the others).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import KEYS_TABLE
from tests.support.limits import assert_consistent
from tests.support.limits import assert_idle
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import published_ids
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_row
from tests.support.workflow import run_together
from tests.support.workflow import workflow_row

ROUNDS = int(os.environ.get("GENEVA_TEST_LIMIT_RACE_ROUNDS", "50"))
THREADS = 8

PAIR = "test-race-pair"
SINGLE = "test-race-single"
FRESH = "test-race-fresh"

#: The key the ``FreshKey`` workflows resolve to (a new one each round).
FRESH_KEY = ["r0"]

_active_lock = threading.Lock()
ACTIVE = {"now": 0, "max": 0}
#: Set by a ``Gated`` body once it runs; the body then waits for ``GATE``.
STARTED = threading.Event()
GATE = threading.Event()


def _running_body() -> None:
    with _active_lock:
        ACTIVE["now"] += 1
        ACTIVE["max"] = max(ACTIVE["max"], ACTIVE["now"])
    try:
        time.sleep(0.02)
    finally:
        with _active_lock:
            ACTIVE["now"] -= 1


class Pair(geneva.Workflow):
    @step(limit=Limit(PAIR, concurrency=2))
    def work(self):
        _running_body()


class Gated(geneva.Workflow):
    @step(limit=Limit(SINGLE, concurrency=1))
    def work(self):
        if not GATE.is_set():
            STARTED.set()
            assert GATE.wait(30), "the test never opened the gate"


class FreshKey(geneva.Workflow):
    @step(limit=Limit(FRESH, concurrency=1, key=lambda wf: FRESH_KEY[0]))
    def work(self):
        _running_body()


@pytest.fixture(autouse=True)
def _servers_only(app: Any) -> None:
    if db.engine.dialect.name == "sqlite":
        pytest.skip("SQLite's single writer serializes the workers: no race")
    ACTIVE.update(now=0, max=0)
    STARTED.clear()
    GATE.clear()


def _perform(execution_id: Any) -> Callable[[], None]:
    return lambda: perform_step_execution(execution_id, continue_inline=False)


def _run_published_together(app: Any, geneva_jobs: Any) -> None:
    """Deliver what was published, all at once, until nothing is left."""
    for _ in range(100):
        batch = published_ids(geneva_jobs)
        geneva_jobs.clear()
        if not batch:
            return
        run_together(app, [_perform(execution_id) for execution_id in batch])
    raise AssertionError("publications never ran out")


def _create(workflow_cls: Any, count: int, tag: str) -> list[tuple[Any, Any]]:
    created = [
        first_execution(workflow_cls, f"{tag}-{index}@example.com")
        for index in range(count)
    ]
    db.session.remove()
    return created


@pytest.mark.timeout(300)
def test_simultaneous_deliveries_never_overrun_the_cap(app, geneva_jobs):
    """R-LIM-10, R-LIM-13: 8 workflows of a concurrency-2 step delivered at once,
    round after round: never more than 2 bodies at once, all complete, and the
    key is idle after each round."""
    for round_number in range(max(ROUNDS // 5, 2)):
        created = _create(Pair, THREADS, f"pair{round_number}")
        geneva_jobs.clear()
        run_together(app, [_perform(execution_id) for _, execution_id in created])
        assert assert_consistent(PAIR, "")[0] == 0
        _run_published_together(app, geneva_jobs)
        assert ACTIVE["max"] <= 2, ACTIVE
        assert_idle(PAIR, "")
        for workflow_id, execution_id in created:
            assert execution_row(execution_id)["state"] == "completed"
            assert workflow_row(workflow_id)["state"] == "finished"
    assert ACTIVE["max"] == 2  # the threads did run side by side


@pytest.mark.timeout(300)
def test_a_release_racing_a_cancel_of_the_head_waiter(app, geneva_jobs):
    """R-LIM-30, R-LIM-13, R-LIM-21: holder A finishes while an operator cancels
    the workflow of B, the head waiter, C behind it. Whichever commits first,
    no deadlock reaches a caller and the slot ends granted to C, published."""
    for round_number in range(ROUNDS):
        (a_wf, a_id), (b_wf, b_id), (_, c_id) = _create(
            Gated, 3, f"gated{round_number}"
        )
        STARTED.clear()
        GATE.clear()
        holder_errors: list[BaseException] = []

        def hold(execution_id: Any = a_id, errors: list[Any] = holder_errors) -> None:
            with app.app_context():
                try:
                    perform_step_execution(execution_id, continue_inline=False)
                except BaseException as error:  # noqa: BLE001 - asserted below
                    errors.append(error)
                finally:
                    db.session.remove()

        holder = threading.Thread(target=hold)
        holder.start()
        assert STARTED.wait(30), "A's body never started"
        deliver(b_id)
        deliver(c_id)
        assert assert_consistent(SINGLE, "") == (1, 0, 2)
        geneva_jobs.clear()

        def finish_a(thread: threading.Thread = holder) -> None:
            GATE.set()
            thread.join(30)

        def cancel_b(workflow_id: Any = b_wf) -> None:
            geneva.Workflow.get(workflow_id).cancel()

        run_together(app, [finish_a, cancel_b])
        assert not holder.is_alive()
        assert holder_errors == []
        assert execution_row(a_id)["state"] == "completed"
        assert execution_row(b_id)["state"] == "canceled"
        assert assert_consistent(SINGLE, "") == (0, 1, 0)
        assert [w["execution_id"] for w in waiter_rows(SINGLE, "")] == [c_id]
        assert c_id in published_ids(geneva_jobs)
        _run_published_together(app, geneva_jobs)
        assert_idle(SINGLE, "")
        assert workflow_row(a_wf)["state"] == "finished"


@pytest.mark.timeout(300)
def test_first_uses_of_a_new_key_at_once(app, geneva_jobs):
    """R-LIM-10, R-LIM-30: 8 workers claim a key nobody used yet at once: one
    key row is created, no error reaches a worker, at most one body runs at a
    time, and all complete."""
    keys = db.metadata.tables[KEYS_TABLE]
    for round_number in range(max(ROUNDS // 5, 2)):
        FRESH_KEY[0] = f"r{round_number}"
        created = _create(FreshKey, THREADS, f"fresh{round_number}")
        geneva_jobs.clear()
        run_together(app, [_perform(execution_id) for _, execution_id in created])
        with db.engine.connect() as connection:
            rows = connection.execute(
                sa.select(sa.func.count())
                .select_from(keys)
                .where(keys.c.limit_name == FRESH, keys.c.limit_key == FRESH_KEY[0])
            ).scalar()
        assert rows == 1
        assert_consistent(FRESH, FRESH_KEY[0])
        _run_published_together(app, geneva_jobs)
        assert ACTIVE["max"] <= 1, ACTIVE
        assert_idle(FRESH, FRESH_KEY[0])
        for workflow_id, _ in created:
            assert workflow_row(workflow_id)["state"] == "finished"
