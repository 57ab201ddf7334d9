"""``workflow.signal()`` fuzzed: names, payloads and idempotency keys of any kind
(issue 41, R-FLT-70, R-FLT-71).

A signal is stored (and wakes the parked step) or refused with a clear error
(tests/support/refusals.py) that leaves every table as it was. The failing
inputs fuzzing found are kept as explicit examples.
"""

from __future__ import annotations

import itertools
import warnings
from decimal import Decimal

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.fuzzing import with_fixtures
from tests.support.refusals import assert_clear_refusal
from tests.support.refusals import table_snapshot
from tests.support.workflow import signal_rows

_EMAILS = itertools.count()

_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=3),
    st.datetimes(timezones=st.timezones()),
    st.dates(),
    st.timedeltas(),
    st.decimals(allow_nan=True),
    st.uuids(),
    st.complex_numbers(),
    st.sampled_from(["\x00", "\ud800", 2**64, {1, 2}, object(), Decimal("1e9999")]),
)
PAYLOADS = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(), st.none()),
            children,
            max_size=3,
        ),
        st.tuples(children),
    ),
    max_leaves=6,
)
NAMES = st.one_of(
    st.text(max_size=260),
    st.sampled_from(["go", "", " ", "\x00", "g" * 256, "go\x00"]),
    st.integers(),
    st.none(),
    st.binary(max_size=3),
)
KEYS = st.one_of(
    st.none(), st.text(max_size=260), st.sampled_from(["", "k" * 256]), st.integers()
)


class FuzzSignalled(geneva.Workflow):
    """Waits for "go", then one more step."""

    __geneva_type__ = "FuzzSignalled"

    @step(wait_for="go")
    def waits(self):
        pass

    @step
    def after(self):
        pass


@with_fixtures(max_examples=40)
@given(name=NAMES, payload=PAYLOADS, key=KEYS, parked=st.booleans())
@example(name="\ud800", payload=None, key=None, parked=False).via(
    "UnicodeEncodeError in the driver (issue 41)"
)
@example(name="go", payload=None, key="\ud800", parked=True).via(
    "UnicodeEncodeError in the driver (issue 41)"
)
def test_signal_refusals_are_clear_and_write_nothing(app, name, payload, key, parked):
    """signal() with fuzzed names, payloads and idempotency keys, to a waiting or a parked workflow: stored, or a clear refusal and unchanged tables (R-FLT-70, R-WSIG-20, R-WSIG-21, R-FLT-71)."""
    hero = User(email=f"signal-fuzz-{next(_EMAILS)}@example.com")
    db.session.add(hero)
    db.session.commit()
    workflow = FuzzSignalled.create(hero=hero)
    if parked:
        perform_next_step(workflow)
    db.session.commit()
    before = table_snapshot()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unawaited name warns
            delivery = workflow.signal(name, payload, idempotency_key=key)
    except Exception as error:  # noqa: BLE001 - judged: a clear refusal
        db.session.rollback()
        assert_clear_refusal(error)
        assert table_snapshot() == before
    else:
        assert [row["name"] for row in signal_rows(workflow.id)] == [name]
        assert delivery.duplicate is False


@pytest.mark.parametrize("argument", ["name", "idempotency_key"])
def test_an_unpaired_surrogate_in_a_name_is_refused_naming_the_rule(
    app, user, argument
):
    """A signal name or idempotency key holding an unpaired surrogate is refused as a name with a NUL character is, before any statement, on every database (R-FLT-71, R-WSIG-20)."""
    workflow = FuzzSignalled.create(hero=user)
    before = table_snapshot()
    values = {"name": "go", "idempotency_key": None, argument: "go\ud800"}
    with pytest.raises(ValueError, match="non-empty str of at most 255") as raised:
        workflow.signal(values["name"], idempotency_key=values["idempotency_key"])
    what = "signal name" if argument == "name" else "idempotency_key"
    assert_clear_refusal(
        raised.value, what, "no NUL character, in valid Unicode", "'go\\ud800'"
    )
    db.session.rollback()
    assert table_snapshot() == before
