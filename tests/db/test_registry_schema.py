"""The worker registry install unit and life without it (R-WRK-01, R-WRK-08)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.support.common_workflows import CountingTwoSteps
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import make_user


@pytest.fixture
def without_registry(without_unit):
    without_unit("add_worker_registry")


def test_the_registry_is_detected_when_installed(app):
    """The unit's table and column are detected (R-WRK-01, R-DM-30)."""
    columns = optional_columns(db.session)
    assert columns.worker_registry
    db.session.rollback()
    assert "geneva_drive_workers" in sa.inspect(db.engine).get_table_names()


def test_without_the_unit_workflows_run_and_recovery_uses_age(app, without_registry):
    """Without the worker registry steps run and stuck rows recover by age (R-WRK-08)."""
    columns = optional_columns(db.session)
    assert not columns.worker_registry
    db.session.rollback()
    user = make_user()
    speedrun_workflow(CountingTwoSteps.create(hero=user))
    db.session.refresh(user)
    assert user.counter == 11
    stuck = CountingTwoSteps.create(hero=make_user(email="two@example.com"))
    with clock.frozen(T0):
        make_in_progress(stuck, T0 - timedelta(hours=2))
        summary = run_housekeeping()
    assert summary["stuck_in_progress_recovered"] == 1
    states = db.session.execute(
        sa.text(
            "SELECT state FROM geneva_drive_step_executions "
            "WHERE workflow_id = :id ORDER BY id"
        ),
        {"id": stuck.id},
    ).scalars()
    assert list(states) == ["completed", "scheduled"]


def test_status_says_when_there_is_no_registry(app, without_registry):
    """Without the unit the overview has no workers part (R-WRK-08/09)."""
    from flask_geneva.engine.workers.health import worker_overview
    from flask_geneva.ext.app_state import current_context

    assert worker_overview(db.session, config=current_context().settings) is None
