"""The overview's health panel: the dispatcher's and housekeeping's last runs and
the warnings about them (R-HK-42, R-HK-43, R-HK-45)."""

from __future__ import annotations

import html
import re

import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.ext.app_state import current_context
from tests.apps.basic import db
from tests.apps.basic import geneva

RUNS_TABLE = "geneva_drive_maintenance_runs"


def overview(client) -> str:
    response = client.get("/geneva/")
    assert response.status_code == 200
    return html.unescape(response.get_data(as_text=True))


def _move_dispatcher_start(by):
    table = db.metadata.tables[RUNS_TABLE]
    db.session.remove()
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.name == "dispatcher")
            .values(started_at=clock.now() - by)
        )


def test_the_overview_shows_the_last_runs(client):
    """Each job's last run with its outcome, counts and process; no warning while
    both ran recently (R-HK-42)."""
    geneva.dispatch_due()
    run_housekeeping()
    db.session.remove()
    text = overview(client)
    assert '<tr data-job="dispatcher">' in text
    assert '<tr data-job="housekeeping">' in text
    assert "published 0, recovered 0" in text
    assert "stuck in progress recovered 0" in text
    assert "geneva-health-warning" not in text


def test_the_overview_warns_when_the_dispatcher_has_not_run(client):
    """Two dispatch intervals without a run: a warning at the top of the overview
    naming the setting (R-HK-43)."""
    geneva.dispatch_due()
    run_housekeeping()
    interval = current_context().settings.dispatch_interval
    _move_dispatcher_start(5 * interval)
    text = overview(client)
    assert 'class="alert alert-warning geneva-health-warning"' in text
    assert "The dispatcher has not run for 2 min 3" in text
    assert "more than two intervals (GENEVA_DISPATCH_INTERVAL = 30 s)" in text


def test_the_overview_says_how_to_install_the_unit(client, without_unit):
    """Without the add_maintenance_runs table the panel names the unit; the page
    works (R-HK-45)."""
    without_unit("add_maintenance_runs")
    text = overview(client)
    assert "When the dispatcher and housekeeping last ran is not recorded" in text
    assert "add_maintenance_runs" in text
    assert "geneva-health-warning" not in text


def test_the_overview_warns_while_no_worker_heartbeats(client):
    """When no worker has heartbeat for GENEVA_WORKER_DEAD_AFTER (a database
    outage, every worker stopped), the overview says that recovery of abandoned
    executions is suspended; a fresh heartbeat removes the warning (R-WRK-14)."""
    import uuid
    from datetime import timedelta

    from flask_geneva.db import workers as worker_rows

    workers = db.metadata.tables["geneva_drive_workers"]
    worker_id = str(uuid.uuid4())
    identity = worker_rows.WorkerIdentity(worker_id, "h", 1, None, (), "t")
    db.session.remove()
    with db.engine.begin() as connection:
        worker_rows.insert_worker(connection, workers, identity)
        worker_rows.age_heartbeat(connection, workers, worker_id, timedelta(hours=1))
    text = overview(client)
    assert re.search(r"no worker has heartbeat for 36\d\d s", text)
    assert "recovery of abandoned executions is suspended until one does" in text
    db.session.remove()
    with db.engine.begin() as connection:
        worker_rows.touch_worker(connection, workers, worker_id)
    assert "no worker has heartbeat" not in overview(client)


def test_the_overview_warns_about_a_worker_with_a_longer_dead_after(client):
    """A worker that registered with a longer GENEVA_WORKER_DEAD_AFTER than this
    process's is named at the top of the overview with both values (R-WRK-17);
    one with the same value is not."""
    import uuid

    from flask_geneva.db import workers as worker_rows

    workers = db.metadata.tables["geneva_drive_workers"]
    configured = current_context().settings.worker_dead_after
    longer, same = str(uuid.uuid4()), str(uuid.uuid4())
    db.session.remove()
    with db.engine.begin() as connection:
        for worker_id, dead_after in ((longer, 3 * configured), (same, configured)):
            identity = worker_rows.WorkerIdentity(
                worker_id, "h", 1, "celery@h", (), "t", dead_after=dead_after
            )
            worker_rows.insert_worker(connection, workers, identity)
    text = overview(client)
    own = (3 * configured).total_seconds()
    assert 'class="alert alert-warning geneva-health-warning geneva-dead-after' in text
    assert (
        f"worker {longer} (celery@h) heartbeats with dead-after {own:g} s, this "
        f"process uses {configured.total_seconds():g} s: its executions are "
        f"judged with {own:g} s"
    ) in text
    assert f"worker {same}" not in text
