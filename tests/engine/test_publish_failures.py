"""A broker that cannot be reached never fails the caller; the row is the outbox (issue 14).

The Celery app here publishes to a Redis URL whose port nothing listens on (a real
connection refused, no mock): every publication fails after its row was committed.
``create()``, an operator's ``resume()``, the executor, the dispatcher and
housekeeping must all return normally, leave the session usable and hand the
execution back to the dispatcher (``job_id = "geneva:deferred"``, R-DSP-02).
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery

import flask_geneva
from flask_geneva.core.publications import DEFERRED_JOB_ID
from flask_geneva.engine import outbox
from flask_geneva.ext.operations import dispatch_due
from flask_geneva.ext.operations import run_housekeeping
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingTwoSteps


class GaugeRecorder:
    """A GENEVA_METRICS hook that keeps what it was sent."""

    def __init__(self) -> None:
        self.gauges: list[tuple[str, float, Any]] = []

    def gauge(self, name: str, value: float, tags: Any) -> None:
        self.gauges.append((name, value, tags))


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def app_config() -> dict[str, Any]:
    return {
        "GENEVA_ENQUEUE_AFTER_COMMIT": True,
        "GENEVA_PUBLISH_TIMEOUT": 3,
        "GENEVA_METRICS": GaugeRecorder(),
    }


@pytest.fixture
def unreachable_celery(app) -> Celery:
    """A Celery app whose broker port has no listener, given to the app's Geneva."""
    celery = Celery("unreachable-broker")
    celery.conf.update(
        flask_geneva.celery_defaults(publish_timeout_seconds=3),
        broker_url=f"redis://127.0.0.1:{_unused_port()}/0",
    )
    app.extensions["geneva"].celery = celery
    app.config["GENEVA_TASK_BACKEND"] = "celery"
    geneva.reload_settings(app)
    return celery


def _executions(workflow_id: Any) -> list[Any]:
    table = geneva.StepExecution.__table__
    return list(
        db.session.execute(
            sa.select(table)
            .where(table.c.workflow_id == workflow_id)
            .order_by(table.c.id)
        ).mappings()
    )


def _new_hero() -> Any:
    hero = User(email="outbox@example.com")
    db.session.add(hero)
    db.session.commit()
    return hero


@pytest.mark.parametrize("after_commit", [True, False], ids=["deferred", "inline"])
def test_create_returns_and_hands_the_row_to_the_dispatcher_when_the_broker_is_down(
    app, unreachable_celery, after_commit
):
    """create() commits, returns and leaves the session usable; the unpublished execution waits for the dispatcher (issue 14, R-DSP-02)."""
    app.config["GENEVA_ENQUEUE_AFTER_COMMIT"] = after_commit
    geneva.reload_settings(app)
    failures_before = outbox.publish_failures()
    workflows = []
    for _ in range(3):
        hero = _new_hero()
        workflows.append(CountingTwoSteps.create(hero=hero))
        # The session is usable at once: no "session is in 'committed' state".
        assert db.session.scalar(sa.select(sa.func.count(User.id))) >= 1
    db.session.commit()
    for workflow in workflows:
        [execution] = _executions(workflow.id)
        assert execution["state"] == "scheduled"
        assert execution["job_id"] == DEFERRED_JOB_ID
    assert outbox.publish_failures() == failures_before + 3
    gauges = app.extensions["geneva"].config.metrics.gauges
    assert gauges[-1] == (
        "geneva_drive.publish_failures",
        failures_before + 3,
        None,
    )


