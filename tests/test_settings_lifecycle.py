"""Settings are validated once at init_app into a frozen object (R-CFG-02).

A later change of ``app.config`` applies only through ``geneva.reload_settings``;
without it the next geneva operation warns, naming the key, and keeps the value
read at ``init_app``.
"""

from __future__ import annotations

import dataclasses
import warnings
from datetime import timedelta

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import GenevaConfigurationError
from flask_geneva import run_housekeeping
from flask_geneva.config import GenevaConfig
from flask_geneva.config import GenevaSettingsChangedWarning
from flask_geneva.runtime import current_state
from flask_geneva.runtime import settings
from tests.apps.basic import geneva


def test_settings_are_a_frozen_object_read_at_init_app(app):
    """init_app stores one frozen GenevaConfig; app.config changes do not alter it (R-CFG-02)."""
    state = app.extensions["geneva"]
    config = state.config
    assert isinstance(config, GenevaConfig)
    assert config.max_cursor_size_bytes == 131072
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.housekeeping_batch_size = 5  # type: ignore[misc]
    app.config["GENEVA_MAX_CURSOR_SIZE"] = None
    assert state.config is config
    assert state.config.max_cursor_size_bytes == 131072
    app.config["GENEVA_MAX_CURSOR_SIZE"] = 131072  # undo: no warning at teardown


def test_a_change_without_reload_warns_once_naming_the_key(app):
    """The next geneva operation warns about a changed key, once, and keeps the old value (R-CFG-02)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    with pytest.warns(GenevaSettingsChangedWarning) as caught:
        run_housekeeping()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "GENEVA_HOUSEKEEPING_BATCH_SIZE" in message
    assert "geneva.reload_settings(app)" in message
    assert settings().housekeeping_batch_size == 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_housekeeping()  # reported already: no second warning
        assert current_state().config.housekeeping_batch_size == 1000


def test_an_equal_value_set_again_is_no_change(app):
    """Setting a key to an equal value is not reported (R-CFG-02)."""
    app.config["GENEVA_RECOVER_GRACE"] = timedelta(seconds=60)
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "".join(["re", "attempt"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert current_state().changed_settings() == []


def test_reload_settings_applies_the_change(app):
    """geneva.reload_settings(app) validates app.config again and uses it (R-CFG-02)."""
    before = app.extensions["geneva"].config
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    app.config["GENEVA_FIND_DELAY"] = 0.5
    returned = geneva.reload_settings(app)
    state = app.extensions["geneva"]
    assert state.config is returned
    assert returned is not before
    assert returned.housekeeping_batch_size == 2
    assert returned.find_delay_seconds == 0.5
    assert before.housekeeping_batch_size == 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings() is returned
        run_housekeeping()


def test_reload_settings_warns_again_after_a_new_change(app):
    """After a reload, a further change is reported again (R-CFG-02)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    with pytest.warns(GenevaSettingsChangedWarning):
        current_state()
    geneva.reload_settings(app)
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 3
    with pytest.warns(GenevaSettingsChangedWarning, match="BATCH_SIZE"):
        current_state()
    assert settings().housekeeping_batch_size == 2


def test_reload_settings_refuses_invalid_values_and_keeps_the_old(app):
    """An invalid value fails the reload, naming every bad key; the settings stay (R-CFG-01, R-CFG-02)."""
    before = app.extensions["geneva"].config
    app.config["GENEVA_FIND_ATTEMPTS"] = 0
    app.config["GENEVA_TASK_RERAISE"] = "sometimes"
    with pytest.raises(GenevaConfigurationError) as raised:
        geneva.reload_settings(app)
    assert "GENEVA_FIND_ATTEMPTS" in str(raised.value)
    assert "GENEVA_TASK_RERAISE" in str(raised.value)
    assert app.extensions["geneva"].config is before
    app.config["GENEVA_FIND_ATTEMPTS"] = 5
    app.config["GENEVA_TASK_RERAISE"] = "unhandled"


def test_reload_settings_needs_a_registered_app(tmp_path):
    """reload_settings on an app the extension is not registered on raises (R-CFG-02)."""
    other = Geneva(SQLAlchemy())
    app = Flask(__name__)
    with pytest.raises(GenevaConfigurationError, match="init_app"):
        other.reload_settings(app)
    with pytest.raises(GenevaConfigurationError, match="init_app"):
        other.reload_settings(_registered_app(tmp_path))


def _registered_app(tmp_path):
    db = SQLAlchemy()
    extension = Geneva(db)
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'other.sqlite3'}",
        GENEVA_TASK_BACKEND="recording",
    )
    db.init_app(app)
    extension.init_app(app)
    return app
