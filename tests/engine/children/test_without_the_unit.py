"""A database without the ``add_child_workflows`` unit (SPEC §25, R-CHD-50).

An app that upgrades flask_geneva before it runs ``flask geneva install`` has
no such unit: its workflows must run (once, every claim failed with "no such
column: geneva_drive_workflows.parent_workflow_id" and left the execution
scheduled, found with the example app's migrations).
"""

from __future__ import annotations

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva


class TwoPlainSteps(geneva.Workflow):
    """Two steps, no children, no result."""

    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


def test_a_plain_workflow_runs_without_the_unit(app, geneva_jobs, user, without_unit):
    """R-CHD-50: without the unit everything else works."""
    user_id = user.id
    without_unit("add_child_workflows")
    workflow_id = TwoPlainSteps.create(hero=db.session.get(User, user_id)).id
    geneva_jobs.drain()
    db.session.remove()
    # Only the columns every schema has (workflow_row reads them all).
    table = geneva.Workflow.__table__
    state = db.session.scalar(db.select(table.c.state).where(table.c.id == workflow_id))
    assert state == "finished"
