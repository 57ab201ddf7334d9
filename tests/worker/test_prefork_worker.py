"""Prefork pool children never use the Celery parent's database connection.

Issue 12, point 2: the worker module (``tests.apps.prefork_worker_app``) runs
``select 1`` at import time, so the Celery parent holds a pooled connection when
it forks its children. SQLAlchemy's rule for multiprocessing is that a child
process must not use the pooled connections it inherited: flask_geneva disposes
every engine's pool in each child, on Celery's ``worker_process_init``, with
``Engine.dispose(close=False)`` (which leaves the parent's connections to the
parent). Without it the children share one socket, and their tasks fail with
protocol errors or ``ResourceClosedError`` while workflows stay ``performing``.

A real ``celery worker --pool=prefork --concurrency=3`` runs 30 three-step
workflows; the worker imports this module (``--include``) for the workflow class.
"""

from __future__ import annotations

import re

import sqlalchemy as sa

from tests.apps import basic
from tests.support.common_workflows import CountingThreeSteps
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import worker_test_app

WORKFLOWS = 30
CONNECTION_ERRORS = (
    "ResourceClosedError",
    "OperationalError",
    "InterfaceError",
    "DatabaseError",
    "ProtocolError",
    "lost synchronization",
)


def _states(app, workflow_ids):
    with app.app_context():
        workflow_cls = basic.geneva.Workflow
        rows = basic.db.session.execute(
            sa.select(workflow_cls.state).where(workflow_cls.id.in_(workflow_ids))
        ).scalars()
        states = sorted(rows)
        basic.db.session.remove()
        return states


def test_prefork_children_get_their_own_connections(
    start_worker, broker_url, worker_database_url, tmp_path
):
    """30 workflows on a prefork worker whose module used the database: every step runs once (R-JOB-20..22, SQLAlchemy's dispose(close=False) in each child)."""
    app = worker_test_app(broker_url, worker_database_url)
    with app.app_context():
        heroes = [
            basic.User(email=f"prefork-{i}@example.com", counter=0)
            for i in range(WORKFLOWS)
        ]
        basic.db.session.add_all(heroes)
        basic.db.session.commit()
        workflow_ids = [CountingThreeSteps.create(hero=hero).id for hero in heroes]
        hero_ids = [hero.id for hero in heroes]
        basic.db.session.remove()

    start_worker(
        "--pool=prefork",
        "--concurrency=3",
        "--include",
        "tests.worker.test_prefork_worker",
        app="tests.apps.prefork_worker_app:celery",
    )

    def all_finished():
        return _states(app, workflow_ids) == ["finished"] * WORKFLOWS

    try:
        wait_for(all_finished, timeout=90)
    except AssertionError:
        states = _states(app, workflow_ids)
        raise AssertionError(
            "not every workflow finished on the prefork worker: "
            + ", ".join(f"{s}={states.count(s)}" for s in sorted(set(states)))
        ) from None

    with app.app_context():
        execution_cls = basic.geneva.StepExecution
        outcomes = basic.db.session.execute(
            sa.select(execution_cls.outcome, sa.func.count())
            .where(execution_cls.workflow_id.in_(workflow_ids))
            .group_by(execution_cls.outcome)
        ).all()
        counters = basic.db.session.execute(
            sa.select(basic.User.counter).where(basic.User.id.in_(hero_ids))
        ).scalars()
        assert sorted(counters) == [111] * WORKFLOWS
        basic.db.session.remove()
    assert dict(outcomes) == {"success": 3 * WORKFLOWS}
    log = (tmp_path / "worker-0.log").read_text(errors="replace")
    # The steps really ran in several pool children.
    assert len(set(re.findall(r"ForkPoolWorker-\d+", log))) >= 2
    for error in CONNECTION_ERRORS:
        assert error not in log
