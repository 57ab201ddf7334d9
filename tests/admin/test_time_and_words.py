"""Times and policies in words for the admin (R-ADM-40, R-ADM-43): pure functions."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest

from flask_geneva import on_exception
from flask_geneva.admin.presenters import describe_policy
from flask_geneva.admin.presenters import format_interval
from flask_geneva.admin.time_display import parse_stored_time
from flask_geneva.admin.time_display import relative_time
from flask_geneva.admin.time_display import time_tag
from flask_geneva.policies.exception_policy import ExceptionPolicy

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (timedelta(0), "now"),
        (timedelta(milliseconds=400), "now"),
        (timedelta(microseconds=-999_999), "now"),
        (timedelta(seconds=1), "in 1 s"),
        (timedelta(seconds=45), "in 45 s"),
        (timedelta(seconds=-45), "45 s ago"),
        (timedelta(seconds=59, microseconds=999_999), "in 59 s"),
        (timedelta(seconds=60), "in 1 min"),
        (timedelta(seconds=89), "in 1 min"),
        (timedelta(seconds=90), "in 2 min"),
        (timedelta(minutes=14, seconds=29), "in 14 min"),
        (timedelta(minutes=14, seconds=30), "in 15 min"),
        (timedelta(minutes=-89), "89 min ago"),
        (timedelta(minutes=89, seconds=29), "in 89 min"),
        (timedelta(minutes=89, seconds=30), "in 90 min"),
        (timedelta(minutes=90), "in 2 h"),
        (timedelta(hours=-3, minutes=-10), "3 h ago"),
        (timedelta(hours=-3, minutes=-30), "4 h ago"),
        (timedelta(hours=35), "in 35 h"),
        (timedelta(hours=35, minutes=29, seconds=59), "in 35 h"),
        (timedelta(hours=35, minutes=30), "in 36 h"),
        (timedelta(hours=36), "in 2 d"),
        (timedelta(days=2) - timedelta(milliseconds=1), "in 2 d"),
        (timedelta(days=2) - timedelta(seconds=1), "in 2 d"),
        (timedelta(days=2), "in 2 d"),
        (timedelta(days=2, hours=11, minutes=59, seconds=59), "in 2 d"),
        (timedelta(days=2, hours=12), "in 3 d"),
        (timedelta(days=-4, hours=-2), "4 d ago"),
    ],
)
def test_relative_time_says_one_short_unit(offset, expected):
    """Relative times read "in 14 min" / "3 h ago" in one unit: whole seconds,
    then minutes, hours and days to the nearest (a half up), so a wait of 2 days
    reads "in 2 d" a moment after it was set; each unit's boundaries (R-ADM-40)."""
    assert relative_time(NOW + offset, NOW) == expected


def test_naive_times_are_read_as_utc():
    """A naive stored time (SQLite) is UTC (R-ADM-40)."""
    naive = datetime(2026, 12, 1, 9, 0, 0)  # noqa: DTZ001 - naive on purpose
    assert relative_time(naive, NOW) == "3 h ago"


def test_time_tag_puts_the_exact_time_on_hover_or_in_the_text():
    """A list time shows the phrase with the exact UTC time as title; a detail time the reverse (R-ADM-40)."""
    moment = NOW - timedelta(hours=3)
    assert str(time_tag(moment, NOW)) == (
        '<time class="geneva-time" datetime="2026-12-01T09:00:00Z" '
        'title="2026-12-01 09:00:00 UTC">3 h ago</time>'
    )
    assert str(time_tag(moment, NOW, exact=True)) == (
        '<time class="geneva-time geneva-time--exact" datetime="2026-12-01T09:00:00Z" '
        'title="3 h ago">2026-12-01 09:00:00 UTC</time> '
        '<span class="geneva-ago">(3 h ago)</span>'
    )
    assert str(time_tag(None, NOW)) == ""


def test_stored_operator_action_times_parse_or_stay_text():
    """Operator-action times stored as ISO text parse; anything else is shown as it is (R-ADM-40, R-ADM-31)."""
    parsed = parse_stored_time("2026-12-01T09:00:00.123456+00:00")
    assert parsed == datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)
    assert parse_stored_time("<b>yesterday</b>") == "<b>yesterday</b>"
    assert parse_stored_time(None) is None


class PartnerDown(Exception):
    """A matcher for the policy sentences."""


def test_policies_read_as_sentences_not_reprs():
    """A policy reads "reattempt up to 2 times, 30 s apart, then pause — for X — reported", never its repr (R-ADM-43)."""
    assert describe_policy(
        on_exception(PartnerDown, action="reattempt", wait=30, max_reattempts=2)
    ) == (
        "reattempt up to 2 times, 30 s apart, then pause — for "
        f"{__name__}.PartnerDown — reported"
    )
    assert describe_policy(
        ExceptionPolicy(
            "reattempt",
            wait=timedelta(seconds=2),
            terminal_action="cancel",
            report="terminal_only",
        )
    ) == (
        "reattempt up to 100 times, 2 s apart, then cancel — for any error — "
        "reported when terminal"
    )
    assert describe_policy(ExceptionPolicy("skip", report="never")) == (
        "skip — for any error — not reported"
    )
    assert describe_policy(ExceptionPolicy(handler="on_error")) == (
        "handled by on_error — for any error — reported"
    )


def test_waits_read_in_words():
    """A step's wait reads "2 h", not "2:00:00" (R-ADM-43)."""
    assert format_interval(timedelta(hours=2)) == "2 h"
    assert format_interval(timedelta(days=1, hours=6, minutes=3)) == "1 d 6 h"
    assert format_interval(90) == "1 min 30 s"
    assert format_interval(None) == ""
