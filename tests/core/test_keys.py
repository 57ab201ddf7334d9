"""Ids typed by people (URLs, query strings, CLI arguments) parse or are refused."""

from __future__ import annotations

import uuid

import pytest

from flask_geneva.core.keys import MAX_BIGINT_KEY
from flask_geneva.core.keys import describe_key_type
from flask_geneva.core.keys import lookup_key
from flask_geneva.core.keys import parse_key

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", 1),
        (" 42 ", 42),
        (str(MAX_BIGINT_KEY), MAX_BIGINT_KEY),
        (str(MAX_BIGINT_KEY + 1), None),
        ("0", None),
        ("-1", None),
        ("1e9", None),
        ("٣", None),  # a non-ASCII digit
        ("9" * 40, None),
        ("", None),
        (None, None),
    ],
)
def test_bigint_keys(raw, expected):
    """Only 1 .. 2**63 - 1 in ASCII digits is a bigint key (R-DM-20)."""
    assert parse_key(raw, "bigint") == expected


def test_uuid_keys():
    """uuid keys parse with uuid.UUID; anything else is None (R-DM-20)."""
    value = uuid.uuid4()
    assert parse_key(str(value), "uuid") == value
    assert parse_key("123", "uuid") is None


@pytest.mark.parametrize(
    ("value", "key_type", "expected"),
    [
        (7, "bigint", 7),
        (" 7 ", "bigint", 7),
        (0, "bigint", None),
        (-1, "bigint", None),
        (MAX_BIGINT_KEY + 1, "bigint", None),
        (uuid.UUID(int=5), "uuid", uuid.UUID(int=5)),
        (str(uuid.UUID(int=5)), "uuid", uuid.UUID(int=5)),
    ],
)
def test_lookup_key_takes_keys_and_their_text(value, key_type, expected):
    """An int (a UUID) or its text is a key; an int no row can have is None (R-FLT-72)."""
    assert lookup_key(value, key_type) == expected


@pytest.mark.parametrize(
    ("value", "key_type", "error"),
    [
        ("abc", "bigint", ValueError),
        ("-1", "bigint", ValueError),
        ("\x00", "bigint", ValueError),
        ("123", "uuid", ValueError),
        (True, "bigint", TypeError),
        (1.0, "bigint", TypeError),
        (None, "bigint", TypeError),
        (b"1", "bigint", TypeError),
        (5, "uuid", TypeError),
    ],
)
def test_lookup_key_refuses_what_is_no_key_naming_it(value, key_type, error):
    """Anything else is a TypeError (not a key nor text) or a ValueError (text that is no key), naming the value and the allowed keys (R-FLT-72)."""
    with pytest.raises(error) as raised:
        lookup_key(value, key_type, what="workflow id")
    message = str(raised.value)
    assert f"invalid workflow id {value!r}" in message
    assert describe_key_type(key_type) in message
