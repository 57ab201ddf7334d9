"""Why a recovered execution was recovered, in words (R-ADM-125). Pure presenter."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from types import SimpleNamespace

import pytest

from flask_geneva.admin.presenters import recovery_sentence

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
UNRECORDED = (
    "the step's outcome was never recorded (it may have run in part or in full)."
)


def _execution(outcome="recovered", started_at=STARTED):
    return SimpleNamespace(outcome=outcome, state="completed", started_at=started_at)


def test_the_recovery_record_says_who_and_why():
    """Housekeeping, the dispatcher or an operator (actor via), and the cause
    the record names; an unknown cause is shown as stored (R-ADM-125)."""
    cases = [
        (
            {"by": "housekeeping", "cause": "worker_lost"},
            "housekeeping: its worker was lost",
        ),
        (
            {"by": "dispatcher", "cause": "stuck"},
            "the dispatcher: it was in progress and no worker is recorded for it "
            "(presumed lost)",
        ),
        (
            {
                "by": "operator",
                "actor": "ops@example.com",
                "via": "admin",
                "cause": "timeout",
            },
            "ops@example.com via admin: it ran past its step timeout and its worker "
            "stopped",
        ),
        (
            {"by": "operator", "cause": "worker_lost"},
            "an operator: its worker was lost",
        ),
        ({"by": "housekeeping", "cause": "moon"}, "housekeeping: cause 'moon'"),
    ]
    for record, said in cases:
        assert recovery_sentence(_execution(), {"recovery": record}) == (
            f"Recovered by {said}; {UNRECORDED}"
        ), record


def test_without_a_record_the_columns_say_what_happened():
    """A recovered execution that never started lost its job; one that started
    was found stuck; any other outcome has no sentence (R-ADM-125)."""
    assert recovery_sentence(_execution(started_at=None), None).startswith(
        "Recovered: it was scheduled and never started"
    )
    assert recovery_sentence(_execution(), {"recovery": "garbage"}).startswith(
        "Recovered: it was in progress when recovery found it stuck"
    )
    assert recovery_sentence(_execution(outcome="success"), {"recovery": {}}) == ""
