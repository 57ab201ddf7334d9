"""Each worker is judged with at least its own dead-after (R-WRK-17, R-WRK-14).

The judging process here is configured with ``GENEVA_WORKER_DEAD_AFTER`` 60 s;
worker rows are written with plain SQL and the database's clock, with their own
``dead_after_ms`` (what a worker with other settings recorded at registration).
A fresh worker supplies the evidence that heartbeats get through (R-WRK-14).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.engine.workers import health as worker_health
from flask_geneva.engine.workers import registry as worker_registry
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.support.common_workflows import CountingOneStep
from tests.support.workers import heartbeat_settings  # noqa: F401 - "app_config"
from tests.support.workers import insert_worker
from tests.support.workers import running_on
from tests.support.workers import states
from tests.support.workers import workers_table


def _running_on(worker_id):
    return running_on(CountingOneStep, worker_id)


_states = states


def _overview():
    context = current_context()
    return worker_health.worker_overview(context.session, config=context.settings)


def _alive_by_id():
    return {worker["id"]: worker["alive"] for worker in _overview()["workers"]}


def test_a_worker_with_a_longer_own_dead_after_is_not_judged_dead(app):
    """Silent for 90 s: with its own 120 s the worker is alive for a judge
    configured with 60 s, its step is not recovered (housekeeping, dispatcher,
    status, pruning); a worker without its own value, or with a smaller one,
    is judged with the judge's 60 s and is dead (R-WRK-17)."""
    evidence = insert_worker(timedelta(0))  # the evidence (R-WRK-14)
    longer = insert_worker(timedelta(seconds=90), dead_after_ms=120_000)
    unknown = insert_worker(timedelta(seconds=90))
    shorter = insert_worker(timedelta(seconds=90), dead_after_ms=30_000)
    idle_longer = insert_worker(timedelta(seconds=90), dead_after_ms=120_000)
    idle_unknown = insert_worker(timedelta(seconds=90))
    on_longer, on_unknown, on_shorter = (
        _running_on(longer),
        _running_on(unknown),
        _running_on(shorter),
    )
    overview = _overview()
    assert (overview["alive"], overview["dead"], overview["abandoned_executions"]) == (
        3,
        3,
        2,
    )

    summary = run_housekeeping()

    assert summary["stuck_in_progress_recovered"] == 2
    assert _states(on_longer, on_unknown, on_shorter) == (
        "performing",
        "ready",
        "ready",
    )
    # Pruning (R-WRK-07) keeps the worker alive by its own dead-after.
    assert _alive_by_id() == {evidence: True, longer: True, idle_longer: True}
    assert idle_unknown not in _alive_by_id()


def test_a_worker_silent_for_longer_than_its_own_dead_after_is_dead(app):
    """Its own 120 s passed too: the worker is dead and its step recovered."""
    insert_worker(timedelta(0))
    gone = insert_worker(timedelta(seconds=150), dead_after_ms=120_000)
    workflow = _running_on(gone)

    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    assert _states(workflow) == ("ready",)


def test_the_newest_heartbeat_part_uses_the_rows_own_dead_after(app):
    """Evidence: the newest heartbeat is 70 s after the worker's last one but
    the worker's own dead-after is 120 s, so it is not dead relative to the
    newest heartbeat either, even though both are old by the clock (R-WRK-14,
    R-WRK-17)."""
    insert_worker(timedelta(seconds=200))  # newest: 200 s ago
    own = insert_worker(timedelta(seconds=270), dead_after_ms=120_000)
    workflow = _running_on(own)
    plain = insert_worker(timedelta(seconds=270))
    plain_workflow = _running_on(plain)

    run_housekeeping()

    assert _states(workflow, plain_workflow) == ("performing", "ready")


def test_operator_recovery_refuses_a_worker_alive_by_its_own_dead_after(app):
    """``live_worker_of`` (operator recovery, the admin) names the worker (R-WRK-10)."""
    insert_worker(timedelta(0))
    longer = insert_worker(timedelta(seconds=90), dead_after_ms=120_000)
    workflow = _running_on(longer)
    execution = workflow.current_execution
    live = worker_registry.live_worker_of(
        db.session, execution, config=current_context().settings
    )
    db.session.rollback()
    assert live is not None
    assert live[0] == longer


def test_status_warns_about_a_worker_with_a_longer_dead_after(app):
    """The overview names the worker and both values (R-WRK-17); a worker with
    a smaller or no own value gives no warning."""
    insert_worker(timedelta(0), dead_after_ms=30_000)
    longer = insert_worker(timedelta(0), dead_after_ms=90_000)
    insert_worker(timedelta(0))
    overview = _overview()
    assert overview["dead_after_warnings"] == [
        f"worker {longer} (celery@host) heartbeats with dead-after 90 s, this "
        "process uses 60 s: its executions are judged with 90 s "
        "(GENEVA_WORKER_DEAD_AFTER should be the same in every process)"
    ]
    own = {worker["id"]: worker["dead_after_seconds"] for worker in overview["workers"]}
    assert own[longer] == 90.0
    status = app.test_cli_runner().invoke(args=["geneva", "status"])
    assert status.exit_code == 0, status.output
    assert (
        f"WARNING: worker {longer} (celery@host) heartbeats with dead-after 90 s"
        in status.output
    )
    listed = app.test_cli_runner().invoke(args=["geneva", "status", "--json"])
    assert (
        json.loads(listed.output)["workers"]["dead_after_warnings"]
        == (overview["dead_after_warnings"])
    )


def test_registration_records_the_workers_own_dead_after(app):
    """The registration INSERT writes the worker's GENEVA_WORKER_DEAD_AFTER."""
    registration = worker_registry.register_worker(current_context())
    try:
        with db.engine.connect() as connection:
            recorded = connection.scalar(
                sa.select(workers_table().c.dead_after_ms).where(
                    workers_table().c.id == registration.identity.worker_id
                )
            )
        assert recorded == 60_000
    finally:
        worker_registry.deregister_workers()


@pytest.fixture
def without_the_unit(without_unit):
    without_unit("add_worker_dead_after")


def test_without_the_unit_workers_register_and_are_judged_as_before(
    app, without_the_unit
):
    """Without ``add_worker_dead_after`` the column is detected missing, a
    worker registers without it, and liveness uses the judge's setting
    alone: a worker silent for 90 s is dead (R-WRK-17, R-DM-30)."""
    assert not optional_columns(db.session).worker_dead_after
    db.session.rollback()
    registration = worker_registry.register_worker(current_context())
    try:
        assert registration.registered
        silent = insert_worker(timedelta(seconds=90))
        workflow = _running_on(silent)
        assert run_housekeeping()["stuck_in_progress_recovered"] == 1
        assert _states(workflow) == ("ready",)
        overview = _overview()
        assert overview["dead_after_warnings"] == []
        assert {w["dead_after_seconds"] for w in overview["workers"]} == {None}
    finally:
        worker_registry.deregister_workers()
