"""Rate limits: at most ``rate`` starts of a key in any window of ``per``.

R-LIM-23: a start is allowed only when the start ``rate`` starts back is at
least ``per`` old by the database's clock (a ring of the last ``rate`` start
times per key), so no window of length ``per`` holds more than ``rate`` starts.
R-LIM-24: a key whose window is full wakes its head waiter when the window
allows: the waiter is granted for that time and its task published with that
eta; each claim of a woken waiter wakes the next.
R-LIM-25: a changed rate or window starts the key's ring afresh.

The windows are short (real time: the database's clock cannot be frozen) and
the checks read the start times the ring itself recorded.
"""

from __future__ import annotations

import time
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.core.publications import LIMITED_JOB_ID
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import counters
from tests.support.limits import first_execution
from tests.support.workflow import execution_row

#: 3 s, not 1: a test's first phase (creating the workflows and running the
#: window's first starts) must end inside the window by the database's clock,
#: which a loaded machine can hold up for more than a second.
WINDOW = timedelta(seconds=3)
three_a_second = Limit("test-rate-three", rate=3, per=WINDOW, key=lambda wf: "acme")
two_running_five_a_second = Limit(
    "test-rate-and-concurrency",
    concurrency=2,
    rate=5,
    per=WINDOW,
)
STARTS: list[tuple[str, float]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    STARTS.clear()


class RateLimitedCall(geneva.Workflow):
    @step(limit=three_a_second)
    def call(self):
        STARTS.append(("call", time.monotonic()))


class RateAndConcurrency(geneva.Workflow):
    @step(limit=two_running_five_a_second)
    def call(self):
        STARTS.append(("call", time.monotonic()))


def ring_times(name: str) -> list[Any]:
    """The start times the ring holds for ``name`` (any key), oldest first."""
    table = db.metadata.tables["geneva_drive_limit_starts"]
    with db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        return list(
            connection.execute(
                sa.select(table.c.started_at)
                .where(table.c.limit_name == name)
                .order_by(table.c.started_at)
            ).scalars()
        )


def drain_until(geneva_jobs: Any, done: Any, timeout: float = 20.0) -> None:
    """Run due publications (respecting their eta) until ``done()``."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not done in time"
        geneva_jobs.drain(respect_eta=True)
        time.sleep(0.02)


def test_a_full_window_parks_and_wakes_the_head_waiter_when_it_allows(app, geneva_jobs):
    """R-LIM-23, R-LIM-24: 7 starts at rate 3 per 3 s take three windows, and no
    window of 3 s ever holds more than 3 starts by the database's clock."""
    ids = [first_execution(RateLimitedCall, f"r{i}@example.com")[1] for i in range(7)]
    geneva_jobs.drain(respect_eta=True)
    assert len(STARTS) == 3  # the first window's starts ran at once
    parked = [execution_row(i) for i in ids[3:]]
    assert {row["job_id"] for row in parked} == {LIMITED_JOB_ID}
    running, granted, waiting = counters("test-rate-three", "acme")
    assert (running, granted + waiting) == (0, 4)
    # The head waiter was woken for the window's end, with an eta.
    assert granted == 1
    assert [p.eta is not None for p in geneva_jobs.enqueued] == [True]

    drain_until(
        geneva_jobs, lambda: all(execution_row(i)["state"] == "completed" for i in ids)
    )
    assert counters("test-rate-three", "acme") == (0, 0, 0)
    # The database's time of every start, recorded with its claim.
    starts = sorted(
        datetime.fromisoformat(
            execution_row(i)["limit_holds"]["rate_starts"]["test-rate-three"]
        )
        for i in ids
    )
    assert len(starts) == 7
    # Every start is at least a window after the one 3 starts before it: no
    # window of 3 s holds 4 starts (exact, by the database's clock).
    for earlier, later in zip(starts, starts[3:], strict=False):
        assert later - earlier >= WINDOW, (earlier, later)
    # The ring keeps the last 3 starts, a window apart from the 3 before.
    assert ring_times("test-rate-three") == starts[-3:]


def test_rate_and_concurrency_together(app, geneva_jobs):
    """R-LIM-10, R-LIM-23: concurrency 2 and 5 starts per 3 s on one limit: all
    six run, the sixth a window after the first."""
    ids = [
        first_execution(RateAndConcurrency, f"c{i}@example.com")[1] for i in range(6)
    ]
    drain_until(
        geneva_jobs, lambda: all(execution_row(i)["state"] == "completed" for i in ids)
    )
    starts = sorted(execution_row(i)["started_at"] for i in ids)
    assert starts[5] - starts[0] >= WINDOW - timedelta(milliseconds=50)
    assert counters("test-rate-and-concurrency", "") == (0, 0, 0)
