"""The pytest plugin reaches a user's project through the pytest11 entry point (R-TH-20).

Each test writes a small project into ``tmp_path`` (a hero model, a workflow, an
``app`` fixture) and runs pytest on it in a subprocess, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from importlib.metadata import entry_points

import pytest

from tests.support.worker_harness import python_module
from tests.support.worker_harness import run

# Run once, in the SQLite pass: the user project brings its own SQLite database.
pytestmark = pytest.mark.database_independent

CONFTEST = """
import pytest
import sqlalchemy as sa
from celery import Celery
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import orm

from flask_geneva import Geneva
from flask_geneva import step

{plugins}
db = SQLAlchemy()
geneva = Geneva(db)


class Customer(db.Model):
    __tablename__ = "customers"
    id: orm.Mapped[int] = orm.mapped_column(sa.Integer, primary_key=True)


class Greeting(geneva.Workflow):
    __geneva_type__ = "Greeting"

    @step
    def hello(self):
        return None


@pytest.fixture
def app(tmp_path):
    app = Flask(__name__)
    app.config.update(
        TESTING=True, SQLALCHEMY_DATABASE_URI=f"sqlite:///{{tmp_path / 'user.db'}}"
    )
    db.init_app(app)
    # As in the README: the app has its Celery app; geneva_jobs records instead.
    geneva.init_app(app, celery=Celery(__name__))
    with app.app_context():
        db.create_all()
    return app
"""

TEST_FILE = """
from conftest import Customer, Greeting, db


def test_greeting_is_recorded(app, geneva_jobs):
    with app.app_context():
        customer = Customer()
        db.session.add(customer)
        db.session.commit()
        Greeting.create(hero=customer)
        assert [job.task_name for job in geneva_jobs.enqueued] == [
            "flask_geneva.perform_step"
        ]
        geneva_jobs.drain()
        assert geneva_jobs.failures == []
"""


def _run_user_project(tmp_path, *, plugins_line: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(CONFTEST.format(plugins=plugins_line))
    )
    (tmp_path / "test_user.py").write_text(textwrap.dedent(TEST_FILE))
    # No PYTEST_* variable of this run; PYTHONPATH as this run got it.
    env = {name: None for name in os.environ if name.startswith("PYTEST_")}
    return run(
        python_module("pytest", "-q", "-p", "no:cacheprovider", "-W", "error"),
        cwd=tmp_path,
        env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH")},
        timeout=120,
    )


def test_pytest11_entry_point_names_the_plugin_module():
    """The installed distribution registers flask_geneva.pytest_plugin as a pytest11 plugin (R-TH-20)."""
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("flask_geneva.pytest_plugin") == "flask_geneva.pytest_plugin"


@pytest.mark.parametrize(
    "plugins_line",
    ["", 'pytest_plugins = ["flask_geneva.pytest_plugin"]'],
    ids=["entry-point-only", "also-listed-in-conftest"],
)
def test_user_project_gets_geneva_jobs_without_registering_it_twice(
    tmp_path, plugins_line
):
    """A user's tests get `geneva_jobs` with no pytest_plugins line, and listing it too is harmless (R-TH-20)."""
    result = _run_user_project(tmp_path, plugins_line=plugins_line)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
