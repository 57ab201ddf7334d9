"""A real prefork worker interrupts a step at its timeout (R-STO-03, R-STO-10, R-STO-13).

Celery's soft time limit, published with the step's task, raises
``SoftTimeLimitExceeded`` in the sleeping body; flask_geneva turns it into
``StepTimeout``, which the step's policy (skip) handles, and the next step runs.
The test workers use the solo pool, which cannot interrupt a task: this one
starts a prefork worker.
"""

from __future__ import annotations

from tests.support.worker_harness import create_workflow
from tests.support.worker_harness import dispose
from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import wait_for_state
from tests.support.worker_harness import worker_test_app


def test_a_prefork_worker_interrupts_a_step_at_its_timeout(
    start_worker, broker_url, worker_database_url
):
    """A body sleeping 20 s with a 1-second timeout is interrupted by Celery's soft
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
        # Well before the sleeps would have ended on their own (20 s each).
        wait_for_state(app, workflow_id, "finished", timeout=15)
        wait_for_state(app, caught_id, "finished", timeout=15)
        caught = execution_rows(app, caught_id)
        assert [(r["step_name"], r["state"], r["outcome"]) for r in caught] == [
            ("swallowing", "skipped", "skipped"),
            ("after", "completed", "success"),
        ]
        assert caught[0]["error_class_name"] == "flask_geneva.exceptions.StepTimeout"
        assert caught[0]["error_message"] == (
            "step 'swallowing' ran longer than its timeout of 1 s: Celery's soft "
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
            "step 'slow' ran longer than its timeout of 1 s: Celery's soft time "
            "limit interrupted it"
        )
        assert "time.sleep(20)" in rows[0]["error_backtrace"]
    finally:
        dispose(app)
