"""Backoff strategies as values: curves, jitter, Retry-After, validation (SPEC §9.7)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva import Backoff
from flask_geneva import BackoffError
from flask_geneva import ExceptionPolicy
from flask_geneva import StepConfigurationError
from flask_geneva import on_exception
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.admin.presenters import wait_in_words
from flask_geneva.core import clock
from flask_geneva.policies.backoff import CallableBackoff
from flask_geneva.policies.backoff import jitter_fraction
from flask_geneva.policies.backoff import jitter_key
from flask_geneva.policies.backoff import parse_retry_after
from flask_geneva.policies.resolution import decide
from flask_geneva.policies.resolution import resolve_policy

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def seconds(strategy, attempt, error=None, key="wf\x1fstep\x1f1"):
    return strategy.compute(attempt, error, key=key).wait.total_seconds()


def test_exponential_doubles_from_base_and_stops_at_the_cap():
    """base * factor ** (attempt - 1), capped before jitter (R-POL-53, R-POL-51)."""
    strategy = Backoff.exponential(5, cap=60, jitter=0)
    assert [seconds(strategy, a) for a in range(1, 7)] == [5, 10, 20, 40, 60, 60]
    tripled = Backoff.exponential(timedelta(seconds=2), factor=3, jitter=0)
    assert [seconds(tripled, a) for a in (1, 2, 3)] == [2, 6, 18]


def test_exponential_without_cap_never_overflows():
    """A huge attempt gives the 100-year limit, not an OverflowError (R-POL-52)."""
    strategy = Backoff.exponential(1)
    assert strategy.compute(10**6, None, key="k").wait == timedelta(days=36500)


def test_polynomial_is_activejobs_polynomially_longer():
    """attempt ** 4 + 2 seconds: 3, 18, 83, 258, 627 (R-POL-53)."""
    strategy = Backoff.polynomial(jitter=0)
    assert [seconds(strategy, a) for a in range(1, 6)] == [3, 18, 83, 258, 627]
    assert seconds(Backoff.polynomial(cap=100, jitter=0), 4) == 100


@given(
    attempt=st.integers(min_value=1, max_value=40),
    workflow_id=st.integers(min_value=1, max_value=10**9),
    jitter=st.floats(min_value=0, max_value=1),
)
def test_jitter_only_adds_at_most_its_fraction(attempt, workflow_id, jitter):
    """computed <= wait <= computed * (1 + jitter) (R-POL-52)."""
    strategy = Backoff.exponential(1, cap=3600, jitter=jitter)
    plain = min(2.0 ** (attempt - 1), 3600)
    key = jitter_key(workflow_id, "call_api", attempt)
    wait = seconds(strategy, attempt, key=key)
    assert plain - 1e-6 <= wait <= plain * (1 + jitter) + 1e-6


def test_jitter_is_deterministic_per_workflow_step_and_attempt():
    """Same (workflow, step, attempt) → same wait; others differ (R-POL-52)."""
    strategy = Backoff.exponential(100)
    same = {seconds(strategy, 3, key=jitter_key(7, "call", 3)) for _ in range(5)}
    assert len(same) == 1
    others = {
        seconds(strategy, 3, key=jitter_key(workflow_id, "call", 3))
        for workflow_id in range(50)
    }
    assert len(others) > 40  # spread, not one moment for every workflow
    assert jitter_fraction("a") == jitter_fraction("a")
    assert 0 <= jitter_fraction("b") < 1
    assert jitter_key(7, "call", 3) != jitter_key(7, "call", 4)


class RateLimited(Exception):
    def __init__(self, retry_after=None):
        super().__init__("429")
        self.retry_after = retry_after


class Response:
    def __init__(self, headers):
        self.headers = headers


class HTTPError(Exception):
    def __init__(self, headers):
        super().__init__("503")
        self.response = Response(headers)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (120, 120),
        (1.5, 1.5),
        (timedelta(minutes=2), 120),
        ("120", 120),
        (" 7 ", 7),
        (b"30", 30),
        ("Tue, 01 Dec 2026 12:01:30 GMT", 90),
        ("Tue, 01 Dec 2026 11:00:00 GMT", 0),  # in the past
    ],
)
def test_retry_after_reads_seconds_timedeltas_and_http_values(value, expected):
    """Seconds, timedelta, delta-seconds and HTTP-date (R-POL-54)."""
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    strategy = Backoff.retry_after(default=5)
    with clock.frozen(now):
        assert seconds(strategy, 1, RateLimited(value)) == expected
    assert parse_retry_after(value, now) == timedelta(seconds=expected)


@pytest.mark.parametrize(
    "value", [None, -3, "soon", "-5", float("nan"), object(), "\u00b2", "\u0663"]
)
def test_retry_after_falls_back_to_the_default(value):
    """Missing, negative or unparsable → default; the label says so (R-POL-54)."""
    computed = Backoff.retry_after(default=timedelta(seconds=9)).compute(
        2, RateLimited(value), key="k"
    )
    assert computed.wait == timedelta(seconds=9)
    assert computed.label == "no Retry-After, default wait"


def test_retry_after_reads_the_response_header_and_caps_it():
    """error.response.headers['Retry-After'] is read; cap limits it (R-POL-54)."""
    strategy = Backoff.retry_after(default=1, cap=60)
    assert seconds(strategy, 1, HTTPError({"Retry-After": "45"})) == 45
    assert seconds(strategy, 1, HTTPError({"Retry-After": "4500"})) == 60
    fallback = Backoff.retry_after(default=Backoff.exponential(2, jitter=0))
    computed = fallback.compute(3, HTTPError({}), key="k")
    assert computed.wait == timedelta(seconds=8)
    assert computed.label == "exponential backoff, no Retry-After"


def test_a_callable_is_a_strategy_and_its_result_is_checked():
    """(attempt, error) -> timedelta; a bad result raises BackoffError (R-POL-50/55)."""

    def linear(attempt, error):
        return timedelta(seconds=10 * attempt)

    policy = ExceptionPolicy("reattempt", wait=linear)
    assert isinstance(policy.wait, CallableBackoff)
    assert seconds(policy.wait, 3) == 30
    assert policy.wait.label.endswith("linear")

    returns_int = CallableBackoff(lambda attempt, error: 5)
    with pytest.raises(BackoffError, match=r"returned 5 \(int\).*timedelta"):
        returns_int.compute(1, None, key="k")
    negative = CallableBackoff(lambda attempt, error: timedelta(seconds=-1))
    with pytest.raises(BackoffError, match="from 0 to 100 years"):
        negative.compute(1, None, key="k")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Backoff.exponential(0), "invalid base 0"),
        (lambda: Backoff.exponential(-1), "invalid base -1"),
        (lambda: Backoff.exponential("5"), "invalid base '5'"),
        (lambda: Backoff.exponential(1, factor=0.5), "invalid factor 0.5"),
        (lambda: Backoff.exponential(1, factor=True), "invalid factor True"),
        (lambda: Backoff.exponential(1, cap=0), "invalid cap 0"),
        (lambda: Backoff.exponential(1, jitter=1.5), "invalid jitter 1.5"),
        (lambda: Backoff.polynomial(exponent=0), "invalid exponent 0"),
        (lambda: Backoff.polynomial(offset=-2), "invalid offset -2"),
        (lambda: Backoff.retry_after(default="x"), "invalid default 'x'"),
        (lambda: Backoff.retry_after(default=1, attribute="a b"), "invalid attribute"),
        (
            lambda: ExceptionPolicy("reattempt", wait=lambda attempt: attempt),
            "two positional arguments",
        ),
        (lambda: ExceptionPolicy("reattempt", wait="soon"), "invalid wait 'soon'"),
        (lambda: ExceptionPolicy("reattempt", wait=-1), "invalid wait -1"),
        (lambda: ExceptionPolicy("reattempt", wait=RuntimeError), "invalid wait"),
        (
            lambda: on_exception(
                TimeoutError, action="reattempt", wait=lambda: timedelta(0)
            ),
            "two positional arguments",
        ),
    ],
)
def test_bad_values_fail_at_definition_naming_the_value(build, message):
    """Errors name the value and the allowed forms (R-POL-50, R-POL-53)."""
    with pytest.raises(StepConfigurationError, match=message) as excinfo:
        build()
    text = str(excinfo.value)
    assert "must" in text


def test_backoff_wait_is_still_only_for_reattempt():
    """wait=<strategy> with another action is refused (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match="only allowed with action"):
        ExceptionPolicy("pause", wait=Backoff.polynomial())


