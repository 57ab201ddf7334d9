"""GENEVA_STEP_TIMEOUT_GRACE and the warning of pools that cannot interrupt a
step (R-STO-03, R-STO-05, R-CFG-01)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from flask_geneva import step
from flask_geneva.core.config import config_from_mapping
from flask_geneva.exceptions import GenevaConfigurationError
from flask_geneva.ext.timeout_checks import steps_with_timeouts
from flask_geneva.ext.timeout_checks import warn_if_timeouts_unenforced
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def test_the_grace_defaults_to_30_seconds_and_takes_a_duration():
    """Default 30 s; a timedelta or seconds up to one hour (R-STO-03)."""
    assert config_from_mapping({}, testing=True).step_timeout_grace == timedelta(
        seconds=30
    )
    config = config_from_mapping({"GENEVA_STEP_TIMEOUT_GRACE": 3600}, testing=True)
    assert config.step_timeout_grace == timedelta(hours=1)


@pytest.mark.parametrize("value", [0, -1, 3601, "30 s", None, True])
def test_a_bad_grace_is_refused(value):
    """Zero, negative, over an hour or not a duration: refused at init_app,
    naming the setting (R-STO-03, R-CFG-01)."""
    with pytest.raises(GenevaConfigurationError, match="GENEVA_STEP_TIMEOUT_GRACE"):
        config_from_mapping({"GENEVA_STEP_TIMEOUT_GRACE": value}, testing=True)


class PoolTimed(Workflow):
    __geneva_type__ = "PoolTimed"

    @step(timeout=5)
    def call_api(self):
        pass

    @step
    def untimed(self):
        pass


class PoolUntimed(Workflow):
    @step
    def work(self):
        pass


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_pool_that_cannot_interrupt_is_warned_about(caplog):
    """A solo or threads worker logs one WARNING naming the steps with a timeout;
    none without such steps (R-STO-05)."""
    assert steps_with_timeouts([PoolTimed, PoolUntimed]) == ["PoolTimed.call_api"]
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    assert warn_if_timeouts_unenforced("solo", [PoolTimed, PoolUntimed])
    (message,) = _warnings(caplog)
    assert message.startswith(
        "Steps declare a timeout (PoolTimed.call_api) but this worker's solo pool "
        "cannot interrupt a running task"
    )
    assert "--pool=prefork" in message
    caplog.clear()
    assert not warn_if_timeouts_unenforced("threads", [PoolUntimed])
    assert _warnings(caplog) == []
