"""The cursor size limit and the ``cursor_value`` accessor (R-CUR-10..12, R-SE-42)."""

from __future__ import annotations

import uuid
from datetime import UTC
from datetime import datetime
from decimal import Decimal

import pytest

from flask_geneva import CursorSerializationError
from flask_geneva import CursorTooLargeError
from flask_geneva import resumable_step
from flask_geneva.ext.app_state import current_state
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

SIZES: list[int] = [10]


class BigCursor(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        it.set("small")
        it.set("x" * SIZES[0])


@pytest.fixture(autouse=True)
def _reset_size() -> None:
    SIZES[0] = 10


def test_default_limit_is_128_kib(app):
    """GENEVA_MAX_CURSOR_SIZE defaults to 131072 bytes (R-CUR-10, §13)."""
    assert current_state().config.max_cursor_size_bytes == 131072


def test_oversized_cursor_raises_pauses_and_keeps_the_previous_cursor(
    user, geneva_jobs
):
    """An oversized cursor raises CursorTooLargeError naming the setting; the workflow pauses (R-CUR-10, R-CUR-12)."""
    SIZES[0] = 131072
    workflow = BigCursor.create(hero=user)
    with pytest.raises(CursorTooLargeError) as raised:
        perform_next_step(workflow)
    message = str(raised.value)
    assert "GENEVA_MAX_CURSOR_SIZE" in message
    assert "131074 bytes" in message
    assert "131072" in message
    (row,) = execution_rows(workflow.id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert row["cursor"] == "small"
    assert "GENEVA_MAX_CURSOR_SIZE" in row["error_message"]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_small_cursor_passes(user, geneva_jobs):
    """A cursor under the limit is stored (R-CUR-10)."""
    SIZES[0] = 1000
    workflow = BigCursor.create(hero=user)
    perform_next_step(workflow)
    (row,) = execution_rows(workflow.id)
    assert (row["state"], row["outcome"]) == ("completed", "success")
    assert row["cursor"] == "x" * 1000


@pytest.mark.parametrize("app_config", [{"GENEVA_MAX_CURSOR_SIZE": None}])
def test_none_disables_the_limit(user, geneva_jobs):
    """GENEVA_MAX_CURSOR_SIZE=None stores cursors of any size (R-CUR-10)."""
    SIZES[0] = 200_000
    workflow = BigCursor.create(hero=user)
    perform_next_step(workflow)
    (row,) = execution_rows(workflow.id)
    assert row["outcome"] == "success"
    assert len(row["cursor"]) == 200_000


@pytest.mark.parametrize("app_config", [{"GENEVA_MAX_CURSOR_SIZE": 50}])
def test_cursor_value_setter_enforces_the_limit(user, geneva_jobs):
    """Assigning cursor_value checks the size and leaves the old value (R-SE-42, R-CUR-11)."""
    workflow = BigCursor.create(hero=user)
    execution = workflow.current_execution
    execution.cursor_value = "fits"
    db.session.commit()
    with pytest.raises(CursorTooLargeError, match="over the limit of 50 bytes"):
        execution.cursor_value = "y" * 60
    db.session.commit()
    assert execution_row(execution.id)["cursor"] == "fits"


def test_cursor_value_round_trips_tagged_types(user, geneva_jobs):
    """cursor_value stores tagged JSON and reads back equal values and types (R-SE-42, R-CUR-02, R-CUR-04)."""
    workflow = BigCursor.create(hero=user)
    execution = workflow.current_execution
    value = {
        "at": datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        "amount": Decimal("1.10"),
        "id": uuid.UUID(int=7),
        "page": [1, "two", None],
    }
    execution.cursor_value = value
    db.session.commit()
    stored = execution_row(execution.id)["cursor"]
    assert stored["amount"] == {"__geneva__": "decimal", "value": "1.10"}
    db.session.expire_all()
    assert execution.cursor_value == value
    assert type(execution.cursor_value["amount"]) is Decimal


def test_cursor_value_rejects_unsupported_types(user, geneva_jobs):
    """An unsupported cursor type raises CursorSerializationError (R-CUR-03)."""
    workflow = BigCursor.create(hero=user)
    with pytest.raises(CursorSerializationError, match="object"):
        workflow.current_execution.cursor_value = {"x": object()}


def test_cursor_dict_mutated_in_place_is_still_saved(user, geneva_jobs):
    """Reading cursor_value, mutating the dict and assigning it back persists the change (R-SE-42)."""
    workflow = BigCursor.create(hero=user)
    execution = workflow.current_execution
    execution.cursor_value = {"page": 1}
    db.session.commit()
    cursor = execution.cursor_value
    cursor["page"] = 2
    execution.cursor_value = cursor
    db.session.commit()
    assert execution_row(execution.id)["cursor"] == {"page": 2}


class MutatesInPlace(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        it.set({"page": 1, "seen": []})
        cursor = it.cursor
        cursor["page"] = 2
        cursor["seen"].append("a")
        it.set(cursor)


def test_it_set_with_a_mutated_cursor_dict_is_saved(user, geneva_jobs):
    """it.set() of the same dict mutated in place stores the new contents (R-IT-02, R-IT-10)."""
    workflow = MutatesInPlace.create(hero=user)
    perform_next_step(workflow)
    (row,) = execution_rows(workflow.id)
    assert row["cursor"] == {"page": 2, "seen": ["a"]}


class NulCursor(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        it.set("small")
        it.set({"after": "a\x00b"})


def test_a_cursor_with_a_nul_character_is_refused_on_every_database(user, geneva_jobs):
    """A NUL character in a checkpointed cursor is a CursorSerializationError naming
    its path, the same on every database (PostgreSQL failed the flush with a
    DataError); the previous cursor is kept (R-CUR-05, R-CUR-12)."""
    workflow = NulCursor.create(hero=user)
    with pytest.raises(CursorSerializationError) as raised:
        perform_next_step(workflow)
    assert 'cursor["after"]' in str(raised.value)
    assert "NUL" in str(raised.value)
    (row,) = execution_rows(workflow.id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert row["cursor"] == "small"
    assert row["error_class_name"].endswith("CursorSerializationError")
