"""Job options: validation, normalization and merging (SPEC §5.5)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone
from enum import StrEnum
from types import MappingProxyType

import pytest

from flask_geneva.dsl.decorators import step
from flask_geneva.dsl.job_options import ALLOWED_JOB_OPTION_KEYS
from flask_geneva.dsl.job_options import merge_job_options
from flask_geneva.dsl.job_options import validate_job_options
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class Key(StrEnum):
    QUEUE = "queue"


def test_allowed_keys_are_exactly_the_four_options():
    """Only queue, priority, wait and wait_until are job options (R-JOB-03)."""
    assert ALLOWED_JOB_OPTION_KEYS == ("queue", "priority", "wait", "wait_until")


def test_valid_options_are_returned_normalized():
    """Valid options come back with timedelta wait and aware datetime (R-JOB-05)."""
    moment = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    result = validate_job_options(
        {"queue": "mail", "priority": 3, "wait": 30, "wait_until": moment},
        context="Step 'x'",
    )
    assert result == {
        "queue": "mail",
        "priority": 3,
        "wait": timedelta(seconds=30),
        "wait_until": moment,
    }


def test_unknown_key_names_the_key_and_the_allowed_set():
    """A typo like 'piority' is rejected naming it and the allowed keys (R-JOB-03)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        validate_job_options({"piority": 3}, context="Step 'deliver'")
    message = str(excinfo.value)
    assert message.startswith("Step 'deliver': ")
    assert "'piority'" in message
    for key in ALLOWED_JOB_OPTION_KEYS:
        assert repr(key) in message


def test_several_unknown_keys_are_all_named():
    """Every unknown key appears in the error message (R-JOB-03)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        validate_job_options({"queue": "q", "foo": 1, "bar": 2}, context="ctx")
    assert "'foo'" in str(excinfo.value)
    assert "'bar'" in str(excinfo.value)


@pytest.mark.parametrize("value", [42, "queue", object(), [1, 2]])
def test_non_mapping_input_is_rejected(value):
    """Input that dict() cannot convert is rejected as not a mapping (R-JOB-04)."""
    with pytest.raises(StepConfigurationError, match="cannot coerce") as excinfo:
        validate_job_options(value, context="W.default_job_options")
    assert str(excinfo.value).startswith("W.default_job_options: ")


def test_pairs_are_coerced_to_a_mapping():
    """A sequence of pairs is accepted like dict(...) accepts it (R-JOB-04)."""
    assert validate_job_options([("queue", "q")], context="c") == {"queue": "q"}


def test_none_is_an_empty_mapping():
    """None as the whole input means no options (R-JOB-04)."""
    assert validate_job_options(None, context="c") == {}


def test_keys_are_normalized_to_str():
    """Keys are converted with str() before validation (R-JOB-06)."""
    result = validate_job_options({Key.QUEUE: "q"}, context="c")
    assert list(result) == ["queue"]
    assert type(next(iter(result))) is str


@pytest.mark.parametrize("key", ALLOWED_JOB_OPTION_KEYS)
def test_none_value_is_accepted_as_unset(key):
    """A None value is accepted for every key and means unset (R-JOB-05)."""
    assert validate_job_options({key: None}, context="c") == {key: None}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("queue", 5),
        ("queue", ""),
        ("priority", "high"),
        ("priority", True),
        ("priority", 1.5),
        ("wait", -1),
        ("wait", "soon"),
        ("wait", timedelta(seconds=-5)),
        ("wait_until", "tomorrow"),
        ("wait_until", True),
        ("wait_until", float("nan")),
    ],
)
def test_wrong_value_types_name_key_value_and_type(key, value):
    """A bad value is rejected naming the key, value and its type (R-JOB-05)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        validate_job_options({key: value}, context="Step 's'")
    message = str(excinfo.value)
    assert message.startswith("Step 's': ")
    assert repr(key) in message
    assert repr(value) in message
    assert type(value).__name__ in message


def test_zero_wait_is_a_valid_duration():
    """A wait of 0 is kept as a zero timedelta, not treated as absent (R-JOB-05)."""
    assert validate_job_options({"wait": 0}, context="c") == {"wait": timedelta(0)}


def test_naive_wait_until_is_rejected():
    """A naive wait_until datetime is rejected (R-JOB-05)."""
    with pytest.raises(StepConfigurationError, match="naive"):
        validate_job_options({"wait_until": datetime(2030, 1, 1)}, context="c")  # noqa: DTZ001 - naive on purpose


