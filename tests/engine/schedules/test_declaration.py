"""Declaring schedules: refused at definition with a clear message (SPEC §26.1)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest

from flask_geneva import Geneva
from flask_geneva.exceptions import GenevaConfigurationError
from tests.apps.basic import geneva
from tests.engine.schedules.support import Digest
from tests.engine.schedules.support import HeroLessReport

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _users():
    return []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "0 9 * *"}, "invalid cron expression '0 9 * *'"),
        ({"cron": "0 0 30 2 *"}, "invalid cron expression"),
        ({"cron": ""}, "cron must be a cron expression"),
        ({"cron": None}, "cron must be a cron expression"),
        (
            {"cron": "0 9 * * *", "timezone": "Europe/Berlinn"},
            "unknown time zone 'Europe/Berlinn'",
        ),
        ({"cron": "0 9 * * *", "timezone": ""}, "timezone must be an IANA"),
        (
            {"cron": "0 9 * * *", "missed": "some"},
            "missed must be one of 'skip', 'latest', 'all', got 'some'",
        ),
        ({"cron": "0 9 * * *", "heroes": [1, 2]}, "heroes must be a callable"),
        ({"cron": "0 9 * * *", "batch_size": 0}, "batch_size must be an int"),
        ({"cron": "0 9 * * *", "batch_size": True}, "batch_size must be an int"),
    ],
)
def test_bad_values_are_refused_at_declaration(options, message):
    """R-SCHED-02: an invalid cron, time zone, missed policy, heroes or batch
    size is refused when declared, naming the value; nothing is declared."""
    options = {"heroes": _users, **options}
    with pytest.raises(GenevaConfigurationError, match="schedule 'bad'") as raised:
        geneva.schedule("bad", Digest, **options)
    assert message in str(raised.value)
    assert "bad" not in geneva.schedules


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "non-empty str"),
        (None, "non-empty str"),
        (" padded", "surrounding whitespace"),
        ("tab\there", "control characters"),
        ("x" * 256, "at most 255"),
    ],
)
def test_bad_names_are_refused(name, message):
    """R-SCHED-02: a schedule name is printable text of 1..255 characters."""
    with pytest.raises(GenevaConfigurationError, match=message):
        geneva.schedule(name, Digest, cron="0 9 * * *", heroes=_users)


def test_bad_classes_are_refused():
    """R-SCHED-02: the class must be a workflow class declared on this extension."""
    with pytest.raises(GenevaConfigurationError, match="must be a class"):
        geneva.schedule("c", "Digest", cron="0 9 * * *", heroes=_users)
    with pytest.raises(GenevaConfigurationError, match="not a workflow class"):
        geneva.schedule("c", dict, cron="0 9 * * *", heroes=_users)
    with pytest.raises(GenevaConfigurationError, match="not a workflow class"):
        geneva.schedule("c", geneva.Workflow, cron="0 9 * * *", heroes=_users)
    other = Geneva(_OtherDb())
    with pytest.raises(GenevaConfigurationError, match="not a workflow class"):
        other.schedule("c", Digest, cron="0 9 * * *", heroes=_users)
    assert "c" not in geneva.schedules


class _OtherDb:
    """Just enough of a second Flask-SQLAlchemy for a second extension."""

    def __init__(self):
        from flask_sqlalchemy import SQLAlchemy

        self._db = SQLAlchemy()

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_a_class_that_needs_a_hero_needs_heroes():
    """R-SCHED-01: heroes may be omitted only for may_proceed_without_hero."""
    with pytest.raises(GenevaConfigurationError, match="Digest needs a hero"):
        geneva.schedule("needs-hero", Digest, cron="0 9 * * *")
    declared = geneva.schedule("hero-less", HeroLessReport, cron="0 9 * * *")
    try:
        assert declared.heroes is None
        assert declared.timezone == "UTC"
        assert declared.missed == "skip"
    finally:
        geneva.remove_schedule("hero-less")


def test_two_schedules_of_one_name_are_refused():
    """R-SCHED-02: a name is declared once; the second declaration names both classes."""
    geneva.schedule("twice", Digest, cron="0 9 * * *", heroes=_users)
    try:
        with pytest.raises(GenevaConfigurationError, match="declared twice") as raised:
            geneva.schedule("twice", HeroLessReport, cron="0 10 * * *")
        assert "Digest" in str(raised.value)
        assert "HeroLessReport" in str(raised.value)
        assert geneva.schedules["twice"].workflow_class is Digest
    finally:
        geneva.remove_schedule("twice")
    assert "twice" not in geneva.schedules


def test_next_fire_times_follow_the_zone():
    """R-SCHED-03: the expression is read in the schedule's zone; times are UTC."""
    declared = geneva.schedule(
        "berlin", Digest, cron="0 9 * * MON", timezone="Europe/Berlin", heroes=_users
    )
    try:
        after = datetime(2025, 1, 1, tzinfo=UTC)  # a Wednesday
        winter, _ = declared.fire_times_after(after, 2)
        assert winter == datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
        summer = declared.fire_times_after(datetime(2025, 7, 1, tzinfo=UTC), 1)[0]
        assert summer == datetime(2025, 7, 7, 7, 0, tzinfo=UTC)
    finally:
        geneva.remove_schedule("berlin")
