"""Two housekeeping runs at once neither deadlock nor stop early (R-HK-12, R-HK-13, issue 12).

Two real processes run ``run_housekeeping()`` against the same database at the same
moment (they wait for a go file), over thousands of eligible workflows and small
batches, so that their cleanup passes overlap. The shared harness
(``tests/support/worker_harness.py``) starts and stops them.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.db.cleanup_lock import cleanup_lock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.cleanup_process import RETENTION
from tests.support.worker_harness import processes_fixture  # noqa: F401 - "processes"
from tests.support.worker_harness import python_module
from tests.support.worker_harness import wait_for_files

PROCESS_MODULE = "tests.support.cleanup_process"
ELIGIBLE = 3000  # workflows; each has EXECUTIONS_EACH executions
EXECUTIONS_EACH = 2
KEPT = 50  # recent finished and old ongoing workflows, which stay
BATCH_SIZE = 25
PROCESSES = 2
#: Longest wait for the processes to get ready and to finish, in seconds.
PROCESS_TIMEOUT = 150


@pytest.fixture
def app_config() -> dict[str, Any]:
    return {"GENEVA_DELETE_COMPLETED_WORKFLOWS_AFTER": RETENTION}


def _insert_workflows(state: str, transitioned_at: Any, count: int) -> list[Any]:
    """Insert ``count`` workflows of a unique type with two completed executions each."""
    workflows = geneva.Workflow.__table__
    executions = geneva.StepExecution.__table__
    kind = f"HkConcurrent_{state}_{transitioned_at:%Y%m%d}"
    db.session.execute(
        sa.insert(workflows),
        [
            {"type": kind, "state": state, "transitioned_at": transitioned_at}
            for _ in range(count)
        ],
    )
    ids = list(
        db.session.scalars(sa.select(workflows.c.id).where(workflows.c.type == kind))
    )
    db.session.execute(
        sa.insert(executions),
        [
            {
                "workflow_id": workflow_id,
                "step_name": f"step_{n}",
                "state": "completed",
                "scheduled_for": transitioned_at,
            }
            for workflow_id in ids
            for n in range(EXECUTIONS_EACH)
        ],
    )
    db.session.commit()
    return ids


def _remaining(ids: list[Any]) -> tuple[int, int]:
    """Stored (workflows, executions) among ``ids`` and their executions."""
    workflows = geneva.Workflow.__table__
    executions = geneva.StepExecution.__table__
    with db.engine.connect() as connection:
        counts = [
            connection.scalar(
                sa.select(sa.func.count()).select_from(table).where(column.in_(ids))
            )
            for table, column in (
                (workflows, workflows.c.id),
                (executions, executions.c.workflow_id),
            )
        ]
    return int(counts[0]), int(counts[1])


def test_two_concurrent_runs_delete_every_eligible_row_without_deadlock(
    app, tmp_path, processes
):
    """Two run_housekeeping() processes started together: both exit 0 without a deadlock, every eligible workflow and execution is gone, each deleted once, the kept rows stay (R-HK-12, R-HK-13)."""
    now = clock.now()
    old = now - RETENTION - timedelta(days=400)
    eligible = _insert_workflows("finished", old, ELIGIBLE // 2)
    eligible += _insert_workflows("canceled", old - timedelta(days=1), ELIGIBLE // 2)
    kept = _insert_workflows("finished", now - timedelta(days=1), KEPT)
    kept += _insert_workflows("paused", old, KEPT)
    db.session.remove()

    go_file = tmp_path / "go"
    database_url = app.config["SQLALCHEMY_DATABASE_URI"]
    started = [
        processes.start(
            python_module(PROCESS_MODULE, database_url, str(BATCH_SIZE), str(go_file)),
            name=f"cleanup-{n}",
            split_output=True,
        )
        for n in range(PROCESSES)
    ]
    # Both get ready (a process dying at start-up fails the wait at once).
    wait_for_files(
        tmp_path,
        "go.*.ready",
        count=PROCESSES,
        timeout=PROCESS_TIMEOUT,
        interval=0.05,
        running=started,
    )
    go_file.touch()
    for process in started:
        process.wait(timeout=PROCESS_TIMEOUT)

    errors = [(tmp_path / f"cleanup-{n}.err").read_text() for n in range(PROCESSES)]
    assert [p.returncode for p in started] == [0] * PROCESSES, errors
    assert not any("deadlock" in text.lower() for text in errors), errors
    assert _remaining(eligible) == (0, 0)
    assert _remaining(kept) == (2 * KEPT, 2 * KEPT * EXECUTIONS_EACH)
    summaries = [
        json.loads((tmp_path / f"cleanup-{n}.out").read_text())
        for n in range(PROCESSES)
    ]
    # Each row deleted once, each by the pass meant for it: an executions pass that
    # ended early leaves its rows to the workflows pass's ON DELETE CASCADE, which
    # no summary counts.
    assert sum(s["workflows_cleaned_up"] for s in summaries) == ELIGIBLE
    assert (
        sum(s["step_executions_cleaned_up"] for s in summaries)
        == ELIGIBLE * EXECUTIONS_EACH
    )


@pytest.mark.backends("postgresql", "mysql")
def test_a_run_that_finds_the_cleanup_lock_taken_skips_cleanup_quietly(app, caplog):
    """While another run holds the cleanup lock, run_housekeeping() deletes nothing, logs why and returns; once the lock is free it deletes every eligible row (R-HK-13)."""
    old = clock.now() - RETENTION - timedelta(days=400)
    eligible = _insert_workflows("finished", old, 30)
    db.session.remove()
    with cleanup_lock(db.session, geneva.Workflow) as holding:
        assert holding
        with caplog.at_level(logging.INFO, logger="flask_geneva.housekeeping"):
            summary = run_housekeeping()
        assert summary["workflows_cleaned_up"] == 0
        assert summary["step_executions_cleaned_up"] == 0
        assert _remaining(eligible) == (30, 30 * EXECUTIONS_EACH)
        assert "cleanup skipped: another housekeeping run is cleaning up" in caplog.text
    summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 30
    assert summary["step_executions_cleaned_up"] == 30 * EXECUTIONS_EACH
    assert _remaining(eligible) == (0, 0)
