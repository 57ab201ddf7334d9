"""Flask + Celery app for the broker tests of tests/worker, configured by environment.

``GENEVA_TEST_WORKER_DATABASE_URL``: database shared by the test and its processes.
``GENEVA_TEST_WORKER_BROKER``: broker URL (Redis or RabbitMQ).
``GENEVA_TEST_WORKER_QUEUE``: default queue of step tasks (unique per test on a
shared RabbitMQ vhost).
``GENEVA_TEST_VISIBILITY_TIMEOUT``: Redis visibility timeout in seconds.
``GENEVA_TEST_MAX_BROKER_DELAY``: ``GENEVA_MAX_BROKER_DELAY`` in seconds.

Processes: ``celery -A tests.worker.geneva_worker_app:celery worker|beat``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from celery import Celery
from flask import Flask

import flask_geneva
from flask_geneva import step
from tests.apps import basic
from tests.support.common_workflows import WaitingThreeSteps  # noqa: F401 - workers run it
from tests.support.step_bodies import adds

#: Seconds between two dispatcher runs of the beat process.
DISPATCH_INTERVAL = 1.0


def build_app(
    database_url: str,
    broker_url: str,
    *,
    queue: str | None = None,
    visibility_timeout: int = 3600,
    max_broker_delay: float = 600.0,
) -> tuple[Flask, Celery]:
    """Return a Flask app and a Celery app wired together with flask_geneva."""
    celery_app = Celery("geneva_broker_tests")
    celery_app.conf.update(
        flask_geneva.celery_defaults(visibility_timeout_seconds=visibility_timeout)
    )
    settings: dict[str, Any] = {
        "broker_url": broker_url,
        "beat_schedule": flask_geneva.beat_schedule(
            dispatch_interval_seconds=DISPATCH_INTERVAL
        ),
    }
    if queue:
        # Beat's dispatch_due and the step tasks use this queue too.
        settings["task_default_queue"] = queue
    if broker_url.startswith("amqp"):
        # A shared vhost: no pidbox or event queues left behind by tests.
        settings["worker_enable_remote_control"] = False
    celery_app.conf.update(settings)
    flask_app = basic.create_app(
        database_url,
        celery=celery_app,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
        GENEVA_DEFAULT_QUEUE=queue,
        GENEVA_MAX_BROKER_DELAY=timedelta(seconds=max_broker_delay),
        GENEVA_DISPATCH_INTERVAL=timedelta(seconds=DISPATCH_INTERVAL),
        GENEVA_FIND_DELAY=0.05,
    )
    basic.geneva.init_celery(celery_app, app=flask_app)
    return flask_app, celery_app


def app_from_environment() -> tuple[Flask, Celery]:
    """The app of a worker or beat subprocess, from the variables above."""
    return build_app(
        os.environ.get(
            "GENEVA_TEST_WORKER_DATABASE_URL", "sqlite:////tmp/geneva-broker.sqlite3"
        ),
        os.environ.get("GENEVA_TEST_WORKER_BROKER", "redis://127.0.0.1:6379/15"),
        queue=os.environ.get("GENEVA_TEST_WORKER_QUEUE") or None,
        visibility_timeout=int(
            os.environ.get("GENEVA_TEST_VISIBILITY_TIMEOUT", "3600")
        ),
        max_broker_delay=float(os.environ.get("GENEVA_TEST_MAX_BROKER_DELAY", "600")),
    )


def environment(
    database_url: str,
    broker_url: str,
    *,
    queue: str | None = None,
    visibility_timeout: int = 3600,
    max_broker_delay: float = 600.0,
) -> dict[str, str]:
    """The variables :func:`app_from_environment` reads, for a subprocess that
    should build the app of :func:`build_app` with these arguments."""
    return {
        "GENEVA_TEST_WORKER_DATABASE_URL": database_url,
        "GENEVA_TEST_WORKER_BROKER": broker_url,
        "GENEVA_TEST_WORKER_QUEUE": queue or "",
        "GENEVA_TEST_VISIBILITY_TIMEOUT": str(visibility_timeout),
        "GENEVA_TEST_MAX_BROKER_DELAY": str(max_broker_delay),
    }


def _begin_then_wait(seconds: float) -> list[Any]:
    """``begin`` adds 1 to the hero's counter; ``after_wait``, ``seconds`` later,
    adds 10."""
    return [
        step.anonymous(adds(1), name="begin"),
        step.anonymous(adds(10), name="after_wait", wait=timedelta(seconds=seconds)),
    ]


class BrokerLongWait(basic.geneva.Workflow):
    """A step, then one 20 seconds later: longer than GENEVA_MAX_BROKER_DELAY."""

    __geneva_type__ = "BrokerLongWait"
    _steps = _begin_then_wait(20)


class BrokerShortDeferred(basic.geneva.Workflow):
    """A step, then one 6 seconds later: deferred when the broker delay is 3 s."""

    __geneva_type__ = "BrokerShortDeferred"
    _steps = _begin_then_wait(6)


class BrokerCritical(basic.geneva.Workflow):
    """One step routed to the ``critical`` queue by its job options (R-JOB-08)."""

    __geneva_type__ = "BrokerCritical"

    @step(job_options={"queue": "critical"})
    def urgent(self):
        self.hero.counter += 1


class BrokerOrdinary(basic.geneva.Workflow):
    """One step on the default queue."""

    __geneva_type__ = "BrokerOrdinary"

    @step
    def ordinary(self):
        self.hero.counter += 100


def _sleeps_then_adds(seconds: float, amount: int) -> Any:
    """A step body that sleeps ``seconds``, then adds ``amount`` to the hero's
    counter."""

    def body(workflow: Any) -> None:
        import time

        time.sleep(seconds)
        workflow.hero.counter += amount

    return body


class BrokerRestartWork(basic.geneva.Workflow):
    """Three steps adding 1, 10 and 100; the second waits 3 s, an eta message
    that a worker holds unacknowledged while its consumer waits for more (the
    broker restart tests)."""

    __geneva_type__ = "BrokerRestartWork"
    _steps = [
        step.anonymous(adds(1), name="first"),
        step.anonymous(adds(10), name="second", wait=timedelta(seconds=3)),
        step.anonymous(adds(100), name="third"),
    ]


#: Seconds the steps of BrokerHoldOne and BrokerHoldTwo take: longer than a
#: broker restart and the workers' reconnection.
HOLD_SECONDS = 5.0


class BrokerHoldOne(basic.geneva.Workflow):
    """A step of HOLD_SECONDS on the queue ``restart-probe-1``, which one
    worker alone consumes: it runs across the broker's restart and is
    acknowledged after the reconnection."""

    __geneva_type__ = "BrokerHoldOne"
    _steps = [
        step.anonymous(
            _sleeps_then_adds(HOLD_SECONDS, 1000),
            name="hold",
            job_options={"queue": "restart-probe-1"},
        )
    ]


class BrokerHoldTwo(basic.geneva.Workflow):
    """BrokerHoldOne on the queue ``restart-probe-2``."""

    __geneva_type__ = "BrokerHoldTwo"
    _steps = [
        step.anonymous(
            _sleeps_then_adds(HOLD_SECONDS, 1000),
            name="hold",
            job_options={"queue": "restart-probe-2"},
        )
    ]


class BrokerProbeOne(basic.geneva.Workflow):
    """One quick step on the queue ``restart-probe-1``."""

    __geneva_type__ = "BrokerProbeOne"
    _steps = [
        step.anonymous(
            adds(1000), name="probe", job_options={"queue": "restart-probe-1"}
        )
    ]


class BrokerProbeTwo(basic.geneva.Workflow):
    """One quick step on the queue ``restart-probe-2``."""

    __geneva_type__ = "BrokerProbeTwo"
    _steps = [
        step.anonymous(
            adds(1000), name="probe", job_options={"queue": "restart-probe-2"}
        )
    ]


if os.environ.get("GENEVA_TEST_WORKER_BROKER"):
    # What `celery -A tests.worker.geneva_worker_app:celery ...` loads.
    app, celery = app_from_environment()
