"""``create()`` and ``get()`` fuzzed: every refusal is clear and writes nothing
(issue 41, R-FLT-70, R-FLT-71, R-FLT-72).

Heroes of every kind, priorities, start times (``wait``, ``wait_until``, a
deadline) and job options of any type and range: ``create()`` either creates a
``ready`` workflow with one scheduled execution, or raises a ``GenevaError``,
``ValueError`` or ``TypeError`` from flask_geneva's own checks, and every table
holds the rows it held before (tests/support/refusals.py). The failing inputs
fuzzing found are kept as explicit examples.
"""

from __future__ import annotations

import itertools
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva import step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.fuzzing import with_fixtures
from tests.support.refusals import assert_clear_refusal
from tests.support.refusals import table_snapshot
from tests.support.workflow import execution_rows

_EMAILS = itertools.count()

#: Values of the wrong type or range for any argument, and edge values.
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=4),
    st.datetimes(),
    st.datetimes(timezones=st.timezones()),
    st.timedeltas(),
    st.lists(st.integers(), max_size=2),
    st.decimals(allow_nan=True),
    st.sampled_from(
        [
            "\x00",
            "\ud800",
            "q" * 300,
            2**63,
            -(2**31),
            timedelta.max,
            timedelta(0),
            datetime.max.replace(tzinfo=UTC),
            Decimal("1e999"),
            object(),
        ]
    ),
)
JOB_OPTIONS = st.one_of(
    st.none(),
    ODD_VALUES,
    st.dictionaries(
        st.one_of(
            st.sampled_from(["queue", "priority", "wait", "wait_until"]),
            st.text(max_size=6),
        ),
        ODD_VALUES,
        max_size=4,
    ),
)
HEROES = ("saved", "deleted", "unsaved", "class", "text", "none", "workflow")


class FuzzCreated(geneva.Workflow):
    """Two steps, the second an hour after the first."""

    __geneva_type__ = "FuzzCreated"

    @step
    def first(self):
        pass

    @step(wait=timedelta(hours=1))
    def second(self):
        pass


def _hero(kind: str) -> Any:
    """A hero of ``kind``: a saved user, one deleted since, a user never added
    to a session, the model class, a str, None, or another workflow row."""
    if kind in ("text", "none", "class"):
        return {"text": "User#1", "none": None, "class": User}[kind]
    hero = User(email=f"create-fuzz-{next(_EMAILS)}@example.com")
    if kind == "unsaved":
        return hero
    db.session.add(hero)
    db.session.commit()
    if kind == "deleted":
        db.session.delete(hero)
        db.session.commit()
    if kind == "workflow":
        return FuzzCreated.create(hero=hero, allow_multiple=True)
    return hero


@with_fixtures(max_examples=40)
@given(
    hero=st.sampled_from(HEROES),
    allow_multiple=st.one_of(st.booleans(), ODD_VALUES),
    priority=ODD_VALUES,
    options=JOB_OPTIONS,
    deadline=ODD_VALUES,
)
@example(
    hero="saved",
    allow_multiple=False,
    priority=None,
    options={"queue": "a\x00b"},
    deadline=None,
).via("PostgreSQL's DataError on the JSON insert (issue 41)")
@example(
    hero="saved",
    allow_multiple=False,
    priority=None,
    options={"queue": "\ud800"},
    deadline=None,
).via("PostgreSQL's DataError on the JSON insert (issue 41)")
@example(
    hero="saved",
    allow_multiple=False,
    priority=None,
    options={"queue": "q" * 256},
    deadline=None,
).via("a queue RabbitMQ refuses: unpublishable, the dispatcher stuck at it")
def test_create_refusals_are_clear_and_write_nothing(
    app, hero, allow_multiple, priority, options, deadline
):
    """create() with fuzzed heroes, priorities, start times and job options: a workflow with its first execution, or a clear refusal and unchanged tables (R-FLT-70, R-WF-10..15, R-JOB-03..06, R-FLT-71)."""
    hero = _hero(hero)
    before = table_snapshot()
    try:
        workflow = FuzzCreated.create(
            hero=hero,
            allow_multiple=allow_multiple,
            priority=priority,
            step_job_options=options,
            deadline=deadline,
        )
    except Exception as error:  # noqa: BLE001 - judged: a clear refusal
        db.session.rollback()
        assert_clear_refusal(error)
        assert table_snapshot() == before
    else:
        assert workflow.state == "ready"
        rows = execution_rows(workflow.id)
        assert [(r["step_name"], r["state"]) for r in rows] == [("first", "scheduled")]


@pytest.mark.parametrize(
    ("queue", "problem"),
    [
        ("a\x00b", "it holds a NUL character"),
        ("\ud800", "it is not valid Unicode"),
        ("é" * 128, "it is 256 bytes long"),
        ("", "'' (str)"),
        (7, "7 (int)"),
    ],
)
def test_a_queue_no_broker_or_database_takes_is_refused(app, user, queue, problem):
    """A queue name with a NUL character, an unpaired surrogate or over 255 bytes of UTF-8 is refused at create(), naming the value and the rule, on every database (R-FLT-71, R-JOB-05)."""
    before = table_snapshot()
    with pytest.raises(ValueError, match="job option 'queue'") as raised:
        FuzzCreated.create(hero=user, step_job_options={"queue": queue})
    assert_clear_refusal(
        raised.value,
        "job option 'queue' must be a non-empty str of at most 255 bytes of UTF-8",
        problem,
    )
    db.session.rollback()
    assert table_snapshot() == before
    workflow = FuzzCreated.create(hero=user, step_job_options={"queue": "é" * 127})
    assert workflow.step_job_options == {"queue": "é" * 127}  # 254 bytes: allowed


@with_fixtures(max_examples=30)
@given(
    raw=st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.text(max_size=25),
        ODD_VALUES,
        st.uuids(),
    )
)
@example(raw="abc").via("PostgreSQL's DataError: invalid input for bigint")
@example(raw=2**70).via("a DataError: bigint out of range")
@example(raw="\x00").via("psycopg: text cannot contain NUL")
@example(raw=b"1").via("PostgreSQL: cannot cast bytea to bigint")
@example(raw=float("nan")).via("a DataError: bigint out of range")
def test_get_finds_a_workflow_or_refuses_its_id_clearly(app, user, raw):
    """Workflow.get() of anything: the workflow, None for a key no row has, or a TypeError/ValueError naming the value and the allowed keys; never a database error (R-FLT-72)."""
    workflow = FuzzCreated.create(hero=user, allow_multiple=True)
    try:
        found = FuzzCreated.get(raw)
    except (TypeError, ValueError) as error:
        assert_clear_refusal(error, repr(raw), "an integer from 1 to")
    else:
        expected = workflow if raw in (workflow.id, str(workflow.id)) else None
        if isinstance(raw, bool | float | Decimal):
            pytest.fail(f"{raw!r} was taken for a key")
        assert found is expected or (found is not None and found.id == workflow.id)
    db.session.rollback()
