"""Helpers for the worker registry suites: worker rows as a worker wrote them."""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva.db import workers as worker_rows
from tests.apps.basic import db
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

#: ``GENEVA_WORKER_DEAD_AFTER`` of the judging process (:func:`heartbeat_settings`).
DEAD_AFTER = timedelta(seconds=60)


@pytest.fixture(name="app_config")
def heartbeat_settings() -> dict[str, Any]:
    """The ``app_config`` of a registry suite: heartbeats every 15 s, a worker is
    dead after :data:`DEAD_AFTER`."""
    return {
        "GENEVA_WORKER_HEARTBEAT_INTERVAL": timedelta(seconds=15),
        "GENEVA_WORKER_DEAD_AFTER": DEAD_AFTER,
    }


def workers_table() -> sa.Table:
    """The ``geneva_drive_workers`` table of the test app."""
    return db.metadata.tables["geneva_drive_workers"]


def _time(value: datetime | timedelta) -> Any:
    if isinstance(value, timedelta):
        return worker_rows.DatabaseTime(None, value)
    return value


def insert_worker(
    last_heartbeat_at: datetime | timedelta,
    *,
    started_at: datetime | timedelta | None = None,
    dead_after_ms: int | None = None,
) -> str:
    """INSERT a worker row with plain SQL and return its id (host ``host``, pid
    4242, node ``celery@host``, queue ``default``).

    ``last_heartbeat_at`` and ``started_at`` (default: the same): a datetime,
    written as it is (a worker's own clock), or a timedelta, that long before the
    database's current time (R-WRK-15). ``dead_after_ms``: the worker's own
    dead-after as it recorded it at registration (R-WRK-17); not written when
    None.
    """
    worker_id = str(uuid.uuid4())
    values = {
        "id": worker_id,
        "hostname": "host",
        "pid": 4242,
        "node_name": "celery@host",
        "queues": "default",
        "library_version": "test",
        "started_at": _time(last_heartbeat_at if started_at is None else started_at),
        "last_heartbeat_at": _time(last_heartbeat_at),
    }
    if dead_after_ms is not None:
        values["dead_after_ms"] = dead_after_ms
    with db.engine.begin() as connection:
        connection.execute(sa.insert(workers_table()).values(**values))
    return worker_id


def running_on(workflow_cls: Any, worker_id: str) -> Any:
    """A new ``workflow_cls`` workflow whose step is in progress on ``worker_id``
    since 5 s ago."""
    workflow = workflow_cls.create(hero=make_user())
    execution_id = make_in_progress(workflow, datetime.now(UTC) - timedelta(seconds=5))
    update_execution(execution_id, worker_id=worker_id)
    return workflow


def states(*workflows: Any) -> tuple[str, ...]:
    """The workflows' stored states, read again."""
    for workflow in workflows:
        db.session.refresh(workflow)
    result = tuple(workflow.state for workflow in workflows)
    db.session.rollback()  # on SQLite a read holds the write lock
    return result
