"""A real worker's log for handled step errors (R-EXE-50 amended, R-LOG-06 amended).

With the default ``GENEVA_TASK_RERAISE="unhandled"`` a reattempt the policy chose
is a WARNING line with the policy decision and a successful task; only the
terminal result is an ERROR line and a failed task. Each line names the task once,
through Celery's task log format.
"""

from __future__ import annotations

import re

from tests.support.worker_harness import execution_rows
from tests.support.worker_harness import wait_for

#: A record line of Celery's worker log formats: ``[<time>: <LEVEL>/<process>] ...``.
_RECORD = re.compile(r"^\[[^\]]*: (?P<level>[A-Z]+)/[^\]]*\] (?P<message>.*)$")


def _records(text):
    """The (level, message) of each log record line; traceback lines are skipped."""
    return [
        (match["level"], match["message"])
        for match in map(_RECORD.match, text.splitlines())
        if match
    ]


def test_handled_reattempts_log_warnings_and_do_not_fail_tasks(run_on_worker, tmp_path):
    """Three handled reattempts log WARNING with the decision and succeed; the terminal pause alone logs ERROR and fails its task; no line repeats the task id (R-EXE-50, R-LOG-03, R-LOG-06)."""
    from tests.apps import worker_app

    app, workflow_id, hero_id = run_on_worker(
        worker_app.WorkerHandledRetries, "flaky@example.com", until="paused"
    )
    rows = execution_rows(app, workflow_id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("failed", "failed"),
    ]

    log_path = tmp_path / "worker-0.log"
    last = rows[-1]

    def terminal_task_logged():
        text = log_path.read_text(errors="replace")
        return f"perform_step[{last['job_id']}] raised unexpected" in text

    # The worker logs the task's end just after the commit the test saw.
    wait_for(terminal_task_logged, timeout=20)
    records = _records(log_path.read_text(errors="replace"))
    tags = f"[WorkerHandledRetries id={workflow_id} hero_type=User hero_id={hero_id}]"
    errors = [message for level, message in records if level == "ERROR"]
    assert len(errors) == 2, errors
    assert errors[0] == (
        f"flask_geneva.perform_step[{last['job_id']}]: {tags} "
        f"[execution_id={last['id']} step_name=flaky] encountered WorkerFlakyError: "
        "upstream timed out; exception policy: pause (wait=None, terminal)"
    )
    assert errors[1].startswith(
        f"Task flask_geneva.perform_step[{last['job_id']}] raised unexpected: "
        "WorkerFlakyError('upstream timed out')"
    )
    handled = [
        (level, message)
        for level, message in records
        if "exception policy: reattempt" in message
    ]
    assert handled == [
        (
            "WARNING",
            f"flask_geneva.perform_step[{row['job_id']}]: {tags} "
            f"[execution_id={row['id']} step_name=flaky] encountered WorkerFlakyError: "
            "upstream timed out; exception policy: reattempt (wait=None)",
        )
        for row in rows[:3]
    ]
    succeeded = [
        message
        for level, message in records
        if level == "INFO" and " succeeded in " in message
    ]
    assert [m.split("]")[0] for m in succeeded] == [
        f"Task flask_geneva.perform_step[{row['job_id']}" for row in rows[:3]
    ]
    assert not any("task_id=" in message for _, message in records)
