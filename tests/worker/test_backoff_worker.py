"""A real worker runs each reattempt at the time its backoff computed (R-POL-51..53, R-PDR-07)."""

from __future__ import annotations

from datetime import UTC
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva.policies.backoff import jitter_fraction
from flask_geneva.policies.backoff import jitter_key
from tests.worker.conftest import create_workflow
from tests.worker.conftest import wait_for_state
from tests.worker.conftest import worker_test_app


def as_utc(value):
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def test_worker_waits_the_exponential_backoff_between_reattempts(
    start_worker, broker_url, worker_database_url
):
    """Reattempts are due 1 s and 2 s (+ jitter) after each failure and do not start earlier; then the cap pauses (R-POL-51..53, R-PDR-07)."""
    from tests.apps import basic
    from tests.apps import worker_app

    app = worker_test_app(broker_url, worker_database_url)
    workflow_id = create_workflow(
        app, worker_app.WorkerBackoffRetries, "backoff@example.com"
    )[0]

    start_worker()

    wait_for_state(app, workflow_id, "paused")
    with app.app_context():
        table = basic.geneva.StepExecution.__table__
        with basic.db.engine.connect() as connection:
            rows = (
                connection.execute(
                    sa.select(table)
                    .where(table.c.workflow_id == workflow_id)
                    .order_by(table.c.created_at, table.c.id)
                )
                .mappings()
                .all()
            )
        for engine in basic.db.engines.values():
            engine.dispose()
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
