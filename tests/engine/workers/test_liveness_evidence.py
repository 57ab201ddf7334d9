"""A live worker is never judged dead by an outage or a clock (R-WRK-14, R-WRK-15).

The worker rows are written here with plain SQL and the real current time (no
frozen clock), the way a worker wrote them before the outage or with its own
clock; the judging side's Python clock is moved with :func:`clock.frozen`.
"""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.engine.workers import health as worker_health
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import CountingOneStep
from tests.support.workers import DEAD_AFTER
from tests.support.workers import heartbeat_settings  # noqa: F401 - "app_config"
from tests.support.workers import insert_worker
from tests.support.workers import running_on
from tests.support.workers import states
from tests.support.workers import workers_table
from tests.support.workflow import update_execution


def _heartbeat_at(worker_id, last_heartbeat_at):
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(workers_table())
            .where(workers_table().c.id == worker_id)
            .values(last_heartbeat_at=last_heartbeat_at)
        )


def _running_on(worker_id):
    return running_on(CountingOneStep, worker_id)


_states = states


def test_an_outage_longer_than_dead_after_recovers_no_live_worker(app):
    """After a database outage longer than GENEVA_WORKER_DEAD_AFTER every worker's
    heartbeat is stale, yet none is dead: no worker heartbeat since, so the
    housekeeping and dispatcher runs recover nothing, and status warns that
    recovery is suspended. Once one worker heartbeats again, a worker that stays
    silent is dead and only its execution is recovered (R-WRK-14)."""
    outage_began = datetime.now(UTC) - 3 * DEAD_AFTER
    first = insert_worker(outage_began)
    second = insert_worker(outage_began - timedelta(seconds=5))
    on_first, on_second = _running_on(first), _running_on(second)

    assert run_housekeeping()["stuck_in_progress_recovered"] == 0
    assert geneva.dispatch_due() == 0
    assert _states(on_first, on_second) == ("performing", "performing")
    overview = worker_health.worker_overview(
        db.session, config=current_context().settings
    )
    assert (overview["alive"], overview["dead"], overview["abandoned_executions"]) == (
        2,
        0,
        0,
    )
    assert overview["warning"].startswith("no worker has heartbeat for ")
    assert (
        "recovery of abandoned executions is suspended until one does"
        in (overview["warning"])
    )
    db.session.rollback()
    status = app.test_cli_runner().invoke(args=["geneva", "status"])
    assert "WARNING: no worker has heartbeat for " in status.output

    # The first worker is back: the second, silent since before it, is dead.
    _heartbeat_at(first, datetime.now(UTC))
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert _states(on_first, on_second) == ("performing", "ready")
    overview = worker_health.worker_overview(
        db.session, config=current_context().settings
    )
    assert overview["warning"] is None


def test_an_empty_registry_recovers_no_execution_of_a_gone_worker(app):
    """Without any worker row there is no evidence that workers heartbeat: an
    execution naming a worker missing from the registry is left alone; once a
    worker heartbeats it is recovered (R-WRK-14)."""
    orphan = _running_on(str(uuid.uuid4()))
    assert run_housekeeping()["stuck_in_progress_recovered"] == 0
    assert _states(orphan) == ("performing",)
    insert_worker(datetime.now(UTC))
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert _states(orphan) == ("ready",)


def test_a_judge_whose_clock_runs_ahead_sees_live_workers_alive(app):
    """Liveness is judged with the database's clock: a housekeeping host whose
    clock runs a day ahead still sees a worker that just heartbeat as alive,
    recovers none of its executions and refuses an operator's recover()
    (R-WRK-15)."""
    from flask_geneva import InvalidStateError

    live = insert_worker(datetime.now(UTC))
    workflow = _running_on(live)
    with clock.frozen(datetime.now(UTC) + timedelta(days=1)):
        overview = worker_health.worker_overview(
            db.session, config=current_context().settings
        )
        assert (overview["alive"], overview["dead"]) == (1, 0)
        assert run_housekeeping()["stuck_in_progress_recovered"] == 0
        with pytest.raises(InvalidStateError, match=f"its worker {live} is alive"):
            workflow.recover()
    assert _states(workflow) == ("performing",)


def test_a_worker_whose_clock_lags_writes_fresh_heartbeats(app):
    """A worker writes its heartbeat with the database's clock, not its own: one
    whose clock lags a day behind its peers is not dead to them (R-WRK-15)."""
    peer = insert_worker(datetime.now(UTC))
    lagging = _running_on(None)
    with clock.frozen(datetime.now(UTC) - timedelta(days=1)):
        registration = worker_registry.register_worker(current_context())
        try:
            assert registration is not None
            registration.heartbeat()
            db.session.rollback()
            execution_id = lagging.current_execution.id
            update_execution(execution_id, worker_id=registration.identity.worker_id)
        finally:
            db.session.rollback()
    try:
        beat = db.session.scalar(
            sa.select(workers_table().c.last_heartbeat_at).where(
                workers_table().c.id == registration.identity.worker_id
            )
        )
        db.session.rollback()
        assert beat > datetime.now(UTC) - DEAD_AFTER
        _heartbeat_at(peer, datetime.now(UTC))
        assert run_housekeeping()["stuck_in_progress_recovered"] == 0
        assert _states(lagging) == ("performing",)
    finally:
        db.session.rollback()
        worker_registry.deregister_workers()
