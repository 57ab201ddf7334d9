"""The cursor codec (SPEC §10.5): tagged types, escaping, errors, size limit."""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections import OrderedDict
from datetime import UTC
from datetime import date
from datetime import datetime
from datetime import time
from datetime import timedelta
from datetime import timezone
from datetime import tzinfo
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from flask_geneva.core.cursors import TAG_KEY
from flask_geneva.core.cursors import check_cursor_size
from flask_geneva.core.cursors import deserialize_cursor
from flask_geneva.core.cursors import dump_cursor
from flask_geneva.core.cursors import encoded_size
from flask_geneva.core.cursors import serialize_cursor
from flask_geneva.exceptions import CursorSerializationError
from flask_geneva.exceptions import CursorTooLargeError

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

PLUS_0230 = timezone(timedelta(hours=2, minutes=30))
MINUS_0545 = timezone(-timedelta(hours=5, minutes=45))
SAMPLE_UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def assert_same(expected: Any, actual: Any, path: str = "cursor") -> None:
    """Assert equal values with the same type at every position, offsets included."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(expected, list):
        assert len(actual) == len(expected), path
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{path}[{index}]")
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), path
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif isinstance(expected, float):
        # repr distinguishes -0.0 from 0.0, which == does not.
        assert repr(actual) == repr(expected), path
    elif isinstance(expected, Decimal):
        assert actual.as_tuple() == expected.as_tuple(), path
    elif isinstance(expected, datetime | time):
        assert actual == expected, path
        assert actual.utcoffset() == expected.utcoffset(), path
        assert actual.replace(tzinfo=None) == expected.replace(tzinfo=None), path
    else:
        assert actual == expected, path


def round_trip(value: Any) -> Any:
    """Serialize, pass through JSON text, and deserialize."""
    return deserialize_cursor(json.loads(json.dumps(serialize_cursor(value))))


# --- native values (R-CUR-01) ----------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**80,
        1.5,
        -0.0,
        1e15,  # 1e16 and up are tagged (R-CUR-02)
        "",
        "héllo ✓",
        [],
        {},
        [1, "a", None, [2.5, {"k": False}]],
        {"page": 3, "ids": [1, 2, 3], "nested": {"deep": {"x": "y"}}},
    ],
)
def test_native_values_are_stored_as_themselves(value):
    """None, bool, int, finite float, str, list and str-keyed dict serialize unchanged (R-CUR-01)."""
    serialized = serialize_cursor(value)
    assert_same(value, serialized)
    assert_same(value, round_trip(value))


def test_serialize_returns_a_new_structure():
    """Serializing copies containers, so later edits to the cursor do not leak (R-CUR-01)."""
    value = {"ids": [1, 2]}
    serialized = serialize_cursor(value)
    value["ids"].append(3)
    assert serialized == {"ids": [1, 2]}


# --- tagged types (R-CUR-02) -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (date(2024, 5, 1), {TAG_KEY: "date", "value": "2024-05-01"}),
        (
            datetime(2024, 5, 1, 12, 30, 0, 250, tzinfo=PLUS_0230),
            {TAG_KEY: "datetime", "value": "2024-05-01T12:30:00.000250+02:30"},
        ),
        (
            datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
            {TAG_KEY: "datetime", "value": "2024-05-01T12:30:00+00:00"},
        ),
        (
            datetime(2024, 5, 1, 12, 30, 0, 1),  # noqa: DTZ001 - naive on purpose
            {TAG_KEY: "datetime", "value": "2024-05-01T12:30:00.000001"},
        ),
        (time(12, 30, 0, 250), {TAG_KEY: "time", "value": "12:30:00.000250"}),
        (
            time(23, 59, 59, tzinfo=MINUS_0545),
            {TAG_KEY: "time", "value": "23:59:59-05:45"},
        ),
        (timedelta(0), {TAG_KEY: "timedelta", "value": "P0DT0H0M0S"}),
        (
            timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5),
            {TAG_KEY: "timedelta", "value": "P1DT2H3M4.000005S"},
        ),
        (
            -timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5),
            {TAG_KEY: "timedelta", "value": "-P1DT2H3M4.000005S"},
        ),
        (Decimal("1.10"), {TAG_KEY: "decimal", "value": "1.10"}),
        (Decimal("-0"), {TAG_KEY: "decimal", "value": "-0"}),
        (Decimal("1E+2"), {TAG_KEY: "decimal", "value": "1E+2"}),
        (
            SAMPLE_UUID,
            {TAG_KEY: "uuid", "value": "12345678-1234-5678-1234-567812345678"},
        ),
        (1e16, {TAG_KEY: "float", "value": "1e+16"}),
        (-6.979109426455245e16, {TAG_KEY: "float", "value": "-6.979109426455245e+16"}),
    ],
)
def test_tagged_types_encode_as_geneva_tags_and_round_trip(value, encoded):
    """Tagged types become {"__geneva__": type, "value": str} and come back with their type (R-CUR-02)."""
    assert serialize_cursor(value) == encoded
    assert_same(value, round_trip(value))


def test_datetime_stays_datetime_and_date_stays_date():
    """A datetime does not come back as a date, nor a date as a datetime (R-CUR-02)."""
    moment = datetime(2024, 5, 1, tzinfo=UTC)
    day = date(2024, 5, 1)
    result = round_trip({"moment": moment, "day": day})
    assert type(result["moment"]) is datetime
    assert type(result["day"]) is date


def test_aware_datetime_keeps_its_offset_and_naive_stays_naive():
    """Aware datetimes keep microseconds and UTC offset; naive ones stay naive (R-CUR-02)."""
    aware = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=MINUS_0545)
    naive = datetime(2024, 1, 2, 3, 4, 5, 678901)  # noqa: DTZ001 - naive on purpose
    back_aware, back_naive = round_trip([aware, naive])
    assert back_aware.utcoffset() == -timedelta(hours=5, minutes=45)
    assert back_aware.microsecond == 678901
    assert back_naive.tzinfo is None
    assert back_naive == naive


def test_offset_with_seconds_round_trips():
    """A UTC offset with seconds and microseconds survives (R-CUR-02)."""
    odd = timezone(timedelta(hours=5, minutes=30, seconds=15, microseconds=7))
    value = [datetime(2024, 1, 1, tzinfo=odd), time(1, 2, 3, tzinfo=odd)]
    assert_same(value, round_trip(value))


def test_named_zone_comes_back_as_its_fixed_offset():
    """A ZoneInfo datetime comes back equal, with the same offset, as a fixed offset (R-CUR-02)."""
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        paris = zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no tz database on this machine")
    value = datetime(2024, 7, 1, 12, 0, tzinfo=paris)
    back = round_trip(value)
    assert back == value
    assert back.utcoffset() == timedelta(hours=2)


def test_extreme_timedeltas_round_trip():
    """timedelta.min, timedelta.max and one microsecond either way round-trip (R-CUR-02)."""
    values = [
        timedelta.min,
        timedelta.max,
        timedelta(microseconds=1),
        timedelta(microseconds=-1),
    ]
    assert_same(values, round_trip(values))


def test_decimal_keeps_its_exponent():
    """Decimal("1.10") comes back as Decimal("1.10"), not Decimal("1.1") (R-CUR-02)."""
    back = round_trip(Decimal("1.10"))
    assert str(back) == "1.10"
    assert back.as_tuple().exponent == -2


# --- escaping a user "__geneva__" key (R-CUR-02) ------------------------------------


def test_user_dict_with_marker_key_is_escaped_and_round_trips():
    """A user dict with a "__geneva__" key is wrapped so it round-trips as a dict (R-CUR-02)."""
    value = {TAG_KEY: "date", "value": "2024-05-01"}
    serialized = serialize_cursor(value)
    assert serialized == {
        TAG_KEY: "dict",
        "value": {TAG_KEY: "date", "value": "2024-05-01"},
    }
    assert_same(value, round_trip(value))


def test_escaped_dict_contents_are_serialized_and_nested_escapes_round_trip():
    """Escaped dicts hold serialized entries and nest inside each other (R-CUR-02)."""
    value = {
        TAG_KEY: {TAG_KEY: "dict", "value": date(2024, 1, 1)},
        "other": [{TAG_KEY: None}],
    }
    serialized = serialize_cursor(value)
    assert serialized == {
        TAG_KEY: "dict",
        "value": {
            TAG_KEY: {
                TAG_KEY: "dict",
                "value": {
                    TAG_KEY: "dict",
                    "value": {TAG_KEY: "date", "value": "2024-01-01"},
                },
            },
            "other": [{TAG_KEY: "dict", "value": {TAG_KEY: None}}],
        },
    }
    assert_same(value, round_trip(value))


# --- tuples and errors (R-CUR-03) --------------------------------------------------


def test_tuples_serialize_as_lists():
    """Tuples are stored as lists and come back as lists (documented lossy, R-CUR-03)."""
    value = {"range": (1, (2, date(2024, 1, 1)))}
    assert serialize_cursor(value) == {
        "range": [1, [2, {TAG_KEY: "date", "value": "2024-01-01"}]]
    }
    assert_same({"range": [1, [2, date(2024, 1, 1)]]}, round_trip(value))


def test_unsupported_type_names_type_path_and_supported_types():
    """An unsupported value raises CursorSerializationError naming type and path (R-CUR-03)."""
    with pytest.raises(CursorSerializationError) as excinfo:
        serialize_cursor({"page": [1, 2, object()]})
    message = str(excinfo.value)
    assert "object" in message
    assert 'cursor["page"][2]' in message
    assert "Supported types:" in message
    for name in ("datetime.timedelta", "decimal.Decimal", "uuid.UUID", "dict"):
        assert name in message


def test_cursor_serialization_error_is_a_type_error():
    """CursorSerializationError is a TypeError (R-CUR-03)."""
    with pytest.raises(TypeError):
        serialize_cursor({1, 2})


@pytest.mark.parametrize(
    ("value", "type_name", "path"),
    [
        ({1, 2}, "set", "cursor"),
        (b"raw", "bytes", "cursor"),
        ([[None, frozenset()]], "frozenset", "cursor[0][1]"),
        ({"a": {"b c": 1j}}, "complex", 'cursor["a"]["b c"]'),
        ({'q"uote': range(3)}, "range", 'cursor["q\\"uote"]'),
        ((1, Decimal), "type", "cursor[1]"),
    ],
)
def test_unsupported_types_report_their_path(value, type_name, path):
    """Each unsupported type is reported with its type name and path in the cursor (R-CUR-03)."""
    with pytest.raises(CursorSerializationError) as excinfo:
        serialize_cursor(value)
    assert f"type {type_name} at {path}." in str(excinfo.value)


def test_non_str_dict_key_raises():
    """A dict key that is not a str raises, naming the key, its type and the path (R-CUR-01)."""
    with pytest.raises(CursorSerializationError) as excinfo:
        serialize_cursor({"outer": {1: "x"}})
    message = str(excinfo.value)
    assert "dict key 1 of type int" in message
    assert 'cursor["outer"]' in message


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_float_raises(value):
    """NaN and infinite floats are rejected (R-CUR-01)."""
    with pytest.raises(CursorSerializationError, match=r"not finite at cursor\[0\]"):
        serialize_cursor([value])


@pytest.mark.parametrize("text", ["NaN", "sNaN", "Infinity", "-Infinity"])
def test_non_finite_decimal_raises(text):
    """NaN and infinite Decimals are rejected (R-CUR-02)."""
    with pytest.raises(CursorSerializationError, match="not finite"):
        serialize_cursor(Decimal(text))


class Color(enum.IntEnum):
    RED = 1


class Label(str):
    pass


class Day(date):
    pass


@pytest.mark.parametrize(
    "value", [Color.RED, Label("x"), OrderedDict(a=1), Day(2024, 1, 1)]
)
def test_subclasses_of_supported_types_are_rejected(value):
    """Subclasses would come back as their base type, so they raise (R-CUR-03, R-CUR-04)."""
    with pytest.raises(CursorSerializationError):
        serialize_cursor(value)


def test_container_that_contains_itself_raises():
    """A reference cycle raises CursorSerializationError, not RecursionError (R-CUR-03)."""
    loop: list[Any] = [1]
    loop.append({"again": loop})
    with pytest.raises(CursorSerializationError, match=r"contains itself"):
        serialize_cursor(loop)


def test_shared_but_acyclic_containers_are_fine():
    """The same list twice in a cursor is not a cycle (R-CUR-01)."""
    shared = [1, 2]
    assert serialize_cursor([shared, shared]) == [[1, 2], [1, 2]]


def test_lone_surrogate_string_raises():
    """A str that cannot be encoded as UTF-8 raises with its path (R-CUR-01)."""
    with pytest.raises(CursorSerializationError, match=r'cursor\["k"\]'):
        serialize_cursor({"k": "bad \ud800"})


class _NoOffset(tzinfo):
    def utcoffset(self, dt):
        return None

    def dst(self, dt):
        return None

    def tzname(self, dt):
        return "floating"


def test_time_with_tzinfo_without_fixed_offset_raises():
    """A time whose tzinfo gives no offset would lose it, so it raises (R-CUR-02)."""
    with pytest.raises(CursorSerializationError, match="no fixed offset"):
        serialize_cursor(time(1, 2, tzinfo=_NoOffset()))


# --- deserialization of malformed data (R-CUR-04) ----------------------------------


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({TAG_KEY: "set", "value": "x"}, "unknown tag 'set'"),
        ({TAG_KEY: "date"}, "tagged value with keys"),
        ({TAG_KEY: "date", "value": "x", "extra": 1}, "tagged value with keys"),
        ({TAG_KEY: "date", "value": 20240501}, "is not a str"),
        ({TAG_KEY: "date", "value": "yesterday"}, "date tag with value"),
        ({TAG_KEY: "decimal", "value": "NaN"}, "decimal tag with value"),
        ({TAG_KEY: "decimal", "value": "abc"}, "decimal tag with value"),
        ({TAG_KEY: "timedelta", "value": "P1D"}, "timedelta tag with value"),
        ({TAG_KEY: "uuid", "value": "nope"}, "uuid tag with value"),
        ({TAG_KEY: "dict", "value": "nope"}, "escaped dict"),
        ({"a": [{TAG_KEY: 5, "value": "x"}]}, "unknown tag 5, expected one of"),
        ([b"bytes"], "not JSON at cursor[0]"),
    ],
)
def test_malformed_serialized_cursor_raises_value_error(data, fragment):
    """Data that no serialization produces raises ValueError with the path (R-CUR-04)."""
    with pytest.raises(ValueError, match="not a serialized cursor") as excinfo:
        deserialize_cursor(data)
    assert fragment in str(excinfo.value)


def test_deserialize_does_not_modify_its_input():
    """deserialize_cursor builds a new structure (R-CUR-04)."""
    data = {"d": {TAG_KEY: "date", "value": "2024-05-01"}}
    deserialize_cursor(data)
    assert data == {"d": {TAG_KEY: "date", "value": "2024-05-01"}}


# --- size limit (R-CUR-10) ---------------------------------------------------------


def test_encoded_size_is_compact_utf8_json():
    """encoded_size counts bytes of compact UTF-8 JSON, non-ASCII at UTF-8 width (R-CUR-10)."""
    assert encoded_size({"a": [1, 2]}) == len('{"a":[1,2]}')
    assert encoded_size("é") == 4  # quotes + 2 bytes
    assert encoded_size("✓") == 5  # quotes + 3 bytes
    assert encoded_size(None) == 4


def test_cursor_exactly_at_the_limit_passes():
    """A cursor whose encoding is exactly max_size bytes passes the check (R-CUR-10)."""
    value = {"ids": list(range(50))}
    serialized = serialize_cursor(value)
    limit = encoded_size(serialized)
    assert check_cursor_size(serialized, limit) is None
    assert dump_cursor(value, max_size=limit) == serialized


def test_cursor_one_byte_over_the_limit_fails_with_guidance():
    """One byte over raises CursorTooLargeError stating size, limit, purpose and setting (R-CUR-10)."""
    serialized = serialize_cursor({"ids": list(range(50))})
    size = encoded_size(serialized)
    with pytest.raises(CursorTooLargeError) as excinfo:
        check_cursor_size(serialized, size - 1)
    message = str(excinfo.value)
    assert f"{size} bytes" in message
    assert f"limit of {size - 1} bytes" in message
    assert "small position marker" in message
    assert "not a payload" in message
    assert "GENEVA_MAX_CURSOR_SIZE" in message
    assert "None to disable" in message


def test_cursor_too_large_error_is_a_value_error():
    """CursorTooLargeError is a ValueError (R-CUR-10)."""
    with pytest.raises(ValueError, match="GENEVA_MAX_CURSOR_SIZE"):
        check_cursor_size("x" * 10, 5)


def test_none_limit_disables_the_check():
    """max_size None never raises, however large the cursor (R-CUR-10)."""
    check_cursor_size("x" * 1_000_000, None)


def test_dump_cursor_serializes_and_checks_size():
    """dump_cursor returns the serialized cursor and enforces the limit (R-IT-10, R-CUR-10)."""
    value = {"after": date(2024, 5, 1)}
    expected = {"after": {TAG_KEY: "date", "value": "2024-05-01"}}
    assert dump_cursor(value, max_size=None) == expected
    assert dump_cursor(value, max_size=encoded_size(expected)) == expected
    with pytest.raises(CursorTooLargeError):
        dump_cursor(value, max_size=encoded_size(expected) - 1)


def test_dump_cursor_rejects_unsupported_types_before_measuring():
    """An unsupported type raises CursorSerializationError even under a tiny limit (R-IT-10)."""
    with pytest.raises(CursorSerializationError):
        dump_cursor({"x": object()}, max_size=1)


# --- property tests (R-CUR-04) -----------------------------------------------------

fixed_offsets = st.integers(min_value=-1439, max_value=1439).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
timezones = st.none() | st.just(UTC) | fixed_offsets

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.dates()
    | st.datetimes(timezones=timezones)
    | st.times(timezones=timezones)
    | st.timedeltas()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.uuids()
)
keys = st.text(max_size=8) | st.sampled_from([TAG_KEY, "value"])
cursors = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=20,
)

property_settings = settings(max_examples=200, deadline=None)


@property_settings
@given(cursors)
def test_round_trip_preserves_value_and_type_everywhere(value):
    """deserialize(serialize(v)) == v with the same type at every position (R-CUR-04)."""
    back = deserialize_cursor(serialize_cursor(value))
    assert back == value
    assert_same(value, back)


@property_settings
@given(cursors)
def test_serialized_form_survives_json_text_unchanged(value):
    """The serialized cursor is plain JSON: json.loads(json.dumps(x)) == x, types kept (R-CUR-01, R-CUR-04)."""
    serialized = serialize_cursor(value)
    reloaded = json.loads(json.dumps(serialized, allow_nan=False))
    assert reloaded == serialized
    assert_same(serialized, reloaded)
    assert_same(value, deserialize_cursor(reloaded))
    assert encoded_size(serialized) == len(
        json.dumps(serialized, separators=(",", ":"), ensure_ascii=False).encode()
    )


@pytest.mark.parametrize("value", [0.5, 1.0, 1.5e-07, 9999999999999998.0, -2.5])
def test_floats_without_a_positive_exponent_are_stored_as_themselves(value):
    """Only floats of 1e16 and more (a positive exponent) are tagged (R-CUR-02)."""
    assert serialize_cursor(value) == value
    assert_same(value, round_trip(value))


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e+16x"])
def test_a_float_tag_that_is_not_a_finite_float_is_malformed(text):
    """A stored float tag must hold a finite float's text (R-CUR-02)."""
    with pytest.raises(ValueError, match="float tag"):
        deserialize_cursor({TAG_KEY: "float", "value": text})
