"""A real prefork worker interrupts a step at its timeout (R-STO-03, R-STO-10, R-STO-13),
and kills one that ignores it, whose recovery applies the step's policy (R-STO-20).

Celery's soft time limit, published with the step's task, raises
``SoftTimeLimitExceeded`` in the sleeping body; flask_geneva turns it into
``StepTimeout``, which the step's policy (skip) handles, and the next step runs.
A body that catches the soft limit and sleeps on is killed at the hard limit
(``GENEVA_STEP_TIMEOUT_GRACE`` later); the beat-run dispatcher recovers it once
the killed child's heartbeats stop, and the step's policy decides.
The test workers use the solo pool, which cannot interrupt a task: these start
a prefork worker.
"""

from __future__ import annotations

import time

from celery.exceptions import SoftTimeLimitExceeded

from flask_geneva import ExceptionPolicy
from flask_geneva import StepTimeout
from flask_geneva import step
from tests.apps import basic
from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app

STEP_TIMEOUT = "flask_geneva.exceptions.StepTimeout"


class WorkerHardLimit(basic.geneva.Workflow):
    """Its step ignores the soft limit of its 3-second timeout; its policy
    reattempts a timeout once, then skips the step.

    Celery's limits count from the task's start, the claim included: 3 s, not
    1, so that a slow claim on a loaded machine is not what the soft limit
    interrupts."""

    @step(
        timeout=3,
        on_exception=ExceptionPolicy(
            "reattempt",
            matching=StepTimeout,
            max_reattempts=1,
            terminal_action="skip",
        ),
    )
    def hang(self):
        try:
            time.sleep(60)
        except SoftTimeLimitExceeded:
            time.sleep(60)  # the hard limit kills the process first

    @step
    def after(self):
        pass


def test_a_prefork_worker_interrupts_a_step_at_its_timeout(
    start_worker, broker_url, worker_database_url
):
    """A body sleeping 60 s with a 3-second timeout is interrupted by Celery's soft
    time limit, recorded as StepTimeout and skipped by its policy (R-STO-10,
    R-STO-13); so is one that catches the interruption and returns (R-STO-15)."""
    from tests.apps import worker_app

    app = worker_test_app(broker_url, worker_database_url)
    try:
        workflow_id, _ = create_workflow(
            app, worker_app.WorkerStepTimeout, "timeout@example.com"
        )
        caught_id, _ = create_workflow(
            app, worker_app.WorkerStepTimeoutCaught, "caught@example.com"
        )
        start_worker("--pool=prefork", "--concurrency=1")
        # Before the sleeps would have ended on their own (60 s each), with room
        # for a worker starting on a loaded machine.
        wait_for_state(app, workflow_id, "finished", timeout=50)
        wait_for_state(app, caught_id, "finished", timeout=50)
        caught = execution_rows(app, caught_id)
        assert [(r["step_name"], r["state"], r["outcome"]) for r in caught] == [
            ("swallowing", "skipped", "skipped"),
            ("after", "completed", "success"),
        ]
        assert caught[0]["error_class_name"] == "flask_geneva.exceptions.StepTimeout"
        assert caught[0]["error_message"] == (
            "step 'swallowing' ran longer than its timeout of 3 s: Celery's soft "
            "time limit interrupted it and the body went on (it caught the "
            "interruption), so its outcome is not used"
        )
        rows = execution_rows(app, workflow_id)
        assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
            ("slow", "skipped", "skipped"),
            ("after", "completed", "success"),
        ]
        assert rows[0]["error_class_name"] == "flask_geneva.exceptions.StepTimeout"
        assert rows[0]["error_message"] == (
            "step 'slow' ran longer than its timeout of 3 s: Celery's soft time "
            "limit interrupted it"
        )
        assert "time.sleep(60)" in rows[0]["error_backtrace"]
    finally:
        dispose(app)


def test_a_step_killed_at_its_hard_limit_is_recovered_through_its_policy(
    start_worker, broker_url, worker_database_url, tmp_path, monkeypatch
):
    """A body that swallows the soft limit is killed at the hard limit (3 s + 1 s
    grace); the dispatcher recovers it once the child's heartbeats stop, records
    StepTimeout and applies the policy: one reattempt (killed again), then the
    terminal skip, and the workflow finishes: no endless recovery loop (R-STO-20,
    R-STO-21, R-WRK-06, R-CNT-01)."""
    for variable, seconds in (
        ("WORKER_HEARTBEAT_INTERVAL", "0.5"),
        ("WORKER_DEAD_AFTER", "1"),
        ("DISPATCH_INTERVAL", "1"),
        ("STEP_TIMEOUT_GRACE", "1"),
    ):
        monkeypatch.setenv(f"GENEVA_TEST_{variable}", seconds)
    app = worker_test_app(broker_url, worker_database_url)
    try:
        workflow_id, _ = create_workflow(app, WorkerHardLimit, "hard@example.com")
        start_worker(
            "--pool=prefork",
            "--concurrency=2",
            "--include",
            "tests.worker.test_step_timeout_worker",
            "--beat",
            f"--schedule={tmp_path / 'beat-schedule'}",
        )
        wait_for_state(app, workflow_id, "finished", timeout=120)
        rows = execution_rows(app, workflow_id)
        assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
            ("hang", "completed", "reattempted"),
            ("hang", "skipped", "skipped"),
            ("after", "completed", "success"),
        ]
        # The reattempted run has its error in the metadata only (R-SE-21).
        assert rows[0]["error_class_name"] is None
        assert rows[1]["error_class_name"] == STEP_TIMEOUT
        message = rows[1]["error_message"]
        assert message.startswith("step 'hang' ran past its timeout of 3 s")
        assert "recovered by the dispatcher" in message
    finally:
        dispose(app)
