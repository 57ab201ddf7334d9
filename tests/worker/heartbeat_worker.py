"""A real worker harness with short heartbeats, shared by the heartbeat tests.

``tests/worker/test_live_worker_release.py`` (R-WRK-18) and
``tests/worker/test_worker_dead_after_mismatch.py`` (R-WRK-17) start Celery
workers on ``tests.apps.worker_app`` whose steps block on a flag file, and run
housekeeping with the same short interval and dead-after.
"""

from __future__ import annotations

import os
import subprocess
import sys

import redis
import sqlalchemy as sa

from tests.apps import basic
from tests.worker.conftest import REPO_ROOT
from tests.worker.conftest import prepare_database

HEARTBEAT = 0.5
DEAD_AFTER = 3.0


def build_app(broker_url, database_url, tmp_path, monkeypatch, flag_variable):
    """The worker app with short heartbeats, an empty broker and registry;
    ``flag_variable`` names the blocking steps' flag directory (``tmp_path``)."""
    redis.Redis.from_url(broker_url).flushdb()
    monkeypatch.setenv(flag_variable, str(tmp_path))
    monkeypatch.setenv("GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL", str(HEARTBEAT))
    monkeypatch.setenv("GENEVA_TEST_WORKER_DEAD_AFTER", str(DEAD_AFTER))
    from tests.apps import worker_app

    app, _ = worker_app.build_app(database_url, broker_url)
    prepare_database(app)
    with app.app_context(), basic.db.engine.begin() as connection:
        connection.execute(sa.delete(basic.db.metadata.tables["geneva_drive_workers"]))
    return app


def create(app, workflow_cls, email):
    """Create a ``workflow_cls`` workflow for a new hero; returns its id."""
    with app.app_context():
        hero = basic.User(email=email)
        basic.db.session.add(hero)
        basic.db.session.commit()
        workflow_id = workflow_cls.create(hero=hero).id
        basic.db.session.remove()
        return workflow_id


def executions(app, workflow_id):
    with app.app_context():
        e = basic.geneva.StepExecution
        rows = basic.db.session.execute(
            sa.select(e.id, e.step_name, e.state, e.outcome, e.worker_id)
            .where(e.workflow_id == workflow_id)
            .order_by(e.created_at, e.id)
        ).all()
        basic.db.session.remove()
        return rows


def run_housekeeping(app, **config):
    with app.app_context():
        app.config.update(
            GENEVA_WORKER_HEARTBEAT_INTERVAL=HEARTBEAT,
            GENEVA_WORKER_DEAD_AFTER=DEAD_AFTER,
            **config,
        )
        basic.geneva.reload_settings(app)
        summary = basic.geneva.run_housekeeping()
        basic.db.session.remove()
        return summary


def start_worker(tmp_path, database_url, broker_url, *extra, name="w", **env_extra):
    env = {
        **os.environ,
        **env_extra,
        "GENEVA_TEST_BROKER_URL": broker_url,
        "GENEVA_TEST_WORKER_DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO_ROOT),
    }
    with open(tmp_path / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.apps.worker_app:celery",
                "worker",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
                *extra,
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def stop(process):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
