"""A misspelt signal name warns (issue 34, R-WSIG-73).

``workflow.signal("payment_confirmd")`` stored the signal pending with nothing
to tell it from a good one: it waited until the workflow ended, and the step
waiting for ``payment_confirmed`` timed out. The signal is still stored (a later
deploy may add a step waiting for it), but a warning names the signal, the
class and what the class's steps wait for, as ``flask geneva signal`` already
said (R-WSIG-60).
"""

from __future__ import annotations

import warnings

import pytest

import flask_geneva
from flask_geneva import SignalMatcher
from flask_geneva import exceptions
from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import signal_rows
from tests.support.workflow import update_workflow


class UnawaitedSigCheckout(geneva.Workflow):
    @step(wait_for=SignalMatcher("refund_requested"))
    def maybe_refund(self):
        pass

    @step(wait_for="payment_confirmed")
    def ship(self):
        pass


class UnawaitedSigNoWaits(geneva.Workflow):
    @step
    def only(self):
        pass


class _AnyName:
    names = None

    def matches(self, signal):
        return True


class UnawaitedSigCustom(geneva.Workflow):
    @step(wait_for=_AnyName())
    def take(self):
        pass


def _the_warning(record):
    [warned] = record
    return warned


def test_signal_warns_naming_the_signal_the_class_and_the_awaited_names(user):
    """The warning points at the caller's line; the signal is stored pending
    (R-WSIG-73)."""
    workflow = UnawaitedSigCheckout.create(hero=user)
    with pytest.warns(flask_geneva.UnawaitedSignalWarning) as record:
        delivery = workflow.signal("payment_confirmd")
    warned = _the_warning(record)
    assert str(warned.message) == (
        "workflow signal 'payment_confirmd' was stored, but no step of "
        "UnawaitedSigCheckout waits for 'payment_confirmd'; its steps wait for "
        "'payment_confirmed', 'refund_requested'"
    )
    assert warned.filename == __file__
    assert delivery.duplicate is False
    assert signal_rows(workflow.id)[0]["state"] == "pending"


def test_signal_hero_warns_too(user):
    """Class.signal_hero() warns as workflow.signal() does (R-WSIG-73)."""
    workflow = UnawaitedSigCheckout.create(hero=user)
    with pytest.warns(
        flask_geneva.UnawaitedSignalWarning, match="'payment_confirmd'"
    ) as record:
        UnawaitedSigCheckout.signal_hero(user, "payment_confirmd")
    assert _the_warning(record).filename == __file__
    assert [row["name"] for row in signal_rows(workflow.id)] == ["payment_confirmd"]


def test_a_class_waiting_for_no_signal_says_so(user):
    """No step of the class has wait_for (R-WSIG-73)."""
    workflow = UnawaitedSigNoWaits.create(hero=user)
    with pytest.warns(flask_geneva.UnawaitedSignalWarning) as record:
        workflow.signal("anything")
    assert str(_the_warning(record).message) == (
        "workflow signal 'anything' was stored, but no step of UnawaitedSigNoWaits "
        "waits for a signal"
    )


def test_the_category_is_a_public_user_warning():
    """UnawaitedSignalWarning is a UserWarning exported by flask_geneva and
    flask_geneva.exceptions, so a filter can name it (R-WSIG-73)."""
    category = flask_geneva.UnawaitedSignalWarning
    assert category is exceptions.UnawaitedSignalWarning
    assert issubclass(category, UserWarning)
    assert "UnawaitedSignalWarning" in flask_geneva.__all__
    assert "UnawaitedSignalWarning" in exceptions.__all__


def test_no_warning_when_a_step_may_claim_it_or_nothing_was_stored(user):
    """An awaited name, a custom matcher of any name, a duplicate (nothing
    stored), warn_unawaited=False and a workflow whose class is not defined
    (R-WSIG-72) give no warning (R-WSIG-73)."""
    checkout = UnawaitedSigCheckout.create(hero=user)
    custom = UnawaitedSigCustom.create(hero=user)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checkout.signal("payment_confirmed")
        checkout.signal("refund_requested")
        custom.signal("whatever")
        checkout.signal("typo", warn_unawaited=False)
        UnawaitedSigCheckout.signal_hero(user, "typo", warn_unawaited=False)
    with pytest.warns(flask_geneva.UnawaitedSignalWarning):
        checkout.signal("typo", idempotency_key="k")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert checkout.signal("typo", idempotency_key="k").duplicate
    checkout_id = checkout.id
    update_workflow(checkout_id, type="UnawaitedSigRemovedClass")
    db.session.expunge_all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        geneva.Workflow.get(checkout_id).signal("typo")
