"""A worker killed in the middle of a step is recovered by housekeeping (R-HK-20/24).

The worker imports this module (``--include``) to know the blocking workflow; the
step waits for a flag file, so the test can SIGKILL the worker while the execution
is ``in_progress`` and its body has not finished.
"""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import step
from flask_geneva.core import clock
from tests.apps import basic
from tests.apps.basic import geneva
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import wait_for_files
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app
from tests.worker import heartbeat_worker

FLAG_DIR_VARIABLE = "GENEVA_TEST_HK_FLAG_DIR"


class HkWorkerBlocking(basic.geneva.Workflow):
    """Its first step blocks until the test writes the ``release`` flag."""

    @step
    def blocking(self):
        heartbeat_worker.block_until_released(
            FLAG_DIR_VARIABLE, self.current_execution.id
        )
        self.hero.counter += 1

    @step
    def after(self):
        self.hero.counter += 10


class HkWorkerIdle(basic.geneva.Workflow):
    """A bystander whose only step is due tomorrow."""

    @step(wait=timedelta(days=1))
    def tomorrow(self):
        self.hero.counter += 100


def _executions(app, workflow_id):
    return heartbeat_worker.executions(
        app, workflow_id, ("id", "step_name", "state", "outcome", "started_at")
    )


def test_killed_worker_step_is_recovered_and_the_workflow_finishes(
    start_worker, broker_url, worker_database_url, tmp_path, monkeypatch
):
    """After SIGKILL mid-step and GENEVA_WORKER_DEAD_AFTER, once a new worker
    heartbeats, housekeeping recovers the execution, the new worker finishes the
    workflow, and nothing else is touched (R-HK-20, R-HK-24, R-EXE-35, R-WRK-06,
    R-WRK-14).
    """
    monkeypatch.setenv(FLAG_DIR_VARIABLE, str(tmp_path))
    # The worker registers and heartbeats: its execution is abandoned once its
    # heartbeats stop for GENEVA_WORKER_DEAD_AFTER (R-WRK-06).
    monkeypatch.setenv("GENEVA_TEST_WORKER_HEARTBEAT_INTERVAL", "0.5")
    monkeypatch.setenv("GENEVA_TEST_WORKER_DEAD_AFTER", "1")
    app = worker_test_app(broker_url, worker_database_url)
    app.config["GENEVA_STUCK_IN_PROGRESS_THRESHOLD"] = timedelta(seconds=1)
    app.config["GENEVA_WORKER_HEARTBEAT_INTERVAL"] = 0.5
    app.config["GENEVA_WORKER_DEAD_AFTER"] = 1
    geneva.reload_settings(app)
    with app.app_context():
        hero = basic.User(email="killed@example.com")
        bystander_hero = basic.User(email="bystander@example.com")
        basic.db.session.add_all([hero, bystander_hero])
        basic.db.session.commit()
        workflow_id = HkWorkerBlocking.create(hero=hero).id
        bystander_id = HkWorkerIdle.create(hero=bystander_hero).id
        hero_id, bystander_hero_id = hero.id, bystander_hero.id
        basic.db.session.remove()
    bystander_before = _executions(app, bystander_id)

    include = ("--include", "tests.worker.test_housekeeping_recovery")
    first_worker = start_worker(*include)
    started = wait_for_files(tmp_path, "started-*")
    first_worker.kill()
    first_worker.wait(timeout=30)

    [(stuck_id, _, state, _, started_at)] = _executions(app, workflow_id)
    assert state == "in_progress"
    assert started[0].name == f"started-{stuck_id}"
    wait_for(lambda: clock.now() - started_at > timedelta(seconds=1), timeout=10)
    # A new worker starts (as a supervisor restarts one): its heartbeats are the
    # evidence that the killed worker's stopped for another reason than an
    # outage (R-WRK-14). It will run the rescheduled step once released.
    start_worker(*include)
    summaries = []

    def recovered():
        with app.app_context():
            summaries.append(basic.geneva.run_housekeeping())
            basic.db.session.remove()
        return summaries[-1]["stuck_in_progress_recovered"]

    assert wait_for(recovered, timeout=60, interval=0.5) == 1
    assert sum(s["stuck_in_progress_recovered"] for s in summaries) == 1
    assert sum(s["stuck_scheduled_recovered"] for s in summaries) == 0

    (tmp_path / "release").touch()

    wait_for_state(app, workflow_id, "finished")
    rows = _executions(app, workflow_id)
    assert [
        (r.step_name, r.outcome) for r in rows
    ] == heartbeat_worker.RECOVERED_AND_RERUN
    assert {r.state for r in rows} == {"completed"}
    assert rows[0].id == stuck_id
    assert _executions(app, bystander_id) == bystander_before
    with app.app_context():
        assert basic.db.session.get(basic.User, hero_id).counter == 11
        assert basic.db.session.get(basic.User, bystander_hero_id).counter == 0
