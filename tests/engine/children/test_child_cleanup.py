"""Cleaning up parents and children (R-CHD-31, R-CHD-32).

R-CHD-32: housekeeping deletes a parent's child counts with the parent; a
child whose parent was deleted keeps its ``parent_workflow_id`` (its
``parent`` reads None) and is deleted like any workflow once it ended. A
canceled parent's counts stay while the dispatcher still has children to
cancel, and the dispatcher cancels them even when the parent row is gone
(R-CHD-31).
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.db.states import CHILD_COUNTS_TABLE
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children import workflows
from tests.engine.children.workflows import Abandoning
from tests.engine.children.workflows import SlowChild
from tests.engine.children.workflows import Summing
from tests.support.housekeeping import RETENTION
from tests.support.housekeeping import T0
from tests.support.housekeeping import retention_settings  # noqa: F401 - "app_config"
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row


def _counts_parents() -> set:
    table = geneva.Workflow.metadata.tables[CHILD_COUNTS_TABLE]
    ids = set(db.session.scalars(sa.select(table.c.parent_workflow_id)))
    db.session.rollback()
    return ids


def _children_of(parent_id) -> list:
    rows = db.session.execute(
        sa.select(geneva.Workflow.__table__).where(
            geneva.Workflow.__table__.c.parent_workflow_id == parent_id
        )
    ).all()
    db.session.rollback()
    return sorted(rows, key=lambda row: row.id)


def test_a_finished_parents_counts_go_with_it(app, geneva_jobs):
    """R-CHD-32: the parent and its counts are deleted together; its ended
    children are deleted by the same rule; none is left behind."""
    workflows.FAN_OUT[:] = ["a@example.com", "b@example.com"]
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    with clock.frozen(T0) as frozen:
        parent_id = Summing.create(hero=heroes[0]).id
        geneva_jobs.drain()
        assert workflow_row(parent_id)["state"] == "finished"
        child_ids = [child.id for child in _children_of(parent_id)]
        assert len(child_ids) == 2
        assert _counts_parents() == {parent_id}
        frozen.advance(RETENTION + timedelta(days=1))
        summary = run_housekeeping()
    assert summary["workflows_cleaned_up"] == 3
    assert workflow_row(parent_id) is None
    assert [workflow_row(child_id) for child_id in child_ids] == [None, None]
    assert _counts_parents() == set()


def test_a_child_outlives_its_deleted_parent(app, geneva_jobs):
    """R-CHD-32: a child still running when its parent is deleted keeps its
    link, reads no parent, and is cleaned up once it ended."""
    workflows.FAN_OUT[:] = ["kept@example.com", "canceled@example.com"]
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    with clock.frozen(T0) as frozen:
        parent = Abandoning.create(hero=heroes[0])
        parent_id = parent.id
        geneva_jobs.drain()  # the children wait a day for their second step
        kept, canceled = _children_of(parent_id)
        Abandoning.get(parent_id).cancel()
        assert _counts_parents() == {parent_id}
        frozen.advance(RETENTION + timedelta(days=1))
        run_housekeeping()
        # Marked for the dispatcher: the counts stay, the parent row goes.
        assert workflow_row(parent_id) is None
        assert _counts_parents() == {parent_id}
        geneva.dispatch_due()
        assert workflow_row(canceled.id)["state"] == "canceled"
        assert workflow_row(kept.id)["state"] == "ready"  # parent_close="abandon"
        assert SlowChild.get(kept.id).parent is None
        assert workflow_row(kept.id)["parent_workflow_id"] == parent_id
        run_housekeeping()
        assert _counts_parents() == set()
        # The abandoned child runs on and is cleaned up like any workflow.
        geneva_jobs.drain(respect_eta=False)
        assert workflow_row(kept.id)["state"] == "finished"
        frozen.advance(RETENTION + timedelta(days=1))
        run_housekeeping()
    assert workflow_row(kept.id) is None
    assert workflow_row(canceled.id) is None


def test_a_parent_deleted_by_the_application_leaves_nothing_behind(app, geneva_jobs):
    """R-CHD-32: ``session.delete(parent)`` leaves its counts row, which the
    next housekeeping deletes; its children read no parent and are cleaned up
    like any workflow."""
    workflows.FAN_OUT[:] = ["a@example.com", "b@example.com"]
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    with clock.frozen(T0) as frozen:
        parent_id = Summing.create(hero=heroes[0]).id
        geneva_jobs.drain()
        child_ids = [child.id for child in _children_of(parent_id)]
        db.session.delete(Summing.get(parent_id))
        db.session.commit()
        assert _counts_parents() == {parent_id}
        run_housekeeping()
        assert _counts_parents() == set()
        assert geneva.Workflow.get(child_ids[0]).parent is None
        frozen.advance(RETENTION + timedelta(days=1))
        run_housekeeping()
    assert [workflow_row(child_id) for child_id in child_ids] == [None, None]
