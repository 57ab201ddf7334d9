"""Bad and odd input to limits: priorities, key values and names (issue 35).

R-LIM-05: a key is ``str(value)``; two different texts are two keys, with a
counter row each (R-LIM-10), on every database.
R-PRI-02: a priority is an int; higher runs first.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limits import assert_consistent
from tests.support.limits import assert_idle
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import key_row
from tests.support.limits import published_ids
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_row
from tests.support.workflow import make_user

KEYED = "test-input-keyed"
KEY = ["k"]
RUNS: list[str] = []
#: Called inside the body while it holds its slot.
DURING: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    RUNS.clear()
    DURING.clear()
    KEY[0] = "k"


class Keyed(geneva.Workflow):
    @step(limit=Limit(KEYED, concurrency=1, key=lambda wf: KEY[0]))
    def work(self):
        while DURING:
            DURING.pop(0)()
        RUNS.append(self.hero.email)


def _assert_two_keys_run_side_by_side(first: Any, second: Any) -> None:
    """A holder of key ``first`` delivers a workflow of key ``second`` while it
    runs: different keys, so the second runs too, and both keys end idle."""
    KEY[0] = str(first)
    _, a_id = first_execution(Keyed, "a@example.com")
    _, b_id = first_execution(Keyed, "b@example.com")
    db.session.remove()

    def deliver_b() -> None:
        KEY[0] = str(second)
        deliver(b_id)
        KEY[0] = str(first)

    DURING.append(deliver_b)
    KEY[0] = str(first)
    perform_step_execution(a_id, continue_inline=False)
    assert execution_row(b_id)["state"] == "completed", (
        f"{second!r} waited for {first!r}: one key row for two keys"
    )
    assert execution_row(a_id)["state"] == "completed"
    assert_idle(KEYED, str(first))
    assert_idle(KEYED, str(second))
    assert key_row(KEYED, str(first))["limit_key"] == str(first)
    assert key_row(KEYED, str(second))["limit_key"] == str(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Acme", "acme"),
        ("cafe", "café"),
        ("\N{RED APPLE}", "\N{BANANA}"),
        ("a", "a "),
        ("ss", "ß"),
    ],
    ids=["case", "accent", "emoji", "trailing-space", "sharp-s"],
)
def test_keys_that_differ_only_to_a_collation_are_two_keys(app, first, second):
    """R-LIM-05, R-LIM-10: keys that differ by case, an accent, which emoji, a
    trailing space are distinct keys with their own slots on every database
    (MariaDB's default collation would fold them into one row)."""
    _assert_two_keys_run_side_by_side(first, second)


def test_int_and_str_of_one_tenant_are_one_key(app):
    """R-LIM-05: a key is used as ``str(value)``: 1 and "1" share the slot."""
    KEY[0] = 1  # type: ignore[call-overload]
    _, a_id = first_execution(Keyed, "a@example.com")
    _, b_id = first_execution(Keyed, "b@example.com")
    db.session.remove()

    def deliver_b() -> None:
        KEY[0] = "1"
        deliver(b_id)

    DURING.append(deliver_b)
    perform_step_execution(a_id, continue_inline=False)
    assert execution_row(b_id)["state"] == "scheduled"
    assert [w["execution_id"] for w in waiter_rows(KEYED, "1")] == [b_id]


def test_uuid_and_255_character_keys_round_trip(app):
    """R-LIM-05: a UUID key and a key of exactly 255 characters (multi-byte
    ones included) are stored and given back as they are."""
    for key in (uuid.uuid4(), "\N{SNOWMAN}" * 255, "x" * 255):
        KEY[0] = key  # type: ignore[call-overload]
        _, execution_id = first_execution(Keyed, f"{len(str(key))}-{id(key)}@x.com")
        db.session.remove()
        perform_step_execution(execution_id, continue_inline=False)
        assert execution_row(execution_id)["state"] == "completed"
        assert_idle(KEYED, str(key))


def test_a_priority_out_of_the_waiter_column_range_is_refused_clearly(app):
    """R-PRI-01, R-JOB-05: a priority the waiter table cannot hold (its
    column is a 32-bit INTEGER) is refused where it is given, never by the
    database in the middle of a claim."""
    from flask_geneva.exceptions import StepConfigurationError

    hero = make_user("range@example.com")
    for value in (2**31, -(2**31), 2**40, -(2**63)):
        with pytest.raises(StepConfigurationError, match="priority"):
            Keyed.create(hero=hero, priority=value)
        db.session.rollback()


def test_extreme_priorities_in_range_park_and_order(app, geneva_jobs):
    """R-PRI-02, R-LIM-12: the largest and smallest accepted priorities park
    and are granted highest first."""
    KEY[0] = "prio"
    _, holder = first_execution(Keyed, "h@example.com")
    _, low = first_execution(Keyed, "low@example.com", priority=-(2**31) + 1)
    _, high = first_execution(Keyed, "high@example.com", priority=2**31 - 1)
    db.session.remove()

    def park_both() -> None:
        deliver(low)
        deliver(high)

    DURING.append(park_both)
    geneva_jobs.clear()
    perform_step_execution(holder, continue_inline=False)
    assert [w["execution_id"] for w in waiter_rows(KEYED, "prio")] == [high, low]
    assert published_ids(geneva_jobs) == [high]
    assert assert_consistent(KEYED, "prio") == (0, 1, 1)
