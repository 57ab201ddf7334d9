"""The dispatcher publishes each due batch by priority, higher first (R-DSP-02, R-PRI-02).

Within a batch, read in keyset order (``scheduled_for``, id, R-DSP-08), the
rows are published by their step's merged ``priority`` job option (class <
instance < step, R-JOB-02; unset is 0), higher first, and rows of one
priority keep the keyset order. Batches stay in keyset order: the priority
orders a batch, it does not reorder the table.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.ext.operations import dispatch_due
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva


class DispatchPriorityWait(geneva.Workflow):
    @step
    def first(self):
        pass

    @step(wait=timedelta(days=2))
    def later(self):
        pass


class DispatchPriorityUrgentStep(geneva.Workflow):
    priority = -4

    @step
    def first(self):
        pass

    @step(wait=timedelta(days=2), priority=3)
    def later(self):
        pass


def _create_deferred(frozen, plan):
    """Create one workflow per ``(class, create keywords)``, a minute apart.

    Returns the deferred executions' ids in creation (= ``scheduled_for``) order.
    """
    heroes = [User(email=f"p{i}@example.com") for i in range(len(plan))]
    db.session.add_all(heroes)
    db.session.commit()
    ids = []
    for hero, (cls, keywords) in zip(heroes, plan, strict=True):
        workflow = cls.create(hero=hero, **keywords)
        ids.append(workflow.id)
        frozen.advance(timedelta(minutes=1))
    return ids


def _published_workflows(geneva_jobs):
    execution_cls = geneva.StepExecution
    return [
        db.session.get(execution_cls, p.step_execution_id).workflow_id
        for p in geneva_jobs.enqueued
    ]


@pytest.mark.parametrize("after_commit", [True, False], ids=["deferred", "inline"])
def test_a_batch_is_published_by_priority_then_in_keyset_order(
    app, user, geneva_jobs, after_commit
):
    """Five due rows in one batch go out 5, 5, 3 (a step's own priority over
    its class's -4), 0 (unset) and -1; equal priorities in ``scheduled_for``
    order (R-DSP-02, R-PRI-02, R-JOB-02)."""
    app.config["GENEVA_ENQUEUE_AFTER_COMMIT"] = after_commit
    geneva.reload_settings(app)
    with clock.frozen() as frozen:
        ids = _create_deferred(
            frozen,
            [
                (DispatchPriorityWait, {}),
                (DispatchPriorityWait, {"priority": 5}),
                (DispatchPriorityWait, {"priority": -1}),
                (DispatchPriorityUrgentStep, {}),
                (DispatchPriorityWait, {"step_job_options": {"priority": 5}}),
            ],
        )
        geneva_jobs.drain()
        geneva_jobs.clear()
        frozen.advance(timedelta(days=2))
        assert dispatch_due() == 5
    assert _published_workflows(geneva_jobs) == [ids[1], ids[4], ids[3], ids[0], ids[2]]
    assert [p.priority for p in geneva_jobs.enqueued] == [5, 5, 3, None, -1]


def test_the_priority_orders_each_batch_not_the_whole_table(app, user, geneva_jobs):
    """With batches of two, each batch is sorted on its own and the batches stay
    in keyset order (R-DSP-02, R-DSP-08)."""
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 2
    geneva.reload_settings(app)
    with clock.frozen() as frozen:
        ids = _create_deferred(
            frozen,
            [
                (DispatchPriorityWait, {}),
                (DispatchPriorityWait, {"priority": 1}),
                (DispatchPriorityWait, {}),
                (DispatchPriorityWait, {"priority": 9}),
                (DispatchPriorityWait, {"priority": 2}),
            ],
        )
        geneva_jobs.drain()
        geneva_jobs.clear()
        frozen.advance(timedelta(days=2))
        assert dispatch_due() == 5
    assert _published_workflows(geneva_jobs) == [ids[1], ids[0], ids[3], ids[2], ids[4]]


def test_a_row_whose_options_cannot_be_read_sorts_as_zero(app, user, geneva_jobs):
    """A row whose options cannot be read sorts as priority 0 and the sort never
    raises; the row itself is left to the usual per-row reporting (R-DSP-08)."""
    reported: list[BaseException] = []
    app.config["GENEVA_ERROR_REPORTER"] = lambda error, **_: reported.append(error)
    geneva.reload_settings(app)
    with clock.frozen() as frozen:
        ids = _create_deferred(
            frozen,
            [
                (DispatchPriorityWait, {"priority": -2}),
                (DispatchPriorityWait, {}),
                (DispatchPriorityWait, {"priority": 4}),
            ],
        )
        geneva_jobs.drain()
        geneva_jobs.clear()
        # Unreadable instance options on the middle workflow.
        middle = db.session.get(geneva.Workflow, ids[1])
        middle.meta = {"step_job_options": {"priority": "high"}}
        db.session.commit()
        frozen.advance(timedelta(days=2))
        assert dispatch_due() == 2
    assert _published_workflows(geneva_jobs) == [ids[2], ids[0]]
    assert len(reported) == 1
