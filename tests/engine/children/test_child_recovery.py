"""A parent canceled while its step ran, whose worker then died (R-CHD-31).

The step's body started children after the cancel committed (so the cancel
saw none to mark) and its worker died before finalize could mark them.
Recovery of the stuck execution of the canceled parent marks them, and the
dispatcher cancels them: none runs on under a canceled parent.
"""

from __future__ import annotations

from datetime import timedelta

from flask_geneva import run_housekeeping
from flask_geneva.core import clock
from flask_geneva.engine.flow_control import step_context
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children.workflows import Doubler
from tests.engine.children.workflows import Summing
from tests.support.housekeeping import T0
from tests.support.housekeeping import make_in_progress
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row


def test_recovery_marks_the_children_of_a_parent_canceled_mid_step(app, geneva_jobs):
    """R-CHD-31, R-HK-27: recovered, the canceled parent's stuck execution
    marks the children its body started; the dispatcher cancels them."""
    heroes = [make_user(f"{name}@example.com") for name in ("a", "b")]
    with clock.frozen(T0) as frozen:
        parent = Summing.create(hero=heroes[0])
        parent_id = parent.id
        execution_id = make_in_progress(parent, T0)
        db.session.remove()
        Summing.get(parent_id).cancel()  # the running step is left to its worker
        parent = Summing.get(parent_id)
        with step_context(
            parent_id, "body", execution_id=execution_id, step_name="fan_out"
        ):
            children = parent.start_children(Doubler, heroes)
        db.session.commit()  # the body's writes; then the worker died
        child_ids = [child.id for child in children]
        geneva_jobs.clear()
        counts = Summing.get(parent_id).child_counts
        assert (counts.started, counts.settled) == (2, 0)
        frozen.advance(timedelta(days=1))
        run_housekeeping()
        geneva.dispatch_due()
    assert workflow_row(parent_id)["state"] == "canceled"
    assert [workflow_row(child_id)["state"] for child_id in child_ids] == [
        "canceled",
        "canceled",
    ]
    counts = Summing.get(parent_id).child_counts
    assert (counts.started, counts.settled, counts.failed) == (2, 2, 2)
