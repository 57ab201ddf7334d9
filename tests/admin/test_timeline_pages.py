"""The workflow page's execution timeline, 100 executions a page (R-ADM-57, R-ADM-12)."""

from __future__ import annotations

import html
import re

from flask_geneva.admin.workflow_detail import TIMELINE_PAGE_SIZE
from tests.admin.support import detail_url
from tests.admin.support import ready_workflow
from tests.admin.support import store_executions
from tests.support.workflow import update_execution

ROW = re.compile(r'<tr data-execution-id="([^"]+)"')
BAR = re.compile(r'<g class="bar [^"]*" data-execution-id="([^"]+)"')
OLDER = re.compile(r'<a rel="next" class="geneva-older" href="([^"]+)"')
NEWER = re.compile(r'<a rel="prev" class="geneva-newer" href="([^"]+)"')


def timeline_ids(text: str) -> list[str]:
    """The execution ids of the page's timeline table, in page order."""
    table = text.split('class="table table-sm geneva-timeline"', 1)[1]
    return ROW.findall(table.split("</table>", 1)[0])


def link(pattern: re.Pattern[str], text: str) -> str | None:
    found = pattern.findall(text)
    return html.unescape(found[0]) if found else None


def test_more_executions_than_a_page_show_the_newest_page_oldest_first(client):
    """With 251 executions the page lists the newest 100, oldest first, says which they are and links to older ones only (R-ADM-57)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 250)  # plus its scheduled one: 251
    assert len(every) == 251
    text = client.get(detail_url(workflow_id)).get_data(as_text=True)
    assert timeline_ids(text) == every[-TIMELINE_PAGE_SIZE:]
    assert "Executions 1\N{EN DASH}100 of 251, counted from the newest" in text
    older = link(OLDER, text)
    assert older is not None
    # The links count from the newest execution as this page saw it (R-ADM-57).
    assert older.endswith(f"?page=2&upto={every[-1]}#geneva-timeline")
    assert link(NEWER, text) is None
    # The pager is above and below the table.
    assert text.count('class="geneva-pager geneva-timeline-pager') == 2


def test_following_the_older_links_shows_every_execution_exactly_once(client):
    """Page after page, the older links lead through all executions with none lost or shown twice; the newer link leads back (R-ADM-57)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 250)
    url: str | None = detail_url(workflow_id)
    seen: list[list[str]] = []
    texts = []
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200
        text = response.get_data(as_text=True)
        texts.append(text)
        seen.append(timeline_ids(text))
        url = link(OLDER, text)
    assert [len(ids) for ids in seen] == [100, 100, 51]
    assert [i for ids in reversed(seen) for i in ids] == every
    assert "Executions 201\N{EN DASH}251 of 251, counted from the newest" in texts[-1]
    newer = link(NEWER, texts[-1])
    assert newer is not None
    assert newer.endswith(f"?page=2&upto={every[-1]}#geneva-timeline")
    assert timeline_ids(client.get(newer).get_data(as_text=True)) == seen[1]
    # Past page 2, a link leads back to the newest page.
    assert re.search(r'<a rel="first" class="geneva-newest" href="[^"?]+#', texts[-1])


def test_the_chart_draws_the_rows_of_the_page_shown(client):
    """On each page the chart draws one bar per table row, in the table's order (R-ADM-57, R-ADM-12)."""
    workflow_id = ready_workflow().id
    store_executions(workflow_id, 150)
    for page in ("1", "2"):
        text = client.get(
            detail_url(workflow_id), query_string={"page": page}
        ).get_data(as_text=True)
        assert '<svg class="geneva-chart"' in text
        rows = timeline_ids(text)
        assert BAR.findall(text) == rows
        assert f"{len(rows)} executions;" in text


def test_the_plan_and_the_next_run_come_from_every_execution_on_an_older_page(client):
    """On the last page the next run is still shown (the newest execution is on page 1) and a step whose only executions are on the last page is done (R-ADM-57, R-ADM-12)."""
    workflow_id = ready_workflow().id
    # 30 oldest run "second", the 220 newer "first": page 1 has no "second".
    store_executions(workflow_id, 250, steps=("second",) * 3 + ("first",) * 22)
    for page in ("1", "3"):
        text = client.get(
            detail_url(workflow_id), query_string={"page": page}
        ).get_data(as_text=True)
        assert 'geneva-next-run">' in text
        assert '<tr class="geneva-plan--done">\n      <td>second</td>' in text


def test_a_bad_page_or_one_past_the_end_says_so(client):
    """An invalid page shows the newest page with a note; a page past the end says it has no rows and links back (R-ADM-57, R-ADM-31)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 120)
    text = client.get(detail_url(workflow_id), query_string={"page": "x"}).get_data(
        as_text=True
    )
    assert "ignored page &#39;x&#39;: use a whole number" in text
    assert timeline_ids(text) == every[-100:]
    text = client.get(detail_url(workflow_id), query_string={"page": "7"}).get_data(
        as_text=True
    )
    assert "page 7 is past the end of the list: it has no rows" in text
    assert "No executions on this page: the timeline has 121." in text
    assert timeline_ids(text) == []
    newer = link(NEWER, text)  # the last page with rows
    assert newer is not None
    assert newer.endswith(f"?page=2&upto={every[-1]}#geneva-timeline")
    assert timeline_ids(client.get(newer).get_data(as_text=True)) == every[:21]


def test_a_workflow_with_few_executions_has_no_pager(client):
    """Up to 100 executions: one page, no pager and no range line (R-ADM-57)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 99)
    text = client.get(detail_url(workflow_id)).get_data(as_text=True)
    assert timeline_ids(text) == every
    assert "geneva-timeline-pager" not in text
    assert "counted from the newest" not in text


def test_a_chain_continuing_from_an_older_page_keeps_its_cursor_and_link(client):
    """The page's first row continues an execution on the older page: its chain entry shows its cursor and links to that execution (R-ADM-57, R-ADM-12)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, 150)
    first_shown, before = every[-TIMELINE_PAGE_SIZE], every[-TIMELINE_PAGE_SIZE - 1]
    update_execution(int(before), cursor={"after": 41})
    update_execution(
        int(first_shown), cursor={"after": 42}, continues_from_id=int(before)
    )
    text = client.get(detail_url(workflow_id)).get_data(as_text=True)
    assert timeline_ids(text)[0] == first_shown
    chain = text.split('<ol class="geneva-chain">', 1)[1].split("</ol>", 1)[0]
    assert f'<li data-execution-id="{first_shown}">' in chain
    assert f'continues <a href="/geneva/step-executions/{before}">{before}</a>' in chain
    assert "&#34;after&#34;: 42" in chain or '"after": 42' in chain
