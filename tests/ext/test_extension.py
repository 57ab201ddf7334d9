"""The extension object and its configuration (SPEC §13, §15.1, R-CFG, R-TH-21)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import GenevaConfigurationError
from flask_geneva.core.config import config_from_mapping
from tests.apps import basic

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _bare_app(tmp_path, **config):
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'x.sqlite3'}", **config
    )
    return app


def test_init_app_registers_state_and_cli(app):
    """init_app registers app.extensions['geneva'] and the `flask geneva` group (§15.1)."""
    state = app.extensions["geneva"]
    assert state.geneva is basic.geneva
    assert "geneva" in app.cli.commands
    assert app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] == 1000


def test_init_app_twice_is_refused(tmp_path):
    """Registering the same extension twice on one app raises a clear error."""
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path, GENEVA_TASK_BACKEND="recording")
    db.init_app(app)
    geneva.init_app(app)
    with pytest.raises(GenevaConfigurationError, match="already registered"):
        geneva.init_app(app)


def test_init_app_requires_db_first(tmp_path):
    """init_app before db.init_app names the call order."""
    geneva = Geneva(SQLAlchemy())
    with pytest.raises(GenevaConfigurationError, match=r"db\.init_app\(app\) before"):
        geneva.init_app(_bare_app(tmp_path))


def test_unknown_key_type_is_rejected():
    """Geneva(key_type=...) accepts only bigint and uuid (R-DM-20)."""
    with pytest.raises(GenevaConfigurationError, match=r"'bigint', 'uuid'.*'int'"):
        Geneva(SQLAlchemy(), key_type="int")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "GENEVA_HOUSEKEEPING_BATCH_SIZE",
            0,
            "GENEVA_HOUSEKEEPING_BATCH_SIZE must be a positive int, got 0",
        ),
        ("GENEVA_HOUSEKEEPING_BATCH_SIZE", True, "positive int, got True"),
        # Beyond a 64-bit integer no database binds it: housekeeping's LIMIT
        # failed with "datatype mismatch" at the first run (R-CFG-01).
        (
            "GENEVA_HOUSEKEEPING_BATCH_SIZE",
            10**20,
            "got 100000000000000000000 (int); allowed: 1 to 9223372036854775807",
        ),
        (
            "GENEVA_INLINE_CONTINUATION_MAX_STEPS",
            2**63,
            "must be an int >= 0, got 9223372036854775808 (int); "
            "allowed: 0 to 9223372036854775807",
        ),
        ("GENEVA_STUCK_IN_PROGRESS_THRESHOLD", -5, "must be positive, got -5"),
        ("GENEVA_STUCK_SCHEDULED_THRESHOLD", 0, "must be positive, got 0"),
        ("GENEVA_DISPATCH_INTERVAL", 0, "GENEVA_DISPATCH_INTERVAL must be positive"),
        ("GENEVA_PUBLISH_TIMEOUT", 0, "GENEVA_PUBLISH_TIMEOUT must be positive"),
        # R-FLT-31, R-FLT-40
        ("GENEVA_HEARTBEAT_TIMEOUT", 0, "GENEVA_HEARTBEAT_TIMEOUT must be positive"),
        (
            "GENEVA_HEARTBEAT_TIMEOUT",
            120,
            "GENEVA_HEARTBEAT_TIMEOUT (120 s) must be at most GENEVA_WORKER_DEAD_AFTER "
            "(60 s)",
        ),
        (
            "GENEVA_CONNECTION_TIMEOUT",
            0.5,
            "GENEVA_CONNECTION_TIMEOUT must be None (leave the engines' connections "
            "as they are) or from 1 second to 1 hour (a timedelta or seconds), "
            "got 0.5",
        ),
        ("GENEVA_CONNECTION_TIMEOUT", "10s", "must be a timedelta or a number"),
        ("GENEVA_PUBLISH_TIMEOUT", "5s", "must be a timedelta or a number of seconds"),
        ("GENEVA_MAX_BROKER_DELAY", -1, "must be non-negative, got -1"),
        (
            "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER",
            10**12,
            "must be at most 36500 days (100 years), got 1000000000000",
        ),
        (
            "GENEVA_STUCK_IN_PROGRESS_THRESHOLD",
            "1h",
            "must be a timedelta or a number of seconds, got '1h'",
        ),
        ("GENEVA_STUCK_RECOVERY_ACTION", "retry", "'reattempt', 'cancel', got 'retry'"),
        ("GENEVA_TASK_BACKEND", "rq", "'celery', 'recording', got 'rq'"),
        (
            "GENEVA_TASK_RERAISE",
            "never",
            "GENEVA_TASK_RERAISE must be one of 'unhandled', 'always', got 'never'",
        ),
        (
            "GENEVA_DEFAULT_QUEUE",
            42,
            "GENEVA_DEFAULT_QUEUE must be a non-empty str of at most 255 bytes of "
            "UTF-8 without NUL characters, or None, got 42",
        ),
        ("GENEVA_ENQUEUE_AFTER_COMMIT", "yes", "must be True or False, got 'yes'"),
        (
            "GENEVA_MYSQL_READ_COMMITTED",
            "no",
            "GENEVA_MYSQL_READ_COMMITTED must be True or False, got 'no'",
        ),
        ("GENEVA_ERROR_REPORTER", "no.such.module:reporter", "could not import"),
        (
            "GENEVA_ERROR_REPORTER",
            "x",
            "an import path such as 'package.module:name', got 'x'",
        ),
        ("GENEVA_METRICS", object(), "gauge(name, value, tags)"),
        ("GENEVA_MAX_CURSOR_SIZE", -1, "positive int"),
        ("GENEVA_FIND_DELAY", -0.5, "non-negative number of seconds"),
        ("GENEVA_CLOCK_SKEW_TOLERANCE", -1, "GENEVA_CLOCK_SKEW_TOLERANCE"),
        ("GENEVA_CLOCK_SKEW_TOLERANCE", None, "GENEVA_CLOCK_SKEW_TOLERANCE"),
        ("GENEVA_CLOCK_SKEW_TOLERANCE", "soon", "GENEVA_CLOCK_SKEW_TOLERANCE"),
    ],
)
def test_invalid_settings_name_the_key_and_value(key, value, message):
    """A bad GENEVA_* value raises GenevaConfigurationError naming key and value (R-CFG-01)."""
    with pytest.raises(GenevaConfigurationError) as raised:
        config_from_mapping({key: value}, testing=False)
    assert message in str(raised.value)


def test_int_settings_accept_the_largest_64_bit_integer():
    """2**63 - 1, the bound named in the error, is itself accepted (R-CFG-01)."""
    config = config_from_mapping(
        {"GENEVA_HOUSEKEEPING_BATCH_SIZE": 2**63 - 1}, testing=False
    )
    assert config.housekeeping_batch_size == 2**63 - 1


def test_unknown_settings_are_logged_with_the_closest_known_name(tmp_path, caplog):
    """A misspelt GENEVA_* key is named in a warning at init_app, with a suggestion."""
    caplog.set_level(logging.WARNING, logger="flask_geneva")
    basic.create_app(
        f"sqlite:///{tmp_path / 'typo.sqlite3'}",
        GENEVA_FIND_ATEMPTS=3,
        GENEVA_QQQ=1,
        GENEVA_FOOBAR=1,
    )
    messages = [record.getMessage() for record in caplog.records]
    assert (
        "unknown flask_geneva setting GENEVA_FIND_ATEMPTS; "
        "did you mean GENEVA_FIND_ATTEMPTS?" in messages
    )
    assert "unknown flask_geneva setting GENEVA_QQQ" in messages
    # Only the shared GENEVA_ prefix is alike: no suggestion (was GENEVA_ADMIN_URL).
    assert "unknown flask_geneva setting GENEVA_FOOBAR" in messages
    assert not any("GENEVA_FIND_DELAY" in message for message in messages)


def test_durations_accept_timedelta_and_seconds():
    """Durations accept timedelta or seconds, and None where allowed (R-CFG-01, §0)."""
    config = config_from_mapping(
        {
            "GENEVA_STUCK_IN_PROGRESS_THRESHOLD": 90,
            "GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": None,
            "GENEVA_MAX_BROKER_DELAY": timedelta(minutes=2),
        },
        testing=False,
    )
    assert config.stuck_in_progress_threshold == timedelta(seconds=90)
    assert config.delete_completed_workflows_after is None
    assert config.max_broker_delay == timedelta(minutes=2)


def test_enqueue_after_commit_defaults_to_not_testing():
    """GENEVA_ENQUEUE_AFTER_COMMIT defaults to `not app.testing` (R-TXN-01)."""
    assert config_from_mapping({}, testing=True).enqueue_after_commit is False
    assert config_from_mapping({}, testing=False).enqueue_after_commit is True


def test_the_celery_backend_is_built_once_per_celery_app(tmp_path):
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path, GENEVA_TASK_BACKEND="celery")
    db.init_app(app)
    geneva.init_app(app, celery=Celery("backend-cache"))
    state = app.extensions["geneva"]
    with app.app_context():
        first = state.backend
        assert state.backend is first
        state.celery = Celery("another")
        assert state.backend is not first
        assert state.backend.celery_app is state.celery


def test_eager_celery_is_refused(tmp_path):
    """Celery eager mode with the celery backend is refused at init (R-TH-21)."""
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path)
    db.init_app(app)
    celery = Celery("eager")
    celery.conf.task_always_eager = True
    with pytest.raises(GenevaConfigurationError, match="task_always_eager"):
        geneva.init_app(app, celery=celery)


def test_eager_celery_allowed_when_opted_in(tmp_path):
    """GENEVA_ALLOW_EAGER=True accepts eager mode (R-TH-21)."""
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path, GENEVA_ALLOW_EAGER=True)
    db.init_app(app)
    celery = Celery("eager-ok")
    celery.conf.task_always_eager = True
    geneva.init_app(app, celery=celery)
    assert "flask_geneva.perform_step" in celery.tasks


def test_init_app_without_a_celery_app_is_refused(tmp_path):
    """With the celery backend, init_app without any Celery app raises a clear error instead of using Celery's current app later (issue 14)."""
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path)
    db.init_app(app)
    with pytest.raises(GenevaConfigurationError, match="no Celery app") as raised:
        geneva.init_app(app)
    assert "GENEVA_TASK_BACKEND='recording'" in str(raised.value)
    assert "geneva" not in app.extensions