def test_decide_uses_the_consecutive_count_plus_one_and_records_the_label():
    """attempt = count + 1; a terminal result computes no wait (R-POL-51, R-POL-10)."""
    policy = ExceptionPolicy(
        "reattempt", wait=Backoff.exponential(10, jitter=0), max_reattempts=3
    )
    resolution = resolve_policy(policy, (), TimeoutError())
    first = decide(resolution, 0, error=TimeoutError(), workflow_id=1, step_name="s")
    third = decide(resolution, 2, error=TimeoutError(), workflow_id=1, step_name="s")
    assert first.wait == timedelta(seconds=10)
    assert third.wait == timedelta(seconds=40)
    assert third.backoff == "exponential backoff"
    terminal = decide(resolution, 3, error=TimeoutError(), workflow_id=1, step_name="s")
    assert (terminal.action, terminal.wait, terminal.backoff) == ("pause", None, None)
    fixed = ExceptionPolicy("reattempt", wait=30)
    plain = decide(resolve_policy(fixed, (), TimeoutError()), 5)
    assert (plain.wait, plain.backoff) == (timedelta(seconds=30), None)


def test_the_admin_sentence_names_the_wait_in_words_and_the_strategy():
    """'reattempt 3 of 10 in 1 min 12 s (exponential backoff)' (R-PDR-07)."""
    sentence = describe_policy_decision(
        {
            "source": "class_specific",
            "index": 0,
            "matched_by": "TimeoutError",
            "action": "reattempt",
            "wait_seconds": 72.4,
            "backoff": "exponential backoff",
            "terminal": False,
            "consecutive_reattempts": 2,
            "max_reattempts": 10,
            "report": "never",
            "reported": False,
            "handler": None,
        }
    )
    assert sentence.startswith("reattempt 3 of 10 in 1 min 12 s (exponential backoff)")
    assert [wait_in_words(v) for v in (30, 1.5, 60, 3600, 3725, 90061)] == [
        "30 s",
        "1.5 s",
        "1 min",
        "1 h",
        "1 h 2 min 5 s",
        "1 d 1 h 1 min 1 s",
    ]


@pytest.mark.parametrize("base", [1e-9, 4e-7, timedelta(0)])
def test_sub_microsecond_base_names_the_lower_bound(base):
    """A base below timedelta's resolution says so, not "must be positive" (R-POL-50)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        Backoff.exponential(base)
    text = str(excinfo.value)
    assert f"invalid base {base!r}" in text
    assert "from 1 microsecond" in text
    assert "positive" not in text
