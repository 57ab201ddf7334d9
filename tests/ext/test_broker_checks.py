"""A GENEVA_MAX_BROKER_DELAY not below the broker's visibility timeout is warned about at start-up (R-DSP-06)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva.ext.broker_checks import broker_visibility_timeout

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

WARNING_START = "GENEVA_MAX_BROKER_DELAY"


def _celery(broker_url, **transport_options):
    celery = Celery("broker-checks", set_as_current=False)
    celery.conf.update(
        broker_url=broker_url, broker_transport_options=transport_options
    )
    return celery


def _start(tmp_path, celery, *, max_broker_delay, factory=False):
    """init_app with celery=, or init_celery replacing the app's Celery app later."""
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'checks.sqlite3'}",
        GENEVA_MAX_BROKER_DELAY=max_broker_delay,
    )
    db = SQLAlchemy()
    db.init_app(app)
    geneva = Geneva(db)
    if factory:
        # init_app needs a Celery app (issue 14); one with Redis's default
        # visibility timeout, replaced by init_celery afterwards.
        geneva.init_app(app, celery=_celery("redis://127.0.0.1:1/0"))
        geneva.init_celery(celery)
    else:
        geneva.init_app(app, celery=celery)
    return app


def _warnings(caplog):
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING
        and record.getMessage().startswith(WARNING_START)
    ]


@pytest.mark.parametrize("factory", [False, True])
def test_delay_above_the_configured_visibility_timeout_is_warned(
    tmp_path, caplog, factory
):
    """A 120 s delay with a 60 s Redis visibility timeout logs one warning naming both (R-DSP-06)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    celery = _celery("redis://127.0.0.1:1/0", visibility_timeout=60)
    _start(tmp_path, celery, max_broker_delay=timedelta(seconds=120), factory=factory)
    assert _warnings(caplog) == [
        "GENEVA_MAX_BROKER_DELAY (120 s) is not below the broker's visibility "
        "timeout (60 s, broker_transport_options['visibility_timeout']): a step "
        "published that far ahead is delivered again before it is due. Keep "
        "GENEVA_MAX_BROKER_DELAY well below the visibility timeout (R-DSP-06)"
    ]


def test_redis_default_visibility_timeout_counts_as_known(tmp_path, caplog):
    """Without the option, Redis's one-hour default is compared (R-DSP-06)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    celery = _celery("redis://127.0.0.1:1/0")
    _start(tmp_path, celery, max_broker_delay=timedelta(hours=2))
    [message] = _warnings(caplog)
    assert "(7200 s) is not below" in message
    assert "(3600 s, the redis transport's default)" in message


@pytest.mark.parametrize(
    ("broker_url", "options", "delay"),
    [
        ("redis://127.0.0.1:1/0", {"visibility_timeout": 3600}, timedelta(minutes=10)),
        ("redis://127.0.0.1:1/0", {}, timedelta(minutes=59)),
        ("amqp://guest:guest@127.0.0.1:1//", {}, timedelta(days=1)),
        ("memory://", {"visibility_timeout": 1}, timedelta(hours=1)),
    ],
)
def test_no_warning_when_below_or_unknown(tmp_path, caplog, broker_url, options, delay):
    """A delay below the timeout, or a broker without a visibility timeout, logs nothing (R-DSP-06)."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    _start(tmp_path, _celery(broker_url, **options), max_broker_delay=delay)
    assert _warnings(caplog) == []


def test_visibility_timeout_lookup_makes_no_connection():
    """The lookup reads settings only: a broker nobody listens on is fine."""
    assert broker_visibility_timeout(_celery("redis://127.0.0.1:1/0")) == (
        3600.0,
        "the redis transport's default",
    )
    assert broker_visibility_timeout(_celery("amqp://127.0.0.1:1//")) is None
