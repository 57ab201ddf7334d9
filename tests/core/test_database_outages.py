"""Telling a lost connection from other errors, and waiting one out (R-FLT-01/02/10).

The errors of a server that really goes away are produced by
``tests/engine/test_database_restarts.py`` on servers of its own; here, the
errors that must never count (SQLite's own, a refused guard) and the
schedules' arithmetic.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva.core import database_outages
from flask_geneva.core.database_outages import OutageWindow
from flask_geneva.core.database_outages import claim_retry_delays
from flask_geneva.core.database_outages import connection_lost
from flask_geneva.exceptions import StateConflictError


def test_the_claim_waits_double_up_to_ten_seconds_for_dead_after():
    """R-FLT-02: 1, 2, 4, 8 s, then 10 s, until they sum to the window."""
    assert claim_retry_delays(timedelta(seconds=60)) == (1, 2, 4, 8, 10, 10, 10, 10, 10)
    assert claim_retry_delays(timedelta(seconds=2)) == (1, 2)
    assert claim_retry_delays(timedelta(milliseconds=1)) == (1,)
    with pytest.raises(ValueError, match="positive timedelta"):
        claim_retry_delays(timedelta(0))


def test_a_locked_sqlite_file_is_no_lost_connection(tmp_path):
    """SQLite's "database is locked" (an OperationalError without SQLSTATE) is
    a lock, not an outage: nothing is waited out for it."""
    engine = sa.create_engine(
        f"sqlite:///{tmp_path / 'locked.sqlite3'}",
        connect_args={"timeout": 0},
        poolclass=sa.pool.NullPool,
    )
    holder = sqlite3.connect(tmp_path / "locked.sqlite3", isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x INTEGER)")
        holder.execute("BEGIN EXCLUSIVE")
        with (
            pytest.raises(sa.exc.OperationalError) as locked,
            engine.begin() as connection,
        ):
            connection.execute(sa.text("INSERT INTO t VALUES (1)"))
    finally:
        holder.close()
        engine.dispose()
    assert "locked" in str(locked.value)
    assert connection_lost(locked.value) is None
    window = OutageWindow(timedelta(seconds=5), what="test", sleep=pytest.fail)
    assert window.wait(locked.value) is False
    assert window.attempts == 0


def test_errors_without_a_database_error_never_count():
    assert connection_lost(ValueError("no")) is None
    assert connection_lost(StateConflictError("step execution", 1, "a", "b")) is None


def test_an_outage_is_waited_out_with_doubling_sleeps_until_the_window_closes():
    """R-FLT-10: 0.25 s, 0.5 s, ... at most 2 s, never past the window."""
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    window = OutageWindow(
        timedelta(seconds=5), what="test", clock=lambda: now[0], sleep=sleep
    )
    lost = sa.exc.OperationalError(
        "SELECT 1", {}, sa.exc.DisconnectionError("gone"), connection_invalidated=True
    )
    assert database_outages.connection_lost(lost) is lost
    waited = []
    while window.wait(lost):
        waited.append(True)
    assert slept == [0.25, 0.5, 1.0, 2.0, 1.25]
    assert window.seconds_waited == pytest.approx(5.0)
    assert window.attempts == len(waited) + 1
