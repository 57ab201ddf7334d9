"""Short heartbeats for the heartbeat tests, on the shared harness
(``tests/support/worker_harness.py``).

``tests/worker/test_worker_heartbeats.py`` (R-WRK-02..07),
``tests/worker/test_live_worker_release.py`` (R-WRK-18) and
``tests/worker/test_worker_dead_after_mismatch.py`` (R-WRK-17) start Celery
workers on ``tests.apps.worker_app`` whose steps block on a flag file
(:func:`block_until_released`), and run housekeeping with the same short
interval and dead-after. :class:`ReleasedOnce` is the blocking workflow of the
last two.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import sqlalchemy as sa

from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import worker_test_app

HEARTBEAT = 0.5
DEAD_AFTER = 3.0


def build_app(broker_url, database_url, tmp_path, monkeypatch, flag_variable):
    """The worker app with short heartbeats, an empty broker and registry;
    ``flag_variable`` names the blocking steps' flag directory (``tmp_path``)."""
    monkeypatch.setenv(flag_variable, str(tmp_path))
    monkeypatch.setenv("GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL", str(HEARTBEAT))
    monkeypatch.setenv("GENEVA_TEST_WORKER_DEAD_AFTER", str(DEAD_AFTER))
    app = worker_test_app(broker_url, database_url)
    with app.app_context(), basic.db.engine.begin() as connection:
        connection.execute(sa.delete(workers_table()))
    return app


def workers_table():
    return basic.db.metadata.tables["geneva_drive_workers"]


def worker_rows(app):
    """Every row of the worker registry."""
    with app.app_context(), basic.db.engine.connect() as connection:
        return connection.execute(sa.select(workers_table())).all()


def block_until_released(flag_variable, started):
    """In a step body: touch ``started-<started>`` in the flag directory named by
    the environment variable ``flag_variable``, then wait (at most 120 s) until
    the test writes ``release`` there. Returns the flag directory."""
    flags = Path(os.environ[flag_variable])
    (flags / f"started-{started}").touch()
    deadline = time.monotonic() + 120
    while not (flags / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the blocking step")
        time.sleep(0.05)
    return flags


#: The flag directory of :class:`ReleasedOnce`'s blocking step.
FLAG_DIR_VARIABLE = "GENEVA_TEST_HEARTBEAT_FLAG_DIR"


class ReleasedOnce(basic.geneva.Workflow):
    """Its first step blocks until the test writes ``release`` in the flag
    directory, then touches a ``ran-<pid>-<ns>`` file there; a second step
    follows."""

    @step
    def blocking(self):
        flags = block_until_released(FLAG_DIR_VARIABLE, os.getpid())
        (flags / f"ran-{os.getpid()}-{time.monotonic_ns()}").touch()

    @step
    def after(self):
        pass


def create(app, workflow_cls, email):
    """Create a ``workflow_cls`` workflow for a new hero; returns its id."""
    return create_workflow(app, workflow_cls, email)[0]


#: ``(step_name, outcome)`` of each execution of a blocking step's workflow whose
#: first run was recovered, then ran again to the end.
RECOVERED_AND_RERUN = [
    ("blocking", "recovered"),
    ("blocking", "success"),
    ("after", "success"),
]


EXECUTION_COLUMNS = ("id", "step_name", "state", "outcome", "worker_id")


def executions(app, workflow_id, columns=EXECUTION_COLUMNS):
    """The workflow's executions, oldest first: rows of ``columns`` (names)."""
    with app.app_context():
        e = basic.geneva.StepExecution
        rows = basic.db.session.execute(
            sa.select(*(getattr(e, name) for name in columns))
            .where(e.workflow_id == workflow_id)
            .order_by(e.created_at, e.id)
        ).all()
        basic.db.session.remove()
        return rows


def run_housekeeping(app, **config):
    """One housekeeping run in the test process with the short heartbeat
    settings, or ``config`` over them; returns its summary."""
    with app.app_context():
        app.config.update(
            {
                "GENEVA_WORKER_HEARTBEAT_INTERVAL": HEARTBEAT,
                "GENEVA_WORKER_DEAD_AFTER": DEAD_AFTER,
                **config,
            }
        )
        basic.geneva.reload_settings(app)
        summary = basic.geneva.run_housekeeping()
        basic.db.session.remove()
        return summary