def test_dispatcher_keeps_every_row_deferred_while_the_broker_is_down(
    app, unreachable_celery
):
    """dispatch_due() publishes nothing, raises nothing and strands no row with an unsent task id (issue 14 point 4, R-DSP-02)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    geneva.reload_settings(app)
    workflow_ids = [CountingTwoSteps.create(hero=_new_hero()).id for _ in range(5)]
    assert dispatch_due() == 0
    db.session.commit()
    for workflow_id in workflow_ids:
        [execution] = _executions(workflow_id)
        assert execution["job_id"] == DEFERRED_JOB_ID


def test_housekeeping_counts_every_recovered_row_while_the_broker_is_down(
    app, unreachable_celery
):
    """Stuck scheduled rows are all recovered and counted; each successor waits for the dispatcher (R-HK-22, issue 14 point 3)."""
    workflow_ids = [CountingTwoSteps.create(hero=_new_hero()).id for _ in range(4)]
    table = geneva.StepExecution.__table__
    db.session.execute(
        sa.update(table)
        .where(table.c.workflow_id.in_(workflow_ids))
        .values(
            job_id="lost-message",
            scheduled_for=flask_geneva.core.clock.now() - timedelta(hours=1),
        )
    )
    db.session.commit()
    summary = run_housekeeping()
    assert summary["stuck_scheduled_recovered"] == 4
    for workflow_id in workflow_ids:
        recovered, successor = _executions(workflow_id)
        assert recovered["outcome"] == "recovered"
        assert successor["state"] == "scheduled"
        assert successor["job_id"] == DEFERRED_JOB_ID


def test_executor_finishes_its_step_when_the_next_publication_fails(
    app, unreachable_celery
):
    """The step's result is committed and the task does not fail: the next step waits for the dispatcher (issue 14 point 3)."""
    # The next step must be published, not continued inline (R-EXE-72).
    app.config["GENEVA_INLINE_CONTINUATION_MAX_STEPS"] = 0
    hero = _new_hero()
    hero_id = hero.id
    workflow = CountingTwoSteps.create(hero=hero)
    workflow_id = workflow.id
    [first] = _executions(workflow_id)
    db.session.remove()
    perform_step_execution(first["id"])
    first_row, second_row = _executions(workflow_id)
    assert first_row["state"] == "completed"
    assert first_row["outcome"] == "success"
    assert second_row["step_name"] == "second"
    assert second_row["state"] == "scheduled"
    assert second_row["job_id"] == DEFERRED_JOB_ID
    assert db.session.get(User, hero_id).counter == 1


def test_resume_returns_when_its_publication_fails(app, unreachable_celery):
    """An operator's resume() commits and returns; the preserved execution waits for the dispatcher (issue 14)."""
    workflow = CountingTwoSteps.create(hero=_new_hero())
    workflow.pause()
    workflow.resume()
    assert workflow.state == "ready"
    [execution] = _executions(workflow.id)
    assert execution["state"] == "scheduled"
    assert execution["job_id"] == DEFERRED_JOB_ID


def test_housekeeping_goes_on_when_a_commit_hook_raises(
    app, unreachable_celery, caplog
):
    """An error after a row's commit is logged as itself; the failing rollback never masks it or stops the run, and the committed row is counted (R-HK-22, issue 14 point 3)."""
    from sqlalchemy import event

    workflow_ids = [CountingTwoSteps.create(hero=_new_hero()).id for _ in range(3)]
    table = geneva.StepExecution.__table__
    db.session.execute(
        sa.update(table)
        .where(table.c.workflow_id.in_(workflow_ids))
        .values(scheduled_for=flask_geneva.core.clock.now() - timedelta(hours=1))
    )
    db.session.commit()
    session = db.session()
    inserted: list[int] = []
    raised: list[int] = []

    def note_insert(
        _conn: Any, _cursor: Any, statement: str, *_args: Any, **_kwargs: Any
    ) -> None:
        # Geneva inserts executions with Core: no ORM flush event (R-DM-41).
        if statement.lstrip().upper().startswith("INSERT INTO GENEVA_DRIVE_STEP"):
            inserted.append(1)

    def fail_first_recovery_commit(_session: Any) -> None:
        # Only a recovery inserts a row here; the first such commit fails.
        if inserted and not raised:
            raised.append(1)
            raise RuntimeError("a host's after_commit hook failed")

    event.listen(db.engine, "before_cursor_execute", note_insert)
    event.listen(session, "after_commit", fail_first_recovery_commit)
    try:
        summary = run_housekeeping(session)
    finally:
        event.remove(session, "after_commit", fail_first_recovery_commit)
        event.remove(db.engine, "before_cursor_execute", note_insert)
    assert raised == [1]
    # Every row was committed, the first one before its hook raised.
    assert summary["stuck_scheduled_recovered"] == 3
    failures = [
        record
        for record in caplog.records
        if record.getMessage().startswith("Failed to recover step execution")
    ]
    assert [record.getMessage().split(": ", 1)[1] for record in failures] == [
        "RuntimeError: a host's after_commit hook failed"
    ]
    assert db.session.scalar(sa.select(sa.func.count(User.id))) == 3