def test_init_app_finds_the_celery_app_the_factory_stored(tmp_path):
    """A Celery app in app.extensions['celery'] before init_app is the one used (issue 14)."""
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path)
    db.init_app(app)
    celery = Celery("factory-made")
    app.extensions["celery"] = celery
    geneva.init_app(app)
    with app.app_context():
        assert app.extensions["geneva"].backend.celery_app is celery


def test_switching_to_the_celery_backend_without_a_celery_app_raises(tmp_path):
    """The backend never falls back to Celery's current app: it raises before any commit (issue 14).

    Switching through ``reload_settings`` (R-CFG-02) is refused at once and keeps
    the recording backend; a state that lost its Celery app raises at the backend.
    """
    db = SQLAlchemy()
    geneva = Geneva(db)
    app = _bare_app(tmp_path, GENEVA_TASK_BACKEND="recording")
    db.init_app(app)
    geneva.init_app(app)
    app.config["GENEVA_TASK_BACKEND"] = "celery"
    with pytest.raises(GenevaConfigurationError, match="no Celery"):
        geneva.reload_settings(app)
    state = app.extensions["geneva"]
    assert state.config.task_backend == "recording"
    app.config["GENEVA_TASK_BACKEND"] = "recording"

    other = _bare_app(tmp_path, GENEVA_TASK_BACKEND="celery")
    db.init_app(other)
    geneva.init_app(other, celery=Celery("lost"))
    other.extensions["geneva"].celery = None
    with (
        other.app_context(),
        pytest.raises(GenevaConfigurationError, match="no Celery"),
    ):
        other.extensions["geneva"].backend  # noqa: B018 - the property raises


@pytest.mark.parametrize("mount", ["setting", "argument"])
def test_admin_without_secret_key_is_refused_at_init_app(tmp_path, mount):
    """Mounting the admin without SECRET_KEY raises at init_app, not a 500 on every list page (issue 14)."""
    db = SQLAlchemy()
    geneva = Geneva(db)
    config = {"GENEVA_TASK_BACKEND": "recording"}
    if mount == "setting":
        config["GENEVA_ADMIN_ENABLED"] = True
    app = _bare_app(tmp_path, **config)
    db.init_app(app)
    with pytest.raises(GenevaConfigurationError, match="SECRET_KEY"):
        geneva.init_app(app, admin=True if mount == "argument" else None)
    assert "geneva" not in app.extensions
    app.config["SECRET_KEY"] = "extension-tests"  # noqa: S105 - a test key
    geneva.init_app(app, admin=True if mount == "argument" else None)
    assert "admin" in app.extensions
