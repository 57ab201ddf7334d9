"""The step task retries a claim that lost its database, then leaves it (R-FLT-02).

A real Celery app on Kombu's in-memory transport: ``task.retry`` publishes the
retry there. The end-to-end run against a database that is really down is in
``tests/worker/test_database_restart_worker.py``.
"""

from __future__ import annotations

import logging

import pytest
from celery import Celery
from celery.exceptions import Retry

from flask_geneva import ClaimFailedError
from flask_geneva.core.publications import PERFORM_STEP_TASK
from flask_geneva.ext.tasks import register_tasks
from flask_geneva.ext.tasks import retry_claim
from tests.apps.basic import geneva

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


@pytest.fixture
def step_task(app):
    celery = Celery("claim-retry-test", broker="memory://", set_as_current=False)
    register_tasks(celery, geneva=geneva, app=app)
    task = celery.tasks[PERFORM_STEP_TASK]
    yield task
    celery.close()


def _failed() -> ClaimFailedError:
    return ClaimFailedError("the claim lost its connection", step_execution_id=7)


def _delivery(task, **request):
    task.push_request(
        id="task-7", args=[7], kwargs={}, called_directly=False, **request
    )


def test_a_refused_claim_is_retried_with_growing_waits(step_task):
    """The first retry waits 1 s, the fourth 8 s, the ninth 10 s (with the
    default GENEVA_WORKER_DEAD_AFTER of 60 s)."""
    for retries, countdown in ((0, 1), (3, 8), (8, 10)):
        _delivery(step_task, retries=retries)
        try:
            with pytest.raises(Retry) as retried:
                retry_claim(step_task, _failed())
        finally:
            step_task.pop_request()
        assert retried.value.when == countdown


def test_after_the_last_retry_the_execution_is_left_to_the_dispatcher(
    step_task, caplog
):
    """R-FLT-02/20: the task ends without an error, with a warning."""
    caplog.set_level(logging.WARNING)
    _delivery(step_task, retries=9)
    try:
        assert retry_claim(step_task, _failed()) is None
    finally:
        step_task.pop_request()
    [warning] = [r for r in caplog.records if "R-FLT-20" in r.getMessage()]
    assert "step execution 7" in warning.getMessage()
    assert "10 times" in warning.getMessage()


def test_eager_mode_raises_the_claim_failure(step_task):
    _delivery(step_task, is_eager=True)
    failed = _failed()
    try:
        with pytest.raises(ClaimFailedError) as raised:
            retry_claim(step_task, failed)
    finally:
        step_task.pop_request()
    assert raised.value is failed
