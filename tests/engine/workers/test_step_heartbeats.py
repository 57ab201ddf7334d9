"""A step's heartbeat never freezes the step (R-FLT-31..33, R-WRK-11).

The database here does not answer the heartbeat because another transaction
holds the worker's row (PostgreSQL, MariaDB) or the database's write lock
(SQLite): the write waits as it would in a network cut (the cut itself, with a
server of its own, is ``tests/engine/test_network_cuts.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

import pytest

from flask_geneva import step
from flask_geneva.db import workers as worker_rows
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.worker_harness import wait_for
from tests.support.workers import workers_table

TIMEOUT = 0.5


@pytest.fixture
def app_config():
    return {
        "GENEVA_WORKER_HEARTBEAT_INTERVAL": timedelta(seconds=60),
        "GENEVA_WORKER_DEAD_AFTER": timedelta(seconds=120),
        "GENEVA_HEARTBEAT_TIMEOUT": TIMEOUT,
    }


#: What the step saw: set by the test, read after the run.
_seen: dict[str, object] = {}


def _step_threads(worker_id):
    name = f"geneva-step-heartbeat-{worker_id[:8]}"
    return [thread for thread in threading.enumerate() if thread.name == name]


class FltHeartbeatUnanswered(geneva.Workflow):
    @step
    def beat(self):
        hold = _seen["hold"]
        holder = hold()  # another transaction holds what the heartbeat writes
        try:
            started = time.monotonic()
            _seen["first"] = self.heartbeat()
            _seen["second"] = self.heartbeat()  # joins the write still running
            _seen["waited"] = time.monotonic() - started
            _seen["threads"] = len(_step_threads(_seen["worker"]))
        finally:
            holder.close()  # rolls back: the heartbeat's write goes through
        self.hero.counter = 7  # the step's own session goes on


def _last_beat(worker_id):
    with db.engine.connect() as connection:
        return worker_rows.last_heartbeat(connection, workers_table(), worker_id)


def test_a_heartbeat_the_database_does_not_answer_returns_within_its_timeout(
    app, user, caplog
):
    """self.heartbeat() whose write waits returns False after
    GENEVA_HEARTBEAT_TIMEOUT with a warning; a second call waits for the same
    write (one thread); the step finishes; the write lands once the database
    answers (R-FLT-31, R-FLT-32)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva.workers")
    registration = worker_registry.register_worker(current_context())
    assert registration is not None
    worker_id = registration.identity.worker_id
    before = _last_beat(worker_id)
    assert before is not None

    def hold():
        connection = db.engine.connect()
        connection.begin()
        worker_rows.touch_worker(connection, workers_table(), worker_id)
        return connection

    _seen.clear()
    _seen.update(hold=hold, worker=worker_id)
    try:
        workflow = FltHeartbeatUnanswered.create(hero=user)
        perform_next_step(workflow)
        assert (_seen["first"], _seen["second"]) == (False, False)
        assert _seen["threads"] == 1
        # Two bounded waits; far less than the lock would have held the step.
        assert _seen["waited"] < 2 * TIMEOUT + 5
        db.session.refresh(workflow)
        db.session.refresh(user)
        assert (workflow.state, user.counter) == ("finished", 7)
        db.session.rollback()  # on SQLite a read holds the write lock
        wait_for(lambda: _last_beat(worker_id) > before, timeout=30)
    finally:
        db.session.rollback()
        worker_registry.deregister_workers()
    unanswered = [
        record.getMessage()
        for record in caplog.records
        if "got no answer from the database" in record.getMessage()
    ]
    assert unanswered
    assert unanswered[0] == (
        f"heartbeat of worker {worker_id} got no answer from the database within "
        f"{TIMEOUT:.1f} s (GENEVA_HEARTBEAT_TIMEOUT): the step goes on; the write "
        "ends on its own"
    )


def test_the_default_heartbeat_timeout_gives_way_to_a_shorter_dead_after():
    """Left unset, GENEVA_HEARTBEAT_TIMEOUT is 5 s, or GENEVA_WORKER_DEAD_AFTER
    when that is shorter; set above it, it is refused (R-FLT-31)."""
    from flask_geneva.core.config import config_from_mapping
    from flask_geneva.exceptions import GenevaConfigurationError

    assert config_from_mapping({}, testing=True).heartbeat_timeout == timedelta(
        seconds=5
    )
    short = {"GENEVA_WORKER_HEARTBEAT_INTERVAL": 1, "GENEVA_WORKER_DEAD_AFTER": 3}
    config = config_from_mapping(short, testing=True)
    assert config.heartbeat_timeout == timedelta(seconds=3)
    with pytest.raises(GenevaConfigurationError, match=r"\(4 s\) must be at most"):
        config_from_mapping({**short, "GENEVA_HEARTBEAT_TIMEOUT": 4}, testing=True)
