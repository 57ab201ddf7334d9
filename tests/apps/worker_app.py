"""A Flask + Celery app for real-worker tests, configured from the environment.

``GENEVA_TEST_WORKER_DATABASE_URL``: the database both the test and the worker use.
``GENEVA_TEST_BROKER_URL``: the Celery broker (e.g. ``redis://127.0.0.1:6379/15``).
``GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL``, ``GENEVA_TEST_WORKER_DEAD_AFTER``,
``GENEVA_TEST_DISPATCH_INTERVAL``, ``GENEVA_TEST_PUBLISH_TIMEOUT``,
``GENEVA_TEST_STEP_TIMEOUT_GRACE``: those settings in seconds, when set; the dispatch interval also gives the Celery app the beat
schedule of that interval.

Start a worker with ``celery -A tests.apps.worker_app:celery worker``.
"""

from __future__ import annotations

import os

from celery import Celery
from flask import Flask

import flask_geneva
from flask_geneva import Backoff
from flask_geneva import ExceptionPolicy
from flask_geneva import step
from tests.apps import basic
from tests.support.common_workflows import WaitingThreeSteps  # noqa: F401 - workers run it


def build_app(database_url: str, broker_url: str) -> tuple[Flask, Celery]:
    """Return a Flask app and a Celery app wired together with flask_geneva."""
    celery_app = Celery("geneva_tests")
    celery_app.conf.update(
        broker_url=broker_url,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
    )
    heartbeats = {
        key: float(os.environ[f"GENEVA_TEST_{key}"])
        for key in (
            "WORKER_HEARTBEAT_INTERVAL",
            "WORKER_DEAD_AFTER",
            "DISPATCH_INTERVAL",
            "PUBLISH_TIMEOUT",
            "STEP_TIMEOUT_GRACE",
        )
        if os.environ.get(f"GENEVA_TEST_{key}")
    }
    if "DISPATCH_INTERVAL" in heartbeats:
        # `celery -A tests.apps.worker_app:celery beat` runs the dispatcher.
        celery_app.conf.beat_schedule = flask_geneva.beat_schedule(
            dispatch_interval_seconds=heartbeats["DISPATCH_INTERVAL"]
        )
    flask_app = basic.create_app(
        database_url,
        celery=celery_app,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
        **{f"GENEVA_{key}": value for key, value in heartbeats.items()},
    )
    basic.geneva.init_celery(celery_app, app=flask_app)
    flask_app.extensions["geneva"].celery = celery_app
    return flask_app, celery_app


# What `celery -A tests.apps.worker_app:celery worker` loads.
app, celery = build_app(
    os.environ.get(
        "GENEVA_TEST_WORKER_DATABASE_URL", "sqlite:////tmp/geneva-worker.sqlite3"
    ),
    os.environ.get("GENEVA_TEST_BROKER_URL", "redis://127.0.0.1:6379/15"),
)


class WorkerFlakyError(Exception):
    """The failure of WorkerHandledRetries."""


class WorkerHandledRetries(basic.geneva.Workflow):
    """A step that always fails: three handled reattempts, then a terminal pause."""

    @step(
        on_exception=ExceptionPolicy(
            "reattempt", max_reattempts=3, report="terminal_only"
        )
    )
    def flaky(self):
        raise WorkerFlakyError("upstream timed out")


class WorkerBackoffRetries(basic.geneva.Workflow):
    """Always fails: reattempts after 1 s and 2 s (plus jitter), then pauses (R-POL-53)."""

    @step(
        on_exception=ExceptionPolicy(
            "reattempt",
            max_reattempts=2,
            report="never",
            wait=Backoff.exponential(1, jitter=0.5),
        )
    )
    def flaky(self):
        raise WorkerFlakyError("still failing")


class WorkerStepTimeoutCaught(basic.geneva.Workflow):
    """A step that catches Celery's soft time limit and returns: a timeout all
    the same (R-STO-15); its policy skips it and the next step runs."""

    @step(
        timeout=3,
        on_exception=ExceptionPolicy("skip", matching=flask_geneva.StepTimeout),
    )
    def swallowing(self):
        import contextlib
        import time

        # What a careless body does: it swallows the interruption.
        with contextlib.suppress(BaseException):
            time.sleep(60)

    @step
    def after(self):
        pass


class WorkerTenSteps(basic.geneva.Workflow):
    """Ten steps that each add one to the hero's counter (inline continuation)."""

    _steps = step.repeat(
        10, lambda wf: setattr(wf.hero, "counter", wf.hero.counter + 1)
    )


class WorkerStepTimeout(basic.geneva.Workflow):
    """A step sleeping far longer than its 3-second timeout; its policy skips it.

    In a prefork worker Celery's soft time limit interrupts the sleep and the
    step ends in StepTimeout (R-STO-10); the next step runs. Celery's limits count
    from the task's start, the claim included: 3 s, so that a slow claim on a
    loaded machine is not what the soft limit interrupts.
    """

    @step(
        timeout=3,
        on_exception=ExceptionPolicy("skip", matching=flask_geneva.StepTimeout),
    )
    def slow(self):
        import time

        time.sleep(60)

    @step
    def after(self):
        pass
