"""The "Celery app built in the Flask app factory" pattern (Flask's Celery guide).

The factory builds a Celery app whose task base class pushes the app context and
stores it in ``app.extensions["celery"]``; ``geneva.init_app(app)``, called after,
finds it there (without a Celery app it refuses, issue 14). ``GENEVA_TEST_WORKER_DATABASE_URL`` and ``GENEVA_TEST_WORKER_BROKER``
configure it; workers load ``tests.worker.factory_app:celery_app``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery import Task
from flask import Flask

import flask_geneva
from flask_geneva import step
from flask_geneva.engine.iteration import worker_exit_requested
from tests.apps import basic
from tests.support.common_workflows import CountingTwoSteps  # noqa: F401 - the workers run it


def celery_init_app(app: Flask, broker_url: str) -> Celery:
    """Flask's documented factory helper: tasks run inside the app context."""

    class FlaskTask(Task):  # type: ignore[misc]
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            with app.app_context():
                return self.run(*args, **kwargs)

    celery = Celery(app.name, task_cls=FlaskTask)
    celery.conf.update(flask_geneva.celery_defaults(), broker_url=broker_url)
    celery.set_default()
    app.extensions["celery"] = celery
    return celery


def create_app(database_url: str, broker_url: str) -> Flask:
    """The host's factory: the Celery app first, then geneva.init_app(app) finds it."""
    app = Flask(__name__)
    app.config.update(
        TESTING=True,
        SQLALCHEMY_DATABASE_URI=database_url,
        GENEVA_TASK_BACKEND="celery",
        GENEVA_ENQUEUE_AFTER_COMMIT=True,
        GENEVA_FIND_DELAY=0.05,
    )
    celery_init_app(app, broker_url)
    basic.db.init_app(app)
    basic.geneva.init_app(app)
    return app


class FactoryAwaitsShutdown(basic.geneva.Workflow):
    """A step that waits (up to 30 s) for the worker's shutdown request."""

    __geneva_type__ = "FactoryAwaitsShutdown"

    @step
    def linger(self):
        self.hero.counter = 1  # committed with the step: visible once it ends
        deadline = time.monotonic() + 30
        while not worker_exit_requested() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.hero.counter = 2 if worker_exit_requested() else 3


if os.environ.get("GENEVA_TEST_WORKER_BROKER"):
    flask_app = create_app(
        os.environ["GENEVA_TEST_WORKER_DATABASE_URL"],
        os.environ["GENEVA_TEST_WORKER_BROKER"],
    )
    celery_app = flask_app.extensions["celery"]
