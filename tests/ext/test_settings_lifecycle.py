"""Settings: a frozen object built at init_app, rebuilt when app.config changes (R-CFG-02).

A ``GENEVA_*`` value changed in ``app.config`` after ``init_app`` is validated
and applied at the start of the next geneva operation (the gem reads its
settings at each use); an invalid one makes that operation raise, naming it, and
leaves the settings in force unchanged. ``geneva.reload_settings(app)`` does the
same at once.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import timedelta

import pytest
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import GenevaConfigurationError
from flask_geneva import run_housekeeping
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.core.config import GenevaConfig
from flask_geneva.ext.app_state import current_state
from flask_geneva.ext.app_state import settings
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.housekeeping import RETENTION
from tests.support.housekeeping import T0
from tests.support.housekeeping import finished_workflow
from tests.support.housekeeping import retention_settings  # noqa: F401 - "app_config"
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row


def _count_validations(monkeypatch):
    """A list that gets the arguments of every settings validation from now on."""
    import flask_geneva.ext.app_state

    validations = []
    real = flask_geneva.ext.app_state.config_from_mapping

    def counting(*args, **kwargs):
        validations.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(flask_geneva.ext.app_state, "config_from_mapping", counting)
    return validations


def test_settings_are_a_frozen_object_built_at_init_app(app):
    """init_app stores one frozen GenevaConfig; a change of app.config never mutates it (R-CFG-02)."""
    state = app.extensions["geneva"]
    config = state.config
    assert isinstance(config, GenevaConfig)
    assert config.max_cursor_size_bytes == 131072
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.housekeeping_batch_size = 5  # type: ignore[misc]
    app.config["GENEVA_MAX_CURSOR_SIZE"] = None
    assert settings().max_cursor_size_bytes is None
    assert state.config is not config
    assert config.max_cursor_size_bytes == 131072


def test_a_change_without_reload_takes_effect_at_the_next_operation(app):
    """A value changed in app.config applies to the next operation, no reload needed (R-CFG-02)."""
    with clock.frozen(T0) as frozen:
        kept = finished_workflow("kept@example.com")
        frozen.advance(RETENTION + timedelta(days=1))
        app.config["GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER"] = None
        summary = run_housekeeping()
        assert summary["workflows_cleaned_up"] == 0
        assert workflow_row(kept) is not None
        assert settings().delete_completed_workflows_after is None

        app.config["GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER"] = RETENTION
        app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 1
    assert workflow_row(kept) is None
    assert settings().housekeeping_batch_size == 2
    assert app.extensions["geneva"].config.housekeeping_batch_size == 2


def test_an_unchanged_app_config_is_not_validated_again(app, monkeypatch):
    """Without a change the settings object stays the same one across operations (R-CFG-02)."""

    config = app.extensions["geneva"].config
    validations = _count_validations(monkeypatch)
    run_housekeeping()
    finished_workflow("same@example.com")
    run_housekeeping()
    # Equal values set again are no change either.
    app.config["GENEVA_RECOVER_GRACE"] = timedelta(seconds=60)
    app.config["GENEVA_STUCK_RECOVERY_ACTION"] = "".join(["re", "attempt"])
    assert current_state().changed_settings() == []
    assert settings() is config
    assert app.extensions["geneva"].config is config
    assert validations == []

    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 7
    run_housekeeping()
    run_housekeeping()
    assert len(validations) == 1
    assert settings().housekeeping_batch_size == 7


def test_an_invalid_change_raises_at_the_next_operation_and_keeps_the_settings(app):
    """An invalid value fails every operation, naming each bad key, until fixed (R-CFG-01, R-CFG-02).

    The settings in force stay those validated before; no row is written by the
    operation that raised; fixing app.config makes the next operation work.
    """
    state = app.extensions["geneva"]
    before = state.config
    hero = make_user("bad@example.com")
    app.config["GENEVA_FIND_ATTEMPTS"] = 0
    app.config["GENEVA_TASK_RERAISE"] = "sometimes"
    with pytest.raises(GenevaConfigurationError) as raised:
        run_housekeeping()
    message = str(raised.value)
    assert "GENEVA_FIND_ATTEMPTS" in message
    assert "GENEVA_TASK_RERAISE" in message
    assert "'sometimes'" in message
    assert "'unhandled'" in message
    assert "'always'" in message
    assert state.config is before

    # Still invalid: the next operation raises again, before writing anything.
    with pytest.raises(GenevaConfigurationError, match="GENEVA_FIND_ATTEMPTS"):
        EmptyTwoSteps.create(hero=hero)
    assert count_workflows() == 0
    assert state.config is before

    app.config["GENEVA_FIND_ATTEMPTS"] = 3
    app.config["GENEVA_TASK_RERAISE"] = "always"
    workflow = EmptyTwoSteps.create(hero=hero)
    assert count_workflows() == 1
    assert workflow_row(workflow.id) is not None
    assert settings().find_attempts == 3
    assert settings().task_reraise == "always"
    assert before.find_attempts == 5


def test_a_change_to_the_celery_backend_without_celery_raises_at_the_next_operation(
    app,
):
    """The next operation runs init_app's backend check too (issue 14, R-CFG-02)."""
    state = app.extensions["geneva"]
    # The shared extension may keep a Celery app another test gave it.
    state.celery = None
    app.config["GENEVA_TASK_BACKEND"] = "celery"
    with pytest.raises(GenevaConfigurationError, match="no Celery"):
        current_state()
    assert state.config.task_backend == "recording"
    app.config["GENEVA_TASK_BACKEND"] = "recording"
    assert current_state() is state


