"""Declaring a step timeout: ``@step(timeout=...)`` (R-STO-01, R-STO-02, R-DEF-23)."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

import flask_geneva
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.exceptions import StepTimeout
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _step(cls, name):
    return cls.__geneva_definitions__.steps.named(name)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (timedelta(minutes=5), timedelta(minutes=5)),
        (90, timedelta(seconds=90)),
        (0.5, timedelta(milliseconds=500)),
    ],
)
def test_a_timeout_is_a_positive_duration_or_seconds(given, expected):
    """timedelta, int and float seconds are accepted and stored as a timedelta (R-STO-01)."""

    class TimedDeclared(Workflow):
        @step(timeout=given)
        def work(self):
            pass

        @step
        def untimed(self):
            pass

    assert _step(TimedDeclared, "work").timeout == expected
    assert _step(TimedDeclared, "untimed").timeout is None


def test_anonymous_repeat_and_resumable_steps_take_a_timeout():
    """step.anonymous, step.repeat and @resumable_step accept timeout (R-STO-01)."""

    class TimedKinds(Workflow):
        one = step.anonymous(lambda wf: None, name="one", timeout=3)
        more = step.repeat(2, lambda wf: None, timeout=timedelta(seconds=4))

        @resumable_step(timeout=timedelta(minutes=1), max_runtime=30)
        def walk(self, it):
            pass

    steps = TimedKinds.__geneva_definitions__.steps
    assert [s.timeout for s in steps] == [
        timedelta(seconds=3),
        timedelta(seconds=4),
        timedelta(seconds=4),
        timedelta(minutes=1),
    ]


@pytest.mark.parametrize(
    "bad",
    [0, -1, timedelta(0), timedelta(seconds=-5), True, "5 minutes", float("nan")],
)
def test_a_bad_timeout_is_refused_at_class_definition(bad):
    """Zero, negative, bool, text and NaN are refused when the class is defined,
    naming the value and the allowed forms (R-STO-01)."""
    with pytest.raises(StepConfigurationError) as raised:

        class TimedBroken(Workflow):
            @step(timeout=bad)
            def work(self):
                pass

    message = str(raised.value)
    assert message.startswith(f"Step 'work': invalid timeout {bad!r}")
    assert "a positive timedelta or number of seconds" in message
    assert "timedelta(minutes=5)" in message


def test_a_misspelt_timeout_names_the_option():
    """An unknown keyword close to timeout names it (R-DEF-23)."""
    with pytest.raises(StepConfigurationError, match="did you mean 'timeout'"):

        class TimedMisspelt(Workflow):
            @step(timout=5)
            def work(self):
                pass


def test_step_timeout_is_a_picklable_geneva_error_exported_by_the_package():
    """StepTimeout is an Exception for the policies, exported, and survives pickle (R-STO-02)."""
    assert flask_geneva.StepTimeout is StepTimeout
    assert issubclass(StepTimeout, GenevaError)
    assert issubclass(StepTimeout, Exception)
    error = StepTimeout("too slow", step_name="work", timeout_seconds=2.5)
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (str(copy), copy.step_name, copy.timeout_seconds) == (
        "too slow",
        "work",
        2.5,
    )


class QuotaTimeout(StepTimeout):
    """A user's own StepTimeout, with its own __init__ and attribute."""

    def __init__(self, quota: str) -> None:
        super().__init__(f"quota {quota} ran out", step_name="sync")
        self.quota = quota


def test_a_subclass_of_step_timeout_survives_pickle_as_itself():
    """A StepTimeout subclass raised by user code comes back from pickle as
    that subclass, with its own attributes and message (R-STO-02)."""
    copy = pickle.loads(pickle.dumps(QuotaTimeout("api")))  # noqa: S301 - our own bytes
    assert type(copy) is QuotaTimeout
    assert (str(copy), copy.quota, copy.step_name) == (
        "quota api ran out",
        "api",
        "sync",
    )
    assert copy.timeout_seconds is None
