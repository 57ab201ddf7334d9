"""Workflow signals left when their workflow ends (R-WSIG-15, R-WSIG-34).

Whatever ends a workflow (its last step, cancel! in a step, an operator's
cancel(), transition_to), the same transaction expires the signals still
``pending`` (no step will claim them) and consumes the ``claimed`` ones.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import orm

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import workflow_row


class SigExpiryShip(geneva.Workflow):
    @step(wait_for="payment_confirmed")
    def ship(self):
        self.hero.counter += 1


class SigExpiryFailing(geneva.Workflow):
    """Its step fails (the default policy pauses): the signal stays claimed."""

    @step(wait_for="go")
    def use(self):
        raise RuntimeError("fails while holding the signal")


class SigExpiryCancels(geneva.Workflow):
    @step
    def first(self):
        self.cancel()

    @step(wait_for="go")
    def never(self):
        raise AssertionError("never runs")


def _signals(workflow_id):
    table = geneva.WorkflowSignal.__table__
    with db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        rows = connection.execute(
            sa.select(table)
            .where(table.c.workflow_id == workflow_id)
            .order_by(table.c.created_at, table.c.id)
        ).mappings()
        return {row["name"]: row for row in rows}


def test_pending_signals_expire_when_the_last_step_finishes_the_workflow(
    user, geneva_jobs
):
    """A signal no step claimed is expired in the transaction that finishes the
    workflow; the one its step ran with is consumed (R-WSIG-15, R-WSIG-34)."""
    workflow = SigExpiryShip.create(hero=user)
    workflow.signal("unrelated", {"n": 1}, warn_unawaited=False)
    geneva_jobs.drain()
    assert _signals(workflow.id)["unrelated"]["state"] == "pending"
    workflow.signal("payment_confirmed")
    geneva_jobs.drain()

    ended = workflow_row(workflow.id)
    assert ended["state"] == "finished"
    signals = _signals(workflow.id)
    assert signals["payment_confirmed"]["state"] == "consumed"
    assert signals["unrelated"]["state"] == "expired"
    assert signals["unrelated"]["updated_at"] >= ended["transitioned_at"]
    assert signals["unrelated"]["step_name"] is None
    assert signals["unrelated"]["consumed_at"] is None


def test_cancel_in_a_step_expires_the_buffered_signal(user, geneva_jobs):
    """cancel! in a step ends the workflow: its buffered signal expires (R-WSIG-34)."""
    workflow = SigExpiryCancels.create(hero=user)
    workflow.signal("go")
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert _signals(workflow.id)["go"]["state"] == "expired"


def test_operator_cancel_of_a_parked_step_expires_pending_signals(user, geneva_jobs):
    """An operator's cancel() ends the workflow: pending signals expire (R-WSIG-34)."""
    workflow = SigExpiryShip.create(hero=user)
    geneva_jobs.drain()
    workflow.signal("unrelated", warn_unawaited=False)
    workflow.cancel()
    assert _signals(workflow.id)["unrelated"]["state"] == "expired"


def test_transition_to_an_end_state_expires_and_consumes(user, geneva_jobs):
    """Even the unvalidated transition_to ends the signals: pending ones expire,
    the claimed one is consumed (R-WSIG-15, R-WSIG-34)."""
    workflow = SigExpiryFailing.create(hero=user)
    workflow.signal("go")
    workflow.signal("late", warn_unawaited=False)
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "paused"
    assert _signals(workflow.id)["go"]["state"] == "claimed"
    workflow.transition_to("canceled")
    signals = _signals(workflow.id)
    assert signals["go"]["state"] == "consumed"
    assert signals["go"]["consumed_at"] is not None
    assert signals["late"]["state"] == "expired"


class OwnedSignalWorkflow(geneva.Workflow):
    """A workflow class with a relationship: a change of it is flushed by the ORM."""

    owner = orm.relationship(
        User,
        primaryjoin=lambda: orm.foreign(geneva.Workflow.hero_id) == User.id,
        viewonly=False,
    )

    @step(wait_for="go")
    def use(self):
        raise RuntimeError("fails while holding the signal")


def test_an_end_flushed_with_a_relationship_change_still_ends_the_signals(
    user, geneva_jobs
):
    """R-WSIG-34: a workflow ended by ``transition_to`` with a relationship
    attribute (written by the ORM flush, not the Core write path) still
    consumes its claimed signal and expires its pending one."""
    workflow = OwnedSignalWorkflow.create(hero=user)
    workflow.signal("go")
    workflow.signal("late", warn_unawaited=False)
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "paused"
    assert _signals(workflow.id)["go"]["state"] == "claimed"
    workflow.transition_to("canceled", owner=user)
    assert workflow_row(workflow.id)["state"] == "canceled"
    signals = _signals(workflow.id)
    assert signals["go"]["state"] == "consumed"
    assert signals["late"]["state"] == "expired"


def test_each_end_reuses_one_built_statement(user, geneva_jobs, monkeypatch):
    """The UPDATE that ends signals is built once and bound per end (R-WSIG-34):
    a workflow's end builds no SQL statement of its own, and each end still
    expires its own workflow's signals only."""
    from flask_geneva.db import workflow_signals as signal_rows

    built = []
    build = signal_rows._end_signals_statement

    def counting(table):
        built.append(table)
        return build(table)

    monkeypatch.setattr(signal_rows, "_end_signals_statement", counting)
    other = User(email="other@example.com")
    db.session.add(other)
    db.session.commit()
    first, second = SigExpiryShip.create(hero=user), SigExpiryShip.create(hero=other)
    first.signal("unrelated", warn_unawaited=False)
    second.signal("unrelated", warn_unawaited=False)
    first.cancel()
    assert _signals(first.id)["unrelated"]["state"] == "expired"
    assert _signals(second.id)["unrelated"]["state"] == "pending"
    second.cancel()
    assert _signals(second.id)["unrelated"]["state"] == "expired"
    assert len(built) <= 1