def test_a_change_to_eager_celery_raises_at_the_next_operation(app):
    """The next operation refuses Celery's eager mode as init_app does (R-TH-21, R-CFG-02)."""
    celery = Celery("settings-lifecycle")
    celery.conf.task_always_eager = True
    state = app.extensions["geneva"]
    state.celery = celery
    app.config["GENEVA_TASK_BACKEND"] = "celery"
    with pytest.raises(GenevaConfigurationError, match="task_always_eager"):
        run_housekeeping()
    assert state.config.task_backend == "recording"
    app.config["GENEVA_ALLOW_EAGER"] = True
    assert settings().task_backend == "celery"
    app.config["GENEVA_TASK_BACKEND"] = "recording"
    app.config["GENEVA_ALLOW_EAGER"] = False
    assert settings().task_backend == "recording"


def test_a_change_of_app_testing_is_applied_at_the_next_operation(app):
    """app.testing is the default of GENEVA_ENQUEUE_AFTER_COMMIT; a change of it applies too (R-CFG-02, R-TXN-01)."""
    assert settings().enqueue_after_commit is False
    app.testing = False
    assert settings().enqueue_after_commit is True
    app.testing = True
    assert settings().enqueue_after_commit is False


def test_threads_noticing_one_change_validate_it_once(app, monkeypatch):
    """Concurrent operations see the old or the new object, and the change is validated once (R-CFG-02)."""

    state = app.extensions["geneva"]
    before = state.config
    validations = _count_validations(monkeypatch)
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 3
    barrier = threading.Barrier(4)
    seen = []

    def operation():
        with app.app_context():
            barrier.wait()
            seen.append(settings())

    threads = [threading.Thread(target=operation) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4
    assert len(validations) == 1
    assert all(config is state.config for config in seen)
    assert state.config is not before
    assert state.config.housekeeping_batch_size == 3


def test_reload_settings_applies_the_change_at_once(app):
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
    assert settings() is returned
    run_housekeeping()
    assert state.config is returned


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
    # No fallback: the next operation raises too while app.config is invalid.
    with pytest.raises(GenevaConfigurationError, match="GENEVA_TASK_RERAISE"):
        run_housekeeping()
    app.config["GENEVA_FIND_ATTEMPTS"] = 5
    app.config["GENEVA_TASK_RERAISE"] = "unhandled"
    run_housekeeping()
    assert app.extensions["geneva"].config is before


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


class SettingsChangedDuringTheStep(geneva.Workflow):
    """Breaks app.config from inside its step, then fails (R-CFG-02, R-PDR-01)."""

    @step(on_exception="pause")
    def breaks_config_then_fails(self):
        from flask import current_app

        current_app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = "many"
        raise RuntimeError("boom after the config change")


def test_a_run_keeps_the_settings_it_started_with(app):
    """A change of app.config during a step applies from the next operation, never mid-run (R-CFG-02).

    The run records the policy decision and reports with the settings in force
    when it started; the invalid value surfaces at the next operation.
    """
    from flask_geneva.testing import perform_next_step

    workflow = SettingsChangedDuringTheStep.create(hero=make_user("mid@example.com"))
    started_with = settings()
    try:
        with pytest.raises(RuntimeError, match="boom after the config change"):
            perform_next_step(workflow)
        assert workflow_row(workflow.id)["state"] == "paused"
        (execution,) = execution_rows(workflow.id)
        assert execution["state"] == "failed"
        decision = execution["metadata"]["policy_decision"]
        assert decision["action"] == "pause"
        assert app.extensions["geneva"].config is started_with
        with pytest.raises(
            GenevaConfigurationError, match="GENEVA_HOUSEKEEPING_BATCH_SIZE"
        ):
            settings()
    finally:
        app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = (
            started_with.housekeeping_batch_size
        )
    assert settings().housekeeping_batch_size == started_with.housekeeping_batch_size
