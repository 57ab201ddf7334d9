"""Declaring and passing deadlines (SPEC §27.1, R-DL-01..03)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone
from zoneinfo import ZoneInfo

import pytest

from flask_geneva import StepConfigurationError
from flask_geneva import step
from flask_geneva.core import clock
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.deadlines.workflows import DAY
from tests.engine.deadlines.workflows import HOUR
from tests.engine.deadlines.workflows import T0
from tests.engine.deadlines.workflows import Monthly
from tests.engine.deadlines.workflows import PausedByDeadline
from tests.engine.deadlines.workflows import TwoDays
from tests.engine.deadlines.workflows import deadline_of
from tests.support.workflow import count_workflows


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (timedelta(0), "must be positive"),
        (timedelta(seconds=-5), "must be positive"),
        ("30 days", "must be a timedelta"),
        (True, "must be a timedelta"),
        (datetime(2030, 1, 1, tzinfo=UTC), "got the datetime"),
        (timedelta(days=40000), "at most 36500 days"),
    ],
)
def test_a_bad_class_deadline_is_refused_when_the_class_is_defined(value, words):
    """__geneva_deadline__ must be a positive timedelta or None: anything else
    fails the class definition with a message naming the value (R-DL-01)."""
    with pytest.raises(StepConfigurationError) as caught:

        class BadDeadline(geneva.Workflow):
            __geneva_deadline__ = value

            @step
            def only(self):
                pass

    assert "BadDeadline.__geneva_deadline__" in str(caught.value)
    assert words in str(caught.value)
    assert "BadDeadline" not in geneva.workflow_classes


@pytest.mark.parametrize("value", ["stop", "Cancel", None, 1])
def test_a_bad_on_deadline_is_refused_when_the_class_is_defined(value):
    """__geneva_on_deadline__ is "cancel" or "pause"; the message lists both
    (R-DL-03)."""
    with pytest.raises(StepConfigurationError) as caught:

        class BadOnDeadline(geneva.Workflow):
            __geneva_on_deadline__ = value

            @step
            def only(self):
                pass

    assert "'cancel', 'pause'" in str(caught.value)
    assert repr(value) in str(caught.value)


def test_subclasses_inherit_the_deadline_and_may_override_it():
    """The declarations are inherited unless set again; None removes the
    deadline (R-DL-01, R-DL-03)."""

    class MonthlyChild(Monthly):
        pass

    class NoDeadline(Monthly):
        __geneva_deadline__ = None

    class Paused(PausedByDeadline):
        __geneva_deadline__ = DAY

    assert MonthlyChild.__geneva_definitions__.deadline == timedelta(days=30)
    assert MonthlyChild.__geneva_definitions__.on_deadline == "cancel"
    assert NoDeadline.__geneva_definitions__.deadline is None
    assert Paused.__geneva_definitions__.deadline == DAY
    assert Paused.__geneva_definitions__.on_deadline == "pause"


def test_the_class_deadline_counts_from_creation(app, user):
    """A class deadline is stored as creation time + the timedelta (R-DL-01)."""
    with clock.frozen(T0):
        workflow = Monthly.create(hero=user)
    assert deadline_of(workflow.id) == T0 + timedelta(days=30)


def test_create_takes_a_timedelta_or_an_aware_datetime(app, user):
    """create(deadline=) takes a timedelta from now or an aware datetime, which
    wins over the class's; a datetime in another zone is stored in UTC
    (R-DL-02)."""
    berlin = datetime(2030, 5, 3, 12, 0, tzinfo=UTC).astimezone(
        ZoneInfo("Europe/Berlin")
    )
    with clock.frozen(T0):
        by_delta = TwoDays.create(hero=user, deadline=HOUR, allow_multiple=True)
        by_time = TwoDays.create(hero=user, deadline=berlin, allow_multiple=True)
        overriding = Monthly.create(hero=user, deadline=DAY)
        plain = TwoDays.create(hero=user, allow_multiple=True)
    assert deadline_of(by_delta.id) == T0 + HOUR
    assert deadline_of(by_time.id) == datetime(2030, 5, 3, 12, 0, tzinfo=UTC)
    assert deadline_of(overriding.id) == T0 + DAY
    assert deadline_of(plain.id) is None
    # workflow.deadline reads the same, aware (R-DL-02).
    db.session.expire_all()
    assert by_time.deadline == datetime(2030, 5, 3, 12, 0, tzinfo=UTC)
    assert by_delta.deadline.tzinfo is not None
    assert plain.deadline is None


@pytest.mark.parametrize(
    ("deadline", "error", "words"),
    [
        (datetime(2030, 5, 2, 10, 0), ValueError, "naive"),  # noqa: DTZ001 - the case
        (T0 - HOUR, ValueError, "is not in the future"),
        (T0, ValueError, "is not in the future"),
        (timedelta(0), ValueError, "must be positive"),
        ("tomorrow", TypeError, "aware datetime or a positive timedelta"),
        # Past the last datetime once in UTC: refused, never an OverflowError.
        (
            datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))),
            ValueError,
            "out of range in UTC",
        ),
    ],
)
def test_create_refuses_a_bad_deadline_and_writes_nothing(
    app, user, deadline, error, words
):
    """A naive datetime (SPEC §0), a time not in the future or out of range in
    UTC, or a non-positive duration is refused before anything is written
    (R-DL-02)."""
    with clock.frozen(T0), pytest.raises(error) as caught:
        TwoDays.create(hero=user, deadline=deadline)
    assert words in str(caught.value)
    assert count_workflows() == 0
