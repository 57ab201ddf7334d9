"""``GENEVA_PRIORITY_MAPPER`` takes the names "rabbitmq" and "redis" (R-PRI-03).

Besides a callable (or its import path) and None, the setting accepts two
names: "rabbitmq" clamps the geneva priority to 0..9 (higher sooner, as
RabbitMQ reads it) and "redis" sends ``9 - clamp(p, 0, 9)`` (the Redis
transport runs lower numbers sooner). Any other str is refused at ``init_app``
naming the value and the allowed ones.
"""

from __future__ import annotations

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva.core.config import DEFAULTS
from flask_geneva.core.config import config_from_mapping
from flask_geneva.core.config import setting_problems
from flask_geneva.core.priority_mappers import rabbitmq_priority
from flask_geneva.core.priority_mappers import redis_priority
from flask_geneva.exceptions import GenevaConfigurationError

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("priority", "rabbitmq", "redis"),
    [(-5, 0, 9), (0, 0, 9), (1, 1, 8), (5, 5, 4), (9, 9, 0), (10, 9, 0), (99, 9, 0)],
)
def test_the_named_mappers_clamp_and_turn_the_scale(priority, rabbitmq, redis):
    """rabbitmq: clamp to 0..9; redis: 9 - clamp(p, 0, 9) (R-PRI-03)."""
    assert rabbitmq_priority(priority) == rabbitmq
    assert redis_priority(priority) == redis


@pytest.mark.parametrize(
    ("name", "mapper"), [("rabbitmq", rabbitmq_priority), ("redis", redis_priority)]
)
def test_a_name_resolves_to_its_mapper(name, mapper):
    """The setting's name is replaced by the mapper function (R-PRI-03)."""
    config = config_from_mapping({"GENEVA_PRIORITY_MAPPER": name}, testing=True)
    assert config.priority_mapper is mapper


def test_the_default_is_none():
    """Unset, priorities pass unchanged (R-PRI-03, R-JOB-08)."""
    assert DEFAULTS["GENEVA_PRIORITY_MAPPER"] is None
    assert config_from_mapping({}, testing=True).priority_mapper is None


def test_a_callable_and_an_import_path_still_work():
    """A callable and a "module:name" import path are kept (R-JOB-08)."""

    def double(priority: int) -> int:
        return priority * 2

    config = config_from_mapping({"GENEVA_PRIORITY_MAPPER": double}, testing=True)
    assert config.priority_mapper is double
    path = "flask_geneva.core.priority_mappers:redis_priority"
    config = config_from_mapping({"GENEVA_PRIORITY_MAPPER": path}, testing=True)
    assert config.priority_mapper is redis_priority


@pytest.mark.parametrize("value", ["Redis", "rabitmq", "", "lower-first"])
def test_another_name_is_refused_naming_the_value_and_the_allowed_ones(value):
    """A str that is no name and no import path is one problem naming the value
    and "rabbitmq", "redis" (R-PRI-03)."""
    [problem] = setting_problems({"GENEVA_PRIORITY_MAPPER": value}, testing=True)
    assert problem.startswith(
        "GENEVA_PRIORITY_MAPPER must be one of 'rabbitmq', 'redis'"
    )
    assert problem.endswith(f"got {value!r}")


def test_an_import_path_that_fails_names_the_allowed_names_too():
    """An import path that cannot be imported says the names exist (R-PRI-03)."""
    [problem] = setting_problems(
        {"GENEVA_PRIORITY_MAPPER": "no_such_module:mapper"}, testing=True
    )
    assert "'no_such_module:mapper'" in problem
    assert "(or one of the names 'rabbitmq', 'redis')" in problem


def test_init_app_refuses_an_unknown_name(tmp_path):
    """The refusal happens at init_app, as a GenevaConfigurationError (R-PRI-03)."""
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'mapper.sqlite3'}",
        GENEVA_TASK_BACKEND="recording",
        GENEVA_PRIORITY_MAPPER="rabbit",
    )
    db = SQLAlchemy()
    db.init_app(app)
    geneva = Geneva(db)
    with pytest.raises(GenevaConfigurationError) as raised:
        geneva.init_app(app)
    assert "got 'rabbit'" in str(raised.value)
    assert "'rabbitmq', 'redis'" in str(raised.value)
    with app.app_context():
        db.engine.dispose()
