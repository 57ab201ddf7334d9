"""Counting Celery's soft time limit signals in a prefork child (R-STO-15)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva.core import soft_time_limits
from flask_geneva.engine.timeouts.body import timeout_error
from flask_geneva.exceptions import StepTimeout
from flask_geneva.ext.soft_limit_counting import count_soft_time_limits

pytestmark = pytest.mark.database_independent  # no database: once is enough


class Interrupted(Exception):
    """What the stand-in for billiard's handler raises."""


def soft_timeout_sighandler(signum, frame):  # billiard's handler's name
    raise Interrupted


def some_other_handler(signum, frame):
    raise Interrupted


@pytest.fixture
def usr1_handler() -> Iterator[None]:
    """Restore SIGUSR1's handler after the test."""
    before = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_billiards_handler_is_wrapped_once_and_counts_each_signal(usr1_handler):
    """R-STO-15: the wrapper records the signal, then billiard's handler raises
    as before; a second call finds the wrapper and wraps nothing again."""
    signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    assert count_soft_time_limits() is True
    wrapper = signal.getsignal(signal.SIGUSR1)
    assert count_soft_time_limits() is True
    assert signal.getsignal(signal.SIGUSR1) is wrapper
    before = soft_time_limits.count()
    with pytest.raises(Interrupted):
        signal.raise_signal(signal.SIGUSR1)
    assert soft_time_limits.count() == before + 1


def test_other_handlers_and_other_threads_are_left_alone(usr1_handler):
    """R-STO-15: the solo pool's own SIGUSR1 handler (a traceback dump) is not
    wrapped, and neither is anything from a thread but the main one."""
    signal.signal(signal.SIGUSR1, some_other_handler)
    assert count_soft_time_limits() is False
    assert signal.getsignal(signal.SIGUSR1) is some_other_handler
    signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    found: list[bool] = []
    thread = threading.Thread(target=lambda: found.append(count_soft_time_limits()))
    thread.start()
    thread.join()
    assert found == [False]
    assert signal.getsignal(signal.SIGUSR1) is soft_timeout_sighandler


START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kind", "error"),
    [("completed", None), ("exception", ValueError("the body's own"))],
)
def test_a_signalled_run_that_caught_the_limit_is_a_timeout(kind, error):
    """R-STO-15: a run during which the soft limit was signalled ends in
    StepTimeout although it looks shorter than its timeout by its own clock,
    whether it returned or raised an error of its own (kept as the cause)."""
    timed_out = timeout_error(
        step_name="fetch",
        timeout=timedelta(seconds=2),
        kind=kind,
        error=error,
        started_at=START,
        ended_at=START + timedelta(seconds=1),
        soft_limit_signalled=True,
    )
    assert isinstance(timed_out, StepTimeout)
    assert str(timed_out) == (
        "step 'fetch' ran longer than its timeout of 2 s: Celery's soft time "
        "limit interrupted it and the body went on (it caught the "
        "interruption), so its outcome is not used"
    )
    assert timed_out.__cause__ is error


@pytest.mark.parametrize("signalled", [False, True])
def test_flow_control_keeps_its_meaning_and_no_signal_no_timeout(signalled):
    """R-STO-12: a flow-control end is never a timeout; without a signal, a
    short run that raised its own error keeps it (returns None)."""
    common = {
        "step_name": "fetch",
        "timeout": timedelta(seconds=2),
        "started_at": START,
        "ended_at": START + timedelta(seconds=1),
    }
    assert (
        timeout_error(
            kind="flow_control", error=None, soft_limit_signalled=signalled, **common
        )
        is None
    )
    assert (
        timeout_error(
            kind="exception",
            error=ValueError("x"),
            soft_limit_signalled=False,
            **common,
        )
        is None
    )
