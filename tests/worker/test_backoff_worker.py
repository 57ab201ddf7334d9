"""A real worker runs each reattempt at the time its backoff computed (R-POL-51..53, R-PDR-07)."""

from __future__ import annotations

from datetime import UTC
from datetime import timedelta

import pytest

from flask_geneva.policies.backoff import jitter_fraction
from flask_geneva.policies.backoff import jitter_key
from tests.support.worker_harness import execution_rows


def as_utc(value):
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def test_worker_waits_the_exponential_backoff_between_reattempts(run_on_worker):
    """Reattempts are due 1 s and 2 s (+ jitter) after each failure and do not start earlier; then the cap pauses (R-POL-51..53, R-PDR-07)."""
    from tests.apps import worker_app

    app, workflow_id, _ = run_on_worker(
        worker_app.WorkerBackoffRetries, "backoff@example.com", until="paused"
    )
    rows = execution_rows(app, workflow_id)
    assert [(r["state"], r["outcome"]) for r in rows] == [
        ("completed", "reattempted"),
        ("completed", "reattempted"),
        ("failed", "failed"),
    ]
    for attempt in (1, 2):
        failed, following = rows[attempt - 1], rows[attempt]
        decision = failed["metadata"]["policy_decision"]
        plain = 2 ** (attempt - 1)
        fraction = jitter_fraction(jitter_key(workflow_id, "flaky", attempt))
        assert decision["wait_seconds"] == pytest.approx(
            plain * (1 + 0.5 * fraction), abs=1e-6
        )
        assert decision["backoff"] == "exponential backoff"
        due = as_utc(following["scheduled_for"])
        gap = due - as_utc(failed["finished_at"])
        assert abs(gap - timedelta(seconds=decision["wait_seconds"])) < timedelta(
            milliseconds=500
        )
        # The broker held the task until its eta: it did not start early.
        assert as_utc(following["started_at"]) >= due
    assert rows[2]["metadata"]["policy_decision"]["terminal"] is True
