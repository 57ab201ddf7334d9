"""One write at a time, waited for at most a timeout (R-FLT-31, R-FLT-32)."""

from __future__ import annotations

import threading

import pytest

from flask_geneva.engine.workers import bounded_writes
from flask_geneva.engine.workers.bounded_writes import BoundedWriter

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _threads_named(name):
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_a_write_that_does_not_end_is_left_running_and_joined_by_the_next_call():
    """A blocked write times out for its caller; the next call waits for that
    same write instead of starting another, and sees it end (R-FLT-32)."""
    writer = BoundedWriter("test-bounded-write")
    release = threading.Event()
    started = []

    def blocked_write():
        started.append(1)
        release.wait(30)

    first = writer.write(blocked_write, 0.05)
    assert (first.outcome, first.joined, first.written) == (
        bounded_writes.TIMED_OUT,
        False,
        False,
    )
    second = writer.write(blocked_write, 0.05)
    assert (second.outcome, second.joined) == (bounded_writes.TIMED_OUT, True)
    assert len(started) == 1
    assert len(_threads_named("test-bounded-write")) == 1
    release.set()
    third = writer.write(blocked_write, 5)
    assert (third.outcome, third.joined) == (bounded_writes.WRITTEN, True)
    assert len(started) == 1
    fourth = writer.write(lambda: None, 5)
    assert (fourth.outcome, fourth.joined, fourth.written) == (
        bounded_writes.WRITTEN,
        False,
        True,
    )


def test_a_failed_write_hands_its_error_to_the_caller():
    """A write that raises ends as FAILED with its exception, never raised in
    the caller (R-FLT-31)."""
    writer = BoundedWriter("test-failing-write")

    def failing_write():
        raise RuntimeError("refused")

    result = writer.write(failing_write, 5)
    assert result.outcome == bounded_writes.FAILED
    assert isinstance(result.error, RuntimeError)
    assert str(result.error) == "refused"
    assert not result.written
