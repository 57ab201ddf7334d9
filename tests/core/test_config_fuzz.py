"""Every ``GENEVA_*`` setting fuzzed with values of the wrong type or range
(issue 41, R-FLT-70, R-CFG-01..03).

A value is taken, or refused with a ``GenevaConfigurationError`` raised by the
settings' own checks that names the setting (tests/support/refusals.py); in an
app, ``reload_settings`` then leaves the settings in force unchanged. The
failing inputs fuzzing found are kept as explicit examples.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import example
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from flask_geneva.core.config import DEFAULTS
from flask_geneva.core.config import admin_config_from_mapping
from flask_geneva.core.config import config_from_mapping
from flask_geneva.exceptions import GenevaConfigurationError
from flask_geneva.ext.app_state import current_state
from tests.apps.basic import geneva
from tests.support.fuzzing import with_fixtures
from tests.support.refusals import assert_clear_refusal

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

SETTINGS = sorted(DEFAULTS)
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=16),
    st.binary(max_size=4),
    st.datetimes(),
    st.timedeltas(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.decimals(allow_nan=True),
    st.fractions(),
    st.complex_numbers(),
    st.sampled_from(
        [
            "\x00",
            "\ud800",
            "q" * 300,
            "10 minutes",
            "builtins:print",
            "no.such.module:thing",
            ":",
            2**63,
            10**400,
            timedelta.max,
            timedelta(microseconds=-1),
            Decimal("sNaN"),
            -0.0,
            1e300,
            object(),
            print,
            type,
        ]
    ),
)


def _refusal(
    values: dict[str, object], *, testing: bool
) -> GenevaConfigurationError | None:
    """What validating ``values`` raised, or None."""
    try:
        config_from_mapping(values, testing=testing)
        admin_config_from_mapping({**DEFAULTS, **values})
    except GenevaConfigurationError as error:
        return error
    return None


@settings(max_examples=300, deadline=None)
@given(
    values=st.dictionaries(
        st.sampled_from(SETTINGS), ODD_VALUES, min_size=1, max_size=3
    ),
    testing=st.booleans(),
)
@example(values={"GENEVA_DEFAULT_QUEUE": "a\x00b"}, testing=False).via(
    "a queue PostgreSQL's JSON cannot hold (issue 41)"
)
@example(values={"GENEVA_DEFAULT_QUEUE": "\ud800"}, testing=False).via(
    "a queue no driver encodes (issue 41)"
)
@example(values={"GENEVA_DEFAULT_QUEUE": "q" * 256}, testing=False).via(
    "a queue RabbitMQ refuses (issue 41)"
)
def test_every_setting_is_taken_or_refused_naming_it(values, testing):
    """Fuzzed values of every GENEVA_* setting: valid settings, or a GenevaConfigurationError from the settings' checks naming the setting (R-FLT-70, R-CFG-01, R-CFG-03)."""
    error = _refusal(values, testing=testing)
    if error is not None:
        assert_clear_refusal(error)
        assert any(name in str(error) for name in values), str(error)


@pytest.mark.parametrize(
    ("queue", "problem"),
    [
        ("a\x00b", "it holds a NUL character"),
        ("\ud800", "it is not valid Unicode"),
        ("q" * 256, "it is 256 bytes long"),
        ("", "got ''"),
    ],
)
def test_a_default_queue_no_broker_takes_is_refused(queue, problem):
    """GENEVA_DEFAULT_QUEUE follows the queue job option's rule (R-FLT-71)."""
    with pytest.raises(GenevaConfigurationError) as raised:
        config_from_mapping({"GENEVA_DEFAULT_QUEUE": queue}, testing=True)
    assert_clear_refusal(
        raised.value, "GENEVA_DEFAULT_QUEUE must be a non-empty str", problem
    )


@with_fixtures(max_examples=25)
@given(key=st.sampled_from(SETTINGS), value=ODD_VALUES)
def test_reload_settings_keeps_the_settings_in_force_when_a_value_is_refused(
    app, key, value
):
    """reload_settings() with a fuzzed value: the new settings, or a refusal naming the setting while the settings in force stay the same object (R-FLT-70, R-CFG-02)."""
    state = current_state()
    in_force = state.config
    original = app.config.get(key, DEFAULTS[key])
    app.config[key] = value
    try:
        geneva.reload_settings(app)
    except GenevaConfigurationError as error:
        assert_clear_refusal(error, key)
        assert state.config is in_force
    finally:
        app.config[key] = original
        geneva.reload_settings(app)
