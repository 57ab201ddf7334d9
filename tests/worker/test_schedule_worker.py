"""A schedule fires through the beat-run dispatcher of a real worker (SPEC §26,
R-SCHED-11, R-SCHED-20, R-SCHED-22).

A real ``celery worker`` with embedded beat (the dispatcher every second) knows
the schedule ``* * * * *`` of ``tests/worker/schedule_worker.py``. Waiting for
the next minute would take up to a minute, so the test stores the schedule's
row as a dispatcher that first saw it a minute ago would have left it: its
``fire_after`` just before the latest minute boundary. The worker's first
dispatcher run then finds that boundary due, fires it once and fans out one
workflow per hero, which the worker runs.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import sqlalchemy as sa

from tests.apps import basic
from tests.support.worker_harness import dispose
from tests.support.worker_harness import reader
from tests.support.worker_harness import wait_for
from tests.support.worker_harness import worker_test_app

# As tests/worker/schedule_worker.py declares them (not imported here: see there).
SCHEDULE_NAME = "worker-every-minute"
HERO_PREFIX = "scheduled-worker-"
WORKFLOW_TYPE = "ScheduledWorkerGreeting"
HEROES = 2


def _utc(value):
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _fires(app):
    table = basic.db.metadata.tables["geneva_drive_schedule_fires"]
    with reader(app) as connection:
        return (
            connection.execute(
                sa.select(table)
                .where(table.c.schedule_name == SCHEDULE_NAME)
                .order_by(table.c.fire_at)
            )
            .mappings()
            .all()
        )


def _workflows(app):
    table = basic.geneva.Workflow.__table__
    with reader(app) as connection:
        return (
            connection.execute(
                sa.select(table.c.state, table.c.hero_id).where(
                    table.c.type == WORKFLOW_TYPE
                )
            )
            .mappings()
            .all()
        )


def _counters(app):
    users = basic.User.__table__
    with reader(app) as connection:
        return (
            connection.execute(
                sa.select(users.c.counter)
                .where(users.c.email.like(f"{HERO_PREFIX}%"))
                .order_by(users.c.id)
            )
            .scalars()
            .all()
        )


def _all_done(app):
    fires = _fires(app)
    workflows = _workflows(app)
    return (
        bool(fires)
        and all(fire["state"] == "done" for fire in fires)
        and len(workflows) == HEROES * len(fires)
        and all(workflow["state"] == "finished" for workflow in workflows)
    )


def test_the_beat_run_dispatcher_fires_a_due_schedule_and_the_worker_runs_it(
    start_worker, broker_url, worker_database_url, tmp_path, monkeypatch
):
    """The due minute fires once, as a cron fire, fanning out one workflow per
    hero; the worker runs them to the end (R-SCHED-20, R-SCHED-21, R-SCHED-22,
    R-SCHED-23)."""
    monkeypatch.setenv("GENEVA_TEST_DISPATCH_INTERVAL", "1")
    app = worker_test_app(broker_url, worker_database_url)
    try:
        with app.app_context():
            basic.db.session.add_all(
                basic.User(email=f"{HERO_PREFIX}{index}@example.com")
                for index in range(HEROES)
            )
            basic.db.session.commit()
            basic.db.session.remove()
        now = datetime.now(UTC)
        boundary = now.replace(second=0, microsecond=0)
        schedules = basic.db.metadata.tables["geneva_drive_schedules"]
        with app.app_context(), basic.db.engine.begin() as connection:
            connection.execute(
                sa.insert(schedules).values(
                    name=SCHEDULE_NAME,
                    paused=False,
                    fire_after=boundary - timedelta(seconds=1),
                    updated_at=now,
                )
            )
        start_worker(
            "--include",
            "tests.worker.schedule_worker",
            "--beat",
            f"--schedule={tmp_path / 'beat-schedule'}",
        )
        wait_for(lambda: _all_done(app), timeout=30)
        fires = _fires(app)
        first = fires[0]
        # The boundary that was due when the worker's dispatcher first ran (a
        # later minute only if one passed meanwhile, R-SCHED-23).
        assert _utc(first["fire_at"]) >= boundary
        assert _utc(first["fire_at"]).second == 0
        assert (first["kind"], first["state"], first["error"]) == ("cron", "done", None)
        assert (first["started"], first["skipped"]) == (HEROES, 0)
        # Each fire time fired once; each hero's workflow ran once per fire.
        assert len({fire["fire_at"] for fire in fires}) == len(fires)
        assert _counters(app) == [len(fires)] * HEROES
        with reader(app) as connection:
            row = (
                connection.execute(
                    sa.select(schedules).where(schedules.c.name == SCHEDULE_NAME)
                )
                .mappings()
                .one()
            )
        assert row["last_outcome"] == "done"
        assert _utc(row["fire_after"]) == _utc(fires[-1]["fire_at"])
    finally:
        dispose(app)