def test_aware_wait_until_is_converted_to_utc():
    """An aware wait_until in another zone is normalized to UTC (R-JOB-05)."""
    local = datetime(2030, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    result = validate_job_options({"wait_until": local}, context="c")
    assert result["wait_until"] == datetime(2030, 1, 1, 10, 0, tzinfo=UTC)
    assert result["wait_until"].tzinfo is UTC


def test_epoch_seconds_wait_until_becomes_an_aware_datetime():
    """Epoch seconds for wait_until become an aware UTC datetime (R-JOB-05)."""
    result = validate_job_options({"wait_until": 1_900_000_000}, context="c")
    assert result["wait_until"] == datetime.fromtimestamp(1_900_000_000, UTC)
    assert result["wait_until"].tzinfo is UTC


def test_validation_is_idempotent():
    """Validating already validated options returns equal options (R-JOB-05)."""
    once = validate_job_options({"wait": 5, "wait_until": 1_900_000_000}, context="c")
    assert validate_job_options(once, context="c") == once


def test_input_mapping_is_not_modified():
    """Validation returns a new dict and leaves the input as it was (R-JOB-06)."""
    original = {"wait": 5}
    validate_job_options(original, context="c")
    assert original == {"wait": 5}


def test_merge_later_levels_override_key_by_key():
    """Class < instance < step, merged key by key (R-JOB-02)."""
    merged = merge_job_options(
        {"queue": "class", "priority": 1},
        {"priority": 2},
        {"queue": "step"},
    )
    assert merged == {"queue": "step", "priority": 2}


def test_merge_none_values_do_not_override_and_are_dropped():
    """A None value is unset: it neither overrides nor appears (R-JOB-02, R-JOB-05)."""
    merged = merge_job_options({"queue": "class"}, {"queue": None, "priority": None})
    assert merged == {"queue": "class"}


def test_merge_skips_none_levels_and_does_not_mutate_inputs():
    """None levels are skipped and the inputs are left unchanged (R-JOB-02)."""
    first = {"queue": "a"}
    second = {"queue": "b"}
    assert merge_job_options(first, None, second) == {"queue": "b"}
    assert first == {"queue": "a"}
    assert second == {"queue": "b"}


def test_merge_of_nothing_is_empty():
    """Merging no levels gives no options (R-JOB-02)."""
    assert merge_job_options() == {}
    assert merge_job_options(None, {}) == {}


def test_class_options_are_validated_with_the_class_context():
    """Class options are checked at class creation with '<Type>.default_job_options'
    as context (R-JOB-06, R-JOB-07)."""
    with pytest.raises(StepConfigurationError) as excinfo:

        class Broken(Workflow):
            default_job_options = {"piority": 1}

    assert str(excinfo.value).startswith("Broken.default_job_options: ")


def test_class_options_merge_through_inheritance_without_mutating_parent():
    """Child class options override parent keys; the parent keeps its own (R-INH-04)."""

    class Parent(Workflow):
        default_job_options = {"queue": "parent", "priority": 1}

    class Child(Parent):
        default_job_options = {"priority": 9, "wait": 3}

    assert dict(Child.__geneva_definitions__.default_job_options) == {
        "queue": "parent",
        "priority": 9,
        "wait": timedelta(seconds=3),
    }
    assert dict(Parent.__geneva_definitions__.default_job_options) == {
        "queue": "parent",
        "priority": 1,
    }


def test_class_options_are_read_only():
    """The collected class options cannot be modified in place (R-INH-01)."""

    class Options(Workflow):
        default_job_options = {"queue": "q"}

    options = Options.__geneva_definitions__.default_job_options
    assert isinstance(options, MappingProxyType)
    with pytest.raises(TypeError):
        options["queue"] = "other"  # type: ignore[index]


def test_step_options_are_validated_with_the_step_context():
    """Step options are checked with "Step '<name>'" as context (R-DEF-14, R-JOB-06)."""
    with pytest.raises(StepConfigurationError) as excinfo:

        class Broken(Workflow):
            @step(job_options={"priority": "high"})
            def deliver(self):
                pass

    assert str(excinfo.value).startswith("Step 'deliver': ")


def test_anonymous_step_options_use_the_assigned_name_as_context():
    """An anonymous step's options error names it step_<N> (R-DEF-03, R-JOB-06)."""
    with pytest.raises(StepConfigurationError) as excinfo:

        class Broken(Workflow):
            _first = step.anonymous("run")
            _second = step.anonymous("run", job_options={"queue": 1})

            def run(self):
                pass

    assert str(excinfo.value).startswith("Step 'step_2': ")


def test_step_options_are_stored_validated():
    """A step keeps its validated options as a read-only mapping (R-DEF-14)."""

    class Stored(Workflow):
        @step(job_options={"queue": "fast", "wait": 2})
        def deliver(self):
            pass

    options = Stored.__geneva_definitions__.steps.named("deliver").job_options
    assert dict(options) == {"queue": "fast", "wait": timedelta(seconds=2)}
    with pytest.raises(TypeError):
        options["queue"] = "slow"  # type: ignore[index]
