"""A resumable step survives a worker's warm shutdown (R-INT-03, R-RES-04, R-SCH-08).

A real ``celery worker`` walks 5,000 rows. When it gets SIGTERM mid-iteration,
Celery's ``worker_shutting_down`` signal asks the step to stop at its next
checkpoint: the execution completes ``continued`` and its successor, carrying the
cursor, is left in the broker. A second worker finishes the walk. The workers
import this module (``--include``) for the workflow class.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import sqlalchemy as sa

from flask_geneva import resumable_step
from tests.apps import basic
from tests.support.worker_harness import dispose
from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app

ROWS = 5_000
#: The body blocks at this row until the gate file exists (set by the test).
GATE_ROW = 2_500
LOG_ENV = "GENEVA_TEST_RESUMABLE_LOG"
GATE_ENV = "GENEVA_TEST_RESUMABLE_GATE"


class ResumableWorkerWalk(basic.geneva.Workflow):
    """Walks the ``row-*`` users, logging each id to a file before counting it."""

    @resumable_step
    def walk(self, it):
        log_path = Path(os.environ[LOG_ENV])
        gate = Path(os.environ[GATE_ENV])
        rows = sa.select(basic.User).where(basic.User.email.like("row-%"))
        with log_path.open("a", encoding="utf-8") as log:
            for index, user in enumerate(it.iterate_over_records(rows, batch_size=500)):
                if not it.resumed and index == GATE_ROW:
                    deadline = time.monotonic() + 60
                    while not gate.exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                # A side effect outside the database: at-least-once (R-RES-38).
                log.write(f"{user.id}\n")
                log.flush()
                user.counter += 1


def test_sigterm_mid_iteration_continues_in_a_successor_after_restart(
    start_worker, broker_url, worker_database_url, tmp_path, monkeypatch
):
    """SIGTERM ends the chunk `continued`; a restarted worker finishes; every row once (R-INT-01, R-INT-03, R-RES-20, R-IT-10)."""
    log_path, gate = tmp_path / "processed.log", tmp_path / "gate"
    monkeypatch.setenv(LOG_ENV, str(log_path))
    monkeypatch.setenv(GATE_ENV, str(gate))
    app = worker_test_app(broker_url, worker_database_url)
    with app.app_context():
        basic.db.session.execute(
            sa.insert(basic.User),
            [{"email": f"row-{i:05d}", "counter": 0} for i in range(ROWS)],
        )
        hero = basic.User(email="hero@example.com")
        basic.db.session.add(hero)
        basic.db.session.commit()
        workflow = ResumableWorkerWalk.create(hero=hero)
        workflow_id = workflow.id
        basic.db.session.remove()

    include = ("--include", "tests.worker.test_resumable_worker")
    first = start_worker(*include)

    # Wait until the body sits at the gate row, then shut the worker down warm.
    wait_for(
        lambda: (
            log_path.exists() and len(log_path.read_text().splitlines()) >= GATE_ROW
        ),
        timeout=60,
    )
    first.terminate()
    gate.touch()
    first.wait(timeout=60)

    walk = execution_rows(app, workflow_id)
    assert [(r["state"], r["outcome"]) for r in walk] == [
        ("completed", "continued"),
        ("scheduled", None),
    ]
    assert walk[0]["metadata"]["interrupt"]["reason"] == "worker_shutdown"
    assert walk[1]["continues_from_id"] == walk[0]["id"]
    assert walk[1]["cursor"] == walk[0]["cursor"]
    interrupted_after = walk[0]["metadata"]["interrupt"]["iterations"]
    assert GATE_ROW < interrupted_after < ROWS

    start_worker(*include)

    wait_for_state(app, workflow_id, "finished", timeout=120)
    walk = execution_rows(app, workflow_id)
    assert [r["outcome"] for r in walk] == ["continued", "success"]
    with app.app_context():
        counters = basic.db.session.execute(
            sa.select(basic.User.id, basic.User.counter).where(
                basic.User.email.like("row-%")
            )
        ).all()
    dispose(app)  # no pooled connection outlives the test
    assert len(counters) == ROWS
    assert {counter for _, counter in counters} == {1}
    logged = [int(line) for line in log_path.read_text().splitlines()]
    assert sorted(set(logged)) == sorted(user_id for user_id, _ in counters)
    # At most the one item that ran without reaching its checkpoint repeats.
    assert len(logged) - len(set(logged)) <= 1
