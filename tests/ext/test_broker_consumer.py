"""flask_geneva's Celery apps get the worker consumer that survives a broker restart
unless the host chose a consumer of its own (R-FLT-60).

What the consumer does with a real broker restarted under real workers is
tests/worker/test_broker_restart.py's business; here, which Celery apps get it.
"""

from __future__ import annotations

import pytest
from celery import Celery
from celery.app.defaults import DEFAULTS as CELERY_DEFAULTS
from celery.utils.imports import symbol_by_name
from celery.worker.consumer import Consumer as CeleryConsumer
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva.ext import broker_consumer

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class HostConsumer(CeleryConsumer):
    """A consumer class of the host's own."""


def _celery(**settings):
    celery = Celery("consumer-tests", set_as_current=False)
    celery.conf.update(broker_url="redis://127.0.0.1:1/0", **settings)
    return celery


def _register(tmp_path, celery):
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = f"sqlite:///{tmp_path / 'c.sqlite3'}"
    db = SQLAlchemy()
    db.init_app(app)
    Geneva(db).init_app(app, celery=celery)
    return app


def test_init_app_gives_a_celery_app_at_celerys_default_the_geneva_consumer(tmp_path):
    """R-FLT-60: the worker_consumer setting names flask_geneva's consumer, a subclass of Celery's, which a worker of the app then builds."""
    celery = _celery()
    assert celery.conf.worker_consumer == CELERY_DEFAULTS["worker_consumer"]
    _register(tmp_path, celery)
    assert celery.conf.worker_consumer == broker_consumer.CONSUMER_PATH
    consumer_cls = symbol_by_name(celery.conf.worker_consumer)
    assert consumer_cls is broker_consumer.Consumer
    assert issubclass(consumer_cls, CeleryConsumer)


def test_a_consumer_the_host_chose_is_kept(tmp_path):
    """R-FLT-60: a worker_consumer the host set (a class or its path) is never replaced."""
    path = f"{__name__}:HostConsumer"
    celery = _celery(worker_consumer=path)
    _register(tmp_path, celery)
    assert celery.conf.worker_consumer == path
    celery = _celery(worker_consumer=HostConsumer)
    broker_consumer.use_geneva_consumer(celery)
    assert celery.conf.worker_consumer is HostConsumer


def test_the_consumer_changes_only_the_handling_of_a_lost_connection():
    """R-FLT-60: every other method of Celery's consumer is Celery's own."""
    own = {
        name
        for name, value in vars(broker_consumer.Consumer).items()
        if callable(value) and not name.startswith("__")
    }
    assert own == {"on_connection_error_after_connected"}
