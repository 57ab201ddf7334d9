"""Declaring steps that wait for workflow signals (SPEC §23.2, R-WSIG-05..08, R-DEF-22)."""

from __future__ import annotations

import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from types import SimpleNamespace

import pytest

from flask_geneva import SignalMatcher
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _step(cls, name):
    return cls.__geneva_definitions__.steps.named(name)


def test_a_name_a_matcher_or_a_matches_object():
    """wait_for takes a name, a SignalMatcher or an object with matches() (R-WSIG-05)."""

    class Custom:
        def matches(self, signal):
            return signal.name.startswith("pay")

    class Declared(Workflow):
        @step(wait_for="payment_confirmed")
        def by_name(self):
            pass

        @step(wait_for=SignalMatcher("approval", where=lambda wf, p: p["ok"]))
        def by_matcher(self):
            pass

        @step(wait_for=Custom())
        def by_object(self):
            pass

        @step
        def plain(self):
            pass

    by_name = _step(Declared, "by_name").wait_for
    assert (by_name.names, by_name.description) == (
        ("payment_confirmed",),
        "payment_confirmed",
    )
    signal = SimpleNamespace(name="approval", payload={"ok": True})
    assert _step(Declared, "by_matcher").wait_for.matches(None, signal)
    assert not _step(Declared, "by_matcher").wait_for.matches(
        None, SimpleNamespace(name="approval", payload={"ok": False})
    )
    custom = _step(Declared, "by_object").wait_for
    assert custom.names is None
    assert custom.matches(None, SimpleNamespace(name="payment", payload=None))
    assert _step(Declared, "plain").wait_for is None


def test_wait_timeout_and_on_wait_timeout_are_kept():
    """wait_timeout is a duration, on_wait_timeout one of skip/cancel/pause (R-WSIG-08)."""

    class Timed(Workflow):
        @step(wait_for="go", wait_timeout=90, on_wait_timeout="skip")
        def use(self):
            pass

    definition = _step(Timed, "use")
    assert definition.wait_timeout == timedelta(seconds=90)
    assert definition.on_wait_timeout == "skip"


def test_resumable_steps_and_anonymous_steps_accept_wait_for():
    """Resumable and anonymous steps take wait_for too (R-WSIG-07)."""

    class Both(Workflow):
        @resumable_step(wait_for="go")
        def chunked(self, it):
            pass

        later = step.anonymous(lambda self: None, wait_for="later")

    assert _step(Both, "chunked").wait_for.names == ("go",)
    assert _step(Both, "step_2").wait_for.names == ("later",)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"wait_timeout": 60}, "wait_timeout needs wait_for.*use wait="),
        ({"on_wait_timeout": "skip"}, "on_wait_timeout needs wait_for"),
        (
            {"wait_for": "go", "on_wait_timeout": "skip"},
            "on_wait_timeout='skip' needs wait_timeout",
        ),
        (
            {"wait_for": "go", "wait_timeout": 60, "on_wait_timeout": "reattempt"},
            "ExceptionPolicy\\('reattempt', matching=SignalWaitTimeout\\)",
        ),
        (
            {"wait_for": "go", "wait_timeout": 60, "on_wait_timeout": "later"},
            "must be one of 'skip', 'cancel', 'pause'",
        ),
        ({"wait_for": "go", "wait_timeout": 0}, "invalid wait_timeout 0"),
        ({"wait_for": ""}, "invalid wait_for '': a signal name is a non-empty str"),
        ({"wait_for": 42}, "invalid wait_for 42.*matches\\(signal\\)"),
    ],
)
def test_invalid_combinations_are_rejected_at_class_definition(options, message):
    """Each invalid value or combination names the option to use (R-WSIG-08)."""
    with pytest.raises(StepConfigurationError, match=message):

        class Broken(Workflow):
            @step(**options)
            def use(self):
                pass


def test_a_signal_matcher_checks_its_arguments():
    """SignalMatcher needs a non-empty name and a callable where (R-WSIG-05)."""
    with pytest.raises(StepConfigurationError, match="non-empty str"):
        SignalMatcher("")
    with pytest.raises(StepConfigurationError, match="callable"):
        SignalMatcher("a", where="field")


@pytest.mark.parametrize("name", ["x" * 256, "a\x00b"], ids=["256 chars", "NUL"])
def test_a_name_no_signal_can_have_is_refused(name):
    """wait_for= and SignalMatcher refuse a name a delivery would refuse (R-WSIG-75):
    at most 255 characters, no NUL; else the step could only time out.
    """
    with pytest.raises(StepConfigurationError, match="no signal could have"):

        class Unreachable(Workflow):
            @step(wait_for=name)
            def use(self):
                pass

    with pytest.raises(StepConfigurationError, match="at most 255 characters"):
        SignalMatcher(name)
    assert SignalMatcher("x" * 255).name == "x" * 255  # the longest allowed


@pytest.mark.parametrize(
    ("option", "value", "suggestion"),
    [
        ("wait_for", timedelta(days=2), r"wait=timedelta\(days=2\)"),
        ("wait_for", 172800, r"wait=172800"),
        ("wait_for", 2.5, r"wait=2\.5"),
        (
            "wait_for",
            datetime(2030, 1, 1, tzinfo=UTC),
            r"job_options=\{'wait_until': datetime\.datetime\(2030, 1, 1",
        ),
        ("wait", "payment", r"wait_for='payment'"),
        ("wait", "2 days", r"wait=timedelta\(days=2\)"),
        ("wait", "90 seconds", r"wait=timedelta\(seconds=90\)"),
        ("wait", SignalMatcher("approval"), r"wait_for=SignalMatcher\('approval'\)"),
    ],
)
def test_wait_and_wait_for_point_at_each_other(option, value, suggestion):
    """A duration, number or datetime given to wait_for names wait= (or the
    wait_until job option); a name, duration text or matcher given to wait names
    wait_for= (or the timedelta meant) (R-DEF-22)."""
    with pytest.raises(StepConfigurationError) as raised:

        class Confused(Workflow):
            @step(**{option: value})
            def later(self):
                pass

    message = str(raised.value)
    shown = "wait value" if option == "wait" else "wait_for"
    assert f"invalid {shown} {value!r}" in message
    assert re.search(suggestion, message), message
    other = "wait_for=" if option == "wait" else "wait_for waits for a workflow signal"
    assert other in message


def test_anonymous_and_resumable_steps_point_at_the_other_option_too():
    """step.anonymous and resumable_step share the hint (R-DEF-22)."""
    with pytest.raises(StepConfigurationError, match=r"wait_for='payment'"):
        step.anonymous(lambda self: None, wait="payment")
    with pytest.raises(StepConfigurationError, match=r"wait=timedelta\(seconds=3600\)"):
        resumable_step(wait_for=timedelta(hours=1))(lambda self, it: None)
