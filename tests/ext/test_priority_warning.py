"""A Redis broker with declared priorities and no mapper is warned about (R-PRI-04).

flask_geneva runs higher priorities first (R-PRI-02); the Redis transport runs
lower numbers sooner. ``init_app`` logs one WARNING naming
``GENEVA_PRIORITY_MAPPER = "redis"`` when the Celery broker URL is Redis, some
registered class declares a priority (class attribute, ``default_job_options``
or a step's ``priority``/``job_options``) and no mapper is set; otherwise
nothing.
"""

from __future__ import annotations

import logging

import pytest
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import step
from flask_geneva.ext.broker_checks import broker_scheme

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

MARK = 'GENEVA_PRIORITY_MAPPER = "redis"'


def _start(tmp_path, *, broker_url, declare, mapper=None):
    """A fresh Geneva whose classes are made by ``declare(geneva)``, then init_app."""
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'priority.sqlite3'}",
        GENEVA_PRIORITY_MAPPER=mapper,
    )
    db = SQLAlchemy()
    db.init_app(app)
    geneva = Geneva(db)
    declare(geneva)
    celery = Celery("priority-warning", set_as_current=False)
    celery.conf.update(broker_url=broker_url)
    geneva.init_app(app, celery=celery)
    with app.app_context():
        db.engine.dispose()


def _warnings(caplog):
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and MARK in record.getMessage()
    ]


def _class_attribute(geneva):
    class WarnClassAttribute(geneva.Workflow):
        __geneva_type__ = "WarnClassAttribute"

        priority = 3

        @step
        def work(self):
            pass


def _class_options(geneva):
    class WarnClassOptions(geneva.Workflow):
        __geneva_type__ = "WarnClassOptions"

        default_job_options = {"priority": 3}

        @step
        def work(self):
            pass


def _step_keyword(geneva):
    class WarnStepKeyword(geneva.Workflow):
        __geneva_type__ = "WarnStepKeyword"

        @step(priority=3)
        def work(self):
            pass


def _step_options(geneva):
    class WarnStepOptions(geneva.Workflow):
        __geneva_type__ = "WarnStepOptions"

        @step(job_options={"priority": 3})
        def work(self):
            pass


def _inherited(geneva):
    class WarnParent(geneva.Workflow):
        __geneva_type__ = "WarnParent"

        priority = 1

        @step
        def work(self):
            pass

    class WarnChild(WarnParent):
        __geneva_type__ = "WarnChild"


def _no_priority(geneva):
    class WarnQueueOnly(geneva.Workflow):
        __geneva_type__ = "WarnQueueOnly"

        default_job_options = {"queue": "mail"}

        @step(job_options={"queue": "fast"})
        def work(self):
            pass


@pytest.mark.parametrize(
    ("declare", "names"),
    [
        (_class_attribute, "WarnClassAttribute"),
        (_class_options, "WarnClassOptions"),
        (_step_keyword, "WarnStepKeyword"),
        (_step_options, "WarnStepOptions"),
        (_inherited, "WarnChild, WarnParent"),
    ],
)
@pytest.mark.parametrize(
    "broker_url", ["redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0"]
)
def test_a_declared_priority_on_redis_without_a_mapper_is_warned_once(
    tmp_path, caplog, declare, names, broker_url
):
    """One WARNING naming the classes and GENEVA_PRIORITY_MAPPER = "redis", for a
    priority declared at any class or step level (R-PRI-04)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    _start(tmp_path, broker_url=broker_url, declare=declare)
    [message] = _warnings(caplog)
    assert message.startswith(f"Workflow classes declare a priority ({names})")
    assert "the Celery broker is Redis" in message
    assert "R-PRI-04" in message


@pytest.mark.parametrize(
    ("broker_url", "declare", "mapper"),
    [
        ("redis://127.0.0.1:1/0", _class_attribute, "redis"),
        ("redis://127.0.0.1:1/0", _step_keyword, "rabbitmq"),
        ("redis://127.0.0.1:1/0", _class_options, lambda priority: -priority),
        ("redis://127.0.0.1:1/0", _no_priority, None),
        ("amqp://guest@127.0.0.1:1//", _class_attribute, None),
        ("memory://", _step_options, None),
    ],
    ids=["redis-mapper", "other-mapper", "callable", "no-priority", "amqp", "memory"],
)
def test_no_warning_with_a_mapper_without_priorities_or_without_redis(
    tmp_path, caplog, broker_url, declare, mapper
):
    """A mapper set, no priority declared, or a broker that is not Redis: no
    warning (R-PRI-04)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    _start(tmp_path, broker_url=broker_url, declare=declare, mapper=mapper)
    assert _warnings(caplog) == []


def test_the_broker_scheme_is_read_from_the_first_url():
    """The scheme is the first broker URL's, lower case; amqp when unset."""
    celery = Celery("scheme", set_as_current=False)
    celery.conf.update(broker_url=["REDIS://a:1/0", "amqp://b//"])
    assert broker_scheme(celery) == "redis"
    celery.conf.update(broker_url=None)
    assert broker_scheme(celery) == "amqp"
