"""A database without the ``add_workflow_deadlines`` unit (SPEC §27.1, R-DL-50)."""

from __future__ import annotations

import pytest

from flask_geneva import GenevaError
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.deadlines.workflows import CHILD_PLAN
from tests.engine.deadlines.workflows import HOUR
from tests.engine.deadlines.workflows import FansOut
from tests.engine.deadlines.workflows import Monthly
from tests.engine.deadlines.workflows import TwoDays
from tests.engine.deadlines.workflows import dispatch
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_rows


def _state(workflow_id):
    table = geneva.Workflow.__table__
    return db.session.scalar(db.select(table.c.state).where(table.c.id == workflow_id))


def test_workflows_without_a_deadline_run_and_the_dispatcher_runs(
    app, geneva_jobs, user, without_unit
):
    """Without the unit a workflow without a deadline runs, children without
    one start, and the dispatcher's pass reads nothing (R-DL-50)."""
    user_id = user.id
    without_unit("add_workflow_deadlines")
    CHILD_PLAN[:] = [(TwoDays, "plain", None)]
    hero = db.session.get(User, user_id)
    workflow_id = TwoDays.create(hero=hero, allow_multiple=True).id
    parent_id = FansOut.create(hero=hero).id
    geneva_jobs.drain()
    run = dispatch()
    assert run.deadlines == 0
    db.session.remove()
    assert _state(workflow_id) == "ready"  # its second step waits a day
    assert _state(parent_id) == "ready"  # parked for its child
    assert len(execution_rows(workflow_id)) == 2
    # Reading the deadline reads no absent column (R-DL-50, R-DM-32).
    assert db.session.get(geneva.Workflow, workflow_id).deadline is None


def test_a_deadline_without_the_unit_is_refused_naming_it(app, user, without_unit):
    """Passing a deadline, or creating a class that declares one, fails with a
    GenevaError naming the unit, and nothing is written (R-DL-50)."""
    user_id = user.id
    without_unit("add_workflow_deadlines")
    hero = db.session.get(User, user_id)
    for create in (
        lambda: TwoDays.create(hero=hero, deadline=HOUR),
        lambda: Monthly.create(hero=hero),
    ):
        with pytest.raises(GenevaError) as caught:
            create()
        assert "add_workflow_deadlines" in str(caught.value)
        assert "flask geneva install" in str(caught.value)
    db.session.rollback()
    assert count_workflows() == 0
