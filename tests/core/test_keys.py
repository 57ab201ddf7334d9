"""Ids typed by people (URLs, query strings, CLI arguments) parse or are refused."""

from __future__ import annotations

import uuid

import pytest

from flask_geneva.core.keys import MAX_BIGINT_KEY
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
