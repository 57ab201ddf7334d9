"""Empty states explain what to do and list the defined classes (issue 21; R-ADM-53)."""

from __future__ import annotations

import re

from tests.admin.support import ready_workflow


def _empty(html: str, what: str) -> str:
    match = re.search(
        rf'<div class="geneva-empty" data-geneva-empty="{what}">(.*?)</div>', html, re.S
    )
    assert match is not None, what
    return re.sub(r"<[^>]+>", "", match.group(1))


def test_empty_overview_and_lists_say_how_workflows_start_and_list_classes(client):
    """With no rows, the overview and both lists say how a workflow starts and name the defined classes (R-ADM-53)."""
    for url, what in (
        ("/geneva/", "workflows"),
        ("/geneva/workflows/", "workflows"),
        ("/geneva/step-executions/", "step executions"),
    ):
        text = _empty(client.get(url).get_data(as_text=True), what)
        assert "yet." in text, url
        assert ".create(hero=record)" in text
        assert "Defined workflow classes:" in text
        assert "AdminTwoStep" in text
        assert "AdminFailing" in text
    overview = client.get("/geneva/").get_data(as_text=True)
    assert 'data-geneva-empty="failures"' in overview


def test_a_filter_matching_nothing_offers_to_clear_it(client):
    """A filter that matches nothing says so and links the unfiltered list (R-ADM-53)."""
    ready_workflow()
    html = client.get("/geneva/workflows/?state=finished").get_data(as_text=True)
    text = _empty(html, "workflows")
    assert "No workflows match these filters." in text
    assert "clear the filters" in text
    assert 'href="/geneva/workflows/">clear the filters</a>' in html
    html = client.get("/geneva/step-executions/?state=failed").get_data(as_text=True)
    assert "No step executions match these filters." in _empty(html, "step executions")
