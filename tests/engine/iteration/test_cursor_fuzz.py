"""Checkpoints of any value fuzzed: unserializable, huge, deeply nested
(issue 41, R-FLT-70, R-CUR-03..05, R-CUR-10).

A resumable step sets its cursor to a generated value: the checkpoint stores it,
or ``it.set()`` raises a clear ``CursorSerializationError`` or
``CursorTooLargeError`` (tests/support/refusals.py) and the stored cursor keeps
its previous value, so the step (which catches the error here) completes with it.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from decimal import Decimal

from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva import CursorSerializationError
from flask_geneva import CursorTooLargeError
from flask_geneva import resumable_step
from flask_geneva.core.cursors import deserialize_cursor
from flask_geneva.core.cursors import serialize_cursor
from flask_geneva.testing import perform_next_step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.fuzzing import with_fixtures
from tests.support.refusals import assert_clear_refusal
from tests.support.workflow import execution_rows

_EMAILS = itertools.count()
#: The value the step checkpoints, and what ``it.set()`` raised (None: nothing).
_VALUE: list[object] = []
_RAISED: list[Exception | None] = []


class _Unknown:
    """A type the cursor codec does not know."""


class _Text(str):
    """A str subclass."""


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=3),
    st.datetimes(timezones=st.timezones()),
    st.datetimes(),
    st.times(),
    st.timedeltas(),
    st.decimals(allow_nan=True),
    st.uuids(),
    st.complex_numbers(),
    st.builds(_Unknown),
    st.sampled_from(
        [_Text("s"), {1}, range(2), "\x00", "\ud800", 10**400, Decimal("sNaN")]
    ),
)


@dataclasses.dataclass(frozen=True)
class Built:
    """A value too deep or too long for hypothesis to print, built in the test:
    ``size`` lists (``"["``) or one-key dicts (``"{"``) inside each other, or a
    str of ``size`` characters (``"x"``)."""

    shape: str
    size: int

    def value(self) -> object:
        if self.shape == "[":
            return functools.reduce(lambda inner, _: [inner], range(self.size), [])
        if self.shape == "{":
            return functools.reduce(lambda inner, _: {"k": inner}, range(self.size), 1)
        return "x" * self.size


VALUES = st.one_of(
    st.recursive(
        _LEAVES,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(
                st.one_of(st.text(max_size=4), st.integers(), st.none(), st.floats()),
                children,
                max_size=3,
            ),
            st.tuples(children),
        ),
        max_leaves=8,
    ),
    st.builds(Built, st.sampled_from(["[", "{"]), st.integers(1, 3000)),
    st.builds(Built, st.just("x"), st.integers(1, 200_000)),
)


class FuzzCursor(geneva.Workflow):
    """A resumable step checkpointing "before", then the generated value."""

    __geneva_type__ = "FuzzCursor"

    @resumable_step
    def walk(self, it):
        it.set("before")
        try:
            it.set(_VALUE[0])
        except (CursorSerializationError, CursorTooLargeError) as error:
            _RAISED.append(error)
        else:
            _RAISED.append(None)


@with_fixtures(max_examples=40)
@given(value=VALUES)
@example(value=Built("[", 3000)).via("deeper than the codec's recursion")
@example(value=Built("x", 140_000)).via("over GENEVA_MAX_CURSOR_SIZE")
@example(value={"a": [1, {"b": _Unknown()}]}).via("an unknown type, nested")
@example(value=[6.979109426455245e16, 1e16]).via("floats that jsonb would make ints")
def test_a_checkpoint_stores_its_value_or_refuses_it_clearly(app, value):
    """it.set(value) of fuzzed values: stored as the codec reads it back, or a clear CursorSerializationError/CursorTooLargeError and the previous cursor kept (R-FLT-70, R-CUR-03..05, R-CUR-10)."""
    if isinstance(value, Built):
        value = value.value()
    _VALUE[:] = [value]
    _RAISED.clear()
    hero = User(email=f"cursor-fuzz-{next(_EMAILS)}@example.com")
    db.session.add(hero)
    db.session.commit()
    workflow = FuzzCursor.create(hero=hero)
    perform_next_step(workflow)
    [raised] = _RAISED
    [row] = execution_rows(workflow.id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    if raised is not None:
        assert_clear_refusal(raised, "cursor")
        assert row["cursor"] == "before"
    else:
        assert deserialize_cursor(row["cursor"]) == deserialize_cursor(
            serialize_cursor(value)
        )
