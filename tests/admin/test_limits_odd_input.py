"""The Limits pages under odd query strings and stored keys (R-LIM-45, R-ADM-06,
R-ADM-31): no 500, nothing echoed unescaped, keys shown exactly as stored.
"""

from __future__ import annotations

import html
from urllib.parse import quote

import pytest

from tests.admin.test_limits_page import AdminPartnerSync  # noqa: F401 - declares it
from tests.support.limit_rows import set_key

LIMITS_URL = "/geneva/limits/"
KEY_URL = "/geneva/limits/key"
NASTY = '<script>alert("k")</script>&amp;\N{PILE OF POO}'


@pytest.mark.parametrize(
    "query",
    [
        "limit=" + "n" * 5000,
        "key=" + "k" * 100_000,
        "limit=admin-partner-api&key=%00",
        "limit=%FF%FE&key=%C3",
        "busy=" + "1" * 1000,
        "limit=admin-partner-api&limit=x&key=a&key=b",
        "key=%25%5F%5C",
        "limit=" + quote(NASTY) + "&key=" + quote(NASTY),
    ],
)
def test_odd_query_strings_never_fail_either_page(client, query):
    """R-ADM-31: any query string renders both pages, echoing nothing raw."""
    for url in (LIMITS_URL, KEY_URL):
        response = client.get(f"{url}?{query}")
        assert response.status_code == 200, (url, query, response.data[:300])
        assert "<script>alert" not in response.get_data(as_text=True)


def test_stored_keys_are_escaped_and_shown_exactly(client):
    """R-ADM-06: a stored key with markup and an emoji is escaped on both pages
    and links to its own key page."""
    set_key("admin-partner-api", NASTY, running=1)
    set_key("admin-partner-api", "a ", running=1)
    listing = client.get(LIMITS_URL).get_data(as_text=True)
    assert "<script>alert" not in listing
    assert "&lt;script&gt;" in listing
    assert f'data-key="{NASTY}"' in html.unescape(listing)
    assert 'data-key="a "' in html.unescape(listing)
    page = client.get(f"{KEY_URL}?limit=admin-partner-api&key={quote(NASTY)}").get_data(
        as_text=True
    )
    assert "<script>alert" not in page
    assert "&lt;script&gt;" in page
    assert NASTY in html.unescape(page)
