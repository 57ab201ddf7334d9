"""A retried signal after its workflow ended is a no-op (issue 34, R-WSIG-24, R-WSIG-71).

Payment providers deliver webhooks at least once: a retry of an event the
workflow already received can arrive after the workflow finished or was
canceled. It is answered as a duplicate (R-WSIG-22), not refused, so the
webhook does not fail with a 500 and the provider stops retrying. A signal
with a new key, or without one, to an ended workflow is still refused.
"""

from __future__ import annotations

import pytest

from flask_geneva import InvalidStateError
from flask_geneva import WorkflowNotFoundError
from flask_geneva import step
from flask_geneva.db.queries import engine as engine_queries
from flask_geneva.engine.workflow_signals import heroes
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import count_workflows
from tests.support.workflow import externally
from tests.support.workflow import signal_rows
from tests.support.workflow import workflow_row


class EndedSigCheckout(geneva.Workflow):
    @step
    def order(self):
        pass

    @step(wait_for="payment_confirmed")
    def ship(self):
        pass


def _finished_after(user, geneva_jobs, key):
    """A checkout that received ``payment_confirmed`` with ``key`` and finished."""
    workflow = EndedSigCheckout.create(hero=user)
    geneva_jobs.drain()
    first = workflow.signal("payment_confirmed", {"n": 1}, idempotency_key=key)
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"
    return workflow, first


def test_a_retry_after_the_workflow_finished_is_a_duplicate(user, geneva_jobs):
    """The stored signal comes back with duplicate=True; nothing is written or
    woken (R-WSIG-24, R-WSIG-22)."""
    workflow, first = _finished_after(user, geneva_jobs, "evt_1")
    before = workflow_row(workflow.id)
    geneva_jobs.clear()
    again = workflow.signal("payment_confirmed", {"n": 2}, idempotency_key="evt_1")
    assert again.duplicate is True
    assert again.woken == ()
    assert again.signal.id == first.signal.id
    [row] = signal_rows(workflow.id)
    assert (row["state"], row["payload"]) == ("consumed", {"n": 1})
    assert workflow_row(workflow.id) == before
    assert geneva_jobs.enqueued == []


def test_a_retry_after_the_workflow_was_canceled_is_a_duplicate(user, geneva_jobs):
    """The key of a signal that expired with its canceled workflow stays taken: a
    retry is a duplicate of the expired row (R-WSIG-24, R-WSIG-34)."""
    workflow = EndedSigCheckout.create(hero=user)
    first = workflow.signal("payment_confirmed", idempotency_key="evt_2")
    workflow.cancel()
    assert signal_rows(workflow.id)[0]["state"] == "expired"
    again = workflow.signal("payment_confirmed", idempotency_key="evt_2")
    assert (again.duplicate, again.signal.id) == (True, first.signal.id)
    assert len(signal_rows(workflow.id)) == 1


@pytest.mark.parametrize("key", ["evt_new", None])
def test_a_new_key_or_none_to_an_ended_workflow_is_refused(user, geneva_jobs, key):
    """Only a retry is answered: a new signal is refused and nothing is stored
    (R-WSIG-24)."""
    workflow, _ = _finished_after(user, geneva_jobs, "evt_1")
    with pytest.raises(InvalidStateError, match="Cannot signal a finished workflow"):
        workflow.signal("payment_confirmed", idempotency_key=key)
    assert len(signal_rows(workflow.id)) == 1


def test_signal_hero_answers_a_retry_after_the_end_as_a_duplicate(user, geneva_jobs):
    """No workflow of the hero is ongoing, but its ended one received the key:
    signal_hero returns that signal as a duplicate instead of raising, and with
    start=True it creates no new workflow (R-WSIG-71, R-WSIG-25)."""
    workflow, first = _finished_after(user, geneva_jobs, "evt_1")
    again = EndedSigCheckout.signal_hero(
        user, "payment_confirmed", idempotency_key="evt_1"
    )
    assert (again.duplicate, again.signal.id) == (True, first.signal.id)
    started = EndedSigCheckout.signal_hero(
        user, "payment_confirmed", idempotency_key="evt_1", start=True
    )
    assert (started.duplicate, started.signal.id) == (True, first.signal.id)
    assert count_workflows() == 1
    assert len(signal_rows(workflow.id)) == 1


def test_signal_hero_without_a_received_key_still_finds_no_workflow(user, geneva_jobs):
    """A new key, or none, finds no ongoing workflow: WorkflowNotFoundError as
    before (R-WSIG-25, R-WSIG-71)."""
    _finished_after(user, geneva_jobs, "evt_1")
    for key in ("evt_new", None):
        with pytest.raises(WorkflowNotFoundError, match="no ongoing"):
            EndedSigCheckout.signal_hero(user, "payment_confirmed", idempotency_key=key)


def _cancel_after_the_lookup(monkeypatch, workflow_id):
    """Cancel the workflow from another session right after signal_hero's lookup."""
    lookup = engine_queries.ongoing_duplicate_id
    canceled = []

    def lookup_then_cancel(*args, **kwargs):
        found = lookup(*args, **kwargs)
        if not canceled:
            canceled.append(externally(workflow_id, "cancel"))
        return found

    monkeypatch.setattr(
        heroes.engine_queries, "ongoing_duplicate_id", lookup_then_cancel
    )
    return canceled


# SQLite: the other session would wait for the write lock this thread holds.
@pytest.mark.backends("postgresql", "mysql")
@pytest.mark.parametrize("start", [True, False], ids=["start", "no start"])
def test_a_workflow_ending_between_lookup_and_lock_counts_as_none(
    user, geneva_jobs, monkeypatch, start
):
    """The hero's workflow ends after signal_hero found it: signal_hero looks again,
    so start=True creates one and gets the signal, and without start the answer is
    WorkflowNotFoundError, as when none was ongoing (R-WSIG-74).
    """
    workflow = EndedSigCheckout.create(hero=user)
    geneva_jobs.drain()
    workflow_id = workflow.id
    db.session.remove()
    canceled = _cancel_after_the_lookup(monkeypatch, workflow_id)
    if start:
        delivery = EndedSigCheckout.signal_hero(
            user, "payment_confirmed", idempotency_key="evt_new", start=True
        )
        assert delivery.duplicate is False
        assert delivery.signal.workflow_id != workflow_id
        assert count_workflows() == 2
    else:
        with pytest.raises(WorkflowNotFoundError, match="no ongoing"):
            EndedSigCheckout.signal_hero(
                user, "payment_confirmed", idempotency_key="evt_new"
            )
        assert count_workflows() == 1
    assert canceled
    assert workflow_row(workflow_id)["state"] == "canceled"
    assert signal_rows(workflow_id) == []


@pytest.mark.backends("postgresql", "mysql")
def test_a_retry_racing_the_end_stays_a_duplicate(user, geneva_jobs, monkeypatch):
    """A retried key whose workflow is canceled during signal_hero is a duplicate
    of the stored signal; start=True creates nothing (R-WSIG-71, R-WSIG-74).
    """
    workflow = EndedSigCheckout.create(hero=user)
    geneva_jobs.drain()
    first = workflow.signal("payment_confirmed", idempotency_key="evt_1").signal.id
    workflow_id = workflow.id
    db.session.remove()
    _cancel_after_the_lookup(monkeypatch, workflow_id)
    delivery = EndedSigCheckout.signal_hero(
        user, "payment_confirmed", idempotency_key="evt_1", start=True
    )
    assert (delivery.duplicate, delivery.signal.id) == (True, first)
    assert count_workflows() == 1
    assert len(signal_rows(workflow_id)) == 1
