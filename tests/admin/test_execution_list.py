"""The step executions list: columns, filters, form, pagination (R-ADM-13, R-ADM-31)."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva.admin import presenters
from flask_geneva.admin import step_executions_view
from flask_geneva.core import clock
from tests.admin.execution_support import ESCAPED_SCRIPT
from tests.admin.execution_support import SCRIPT
from tests.admin.execution_support import detail_url
from tests.admin.execution_support import finished_resumable_chain
from tests.admin.execution_support import flaky_workflow
from tests.admin.execution_support import listed_ids
from tests.admin.execution_support import overdue_by
from tests.admin.support import failed_workflow
from tests.admin.support import paused_resumable_workflow
from tests.admin.support import ready_workflow
from tests.support.fuzzing import with_fixtures
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

LIST = "/geneva/step-executions/"


def get(client, **params) -> str:
    """GET the list with ``params``, assert 200 and return the HTML."""
    response = client.get(LIST, query_string=params)
    assert response.status_code == 200, params
    return response.get_data(as_text=True)


def ids(rows) -> list[str]:
    """Row ids as the list renders them, newest (highest id) first."""
    return [str(row["id"]) for row in sorted(rows, key=lambda r: r["id"], reverse=True)]


def test_columns_and_links(client):
    """The list shows id (linked to its page), workflow (linked), class, step, one badge when state and outcome agree, next run, started, finished (relative, exact on hover) and the error class with its message (R-ADM-13, R-ADM-40, R-ADM-44, R-ADM-46)."""
    workflow = failed_workflow()
    row = execution_rows(workflow.id)[0]
    text = get(client)
    header = re.search(r"<thead><tr>(.*?)</tr></thead>", text).group(1)
    assert re.findall(r"<th[^>]*>([^<]*)</th>", header) == [
        "Id",
        "Workflow",
        "Class",
        "Step",
        "State",
        "Next run",
        "Started",
        "Finished",
        "Cursor",
        "Error",
    ]
    cells = re.search(
        rf'<tr data-execution-id="{row["id"]}">(.*?)</tr>', text, re.S
    ).group(1)
    cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)]
    assert cells[0] == f'<a href="{detail_url(row["id"])}">{row["id"]}</a>'
    assert cells[1] == f'<a href="/geneva/workflows/{workflow.id}">{workflow.id}</a>'
    assert cells[2:4] == ["AdminFailing", "explode"]
    assert cells[4].count("geneva-badge--failed") == 1  # not "failed failed"
    assert cells[5] == ""  # a failed execution has no next run
    for cell, column in ((cells[6], "started_at"), (cells[7], "finished_at")):
        assert f'title="{presenters.format_time(row[column])}"' in cell
        assert cell.startswith('<time class="geneva-time" datetime="')
    assert cells[8] == ""  # no cursor (R-ADM-126)
    assert '<strong class="geneva-error-class">RuntimeError</strong>' in cells[9]
    assert (
        '<span class="geneva-error-message">'
        "&lt;script&gt;alert(&#39;boom&#39;)&lt;/script&gt;</span>"
    ) in cells[9]


def test_a_scheduled_execution_shows_when_it_runs_next(client):
    """A scheduled execution's Next run reads "in 59 min" with the exact time on hover (R-ADM-44, R-ADM-40)."""
    workflow = ready_workflow()
    row = execution_rows(workflow.id)[0]
    update_execution(row["id"], scheduled_for=clock.now() + timedelta(hours=1))
    text = get(client)
    cells = re.search(
        rf'<tr data-execution-id="{row["id"]}">(.*?)</tr>', text, re.S
    ).group(1)
    next_run = re.search(r'<td class="[^"]*geneva-next-run">(.*?)</td>', cells).group(1)
    assert re.search(r">in 59 min</time>|>in 1 h</time>|>in 60 min</time>", next_run)


def test_filters_by_state_step_class_and_error_class(client):
    """state, step name, class and error class each keep exactly the matching rows (R-ADM-13)."""
    failing = failed_workflow()
    flaky = flaky_workflow()
    ready = ready_workflow()
    failing_rows = execution_rows(failing.id)
    flaky_rows = execution_rows(flaky.id)
    ready_rows = execution_rows(ready.id)
    assert listed_ids(get(client, state="failed")) == ids(failing_rows)
    assert listed_ids(get(client, state="scheduled")) == ids(
        [flaky_rows[1], ready_rows[0]]
    )
    assert listed_ids(get(client, step_name="call_api")) == ids(flaky_rows)
    assert listed_ids(get(client, type="AdminTwoStep")) == ids(ready_rows)
    assert listed_ids(get(client, error_class="RuntimeError")) == ids(failing_rows)
    # The reattempted execution shows its error class from metadata (R-SE-21), but
    # the filter matches the error_class_name column only, and says so.
    listing = get(client, step_name="call_api")
    assert "tests.admin.execution_support.ExecDetailTimeout" in listing
    text = get(client, error_class="tests.admin.execution_support.ExecDetailTimeout")
    assert "reattempted executions keep their error in metadata only" in text
    assert listed_ids(text) == []
    # Filters combine.
    assert listed_ids(get(client, type="ExecDetailFlaky", state="completed")) == ids(
        flaky_rows[:1]
    )
    assert listed_ids(get(client, type="AdminTwoStep", state="failed")) == []


def test_error_class_filter_matches_a_bare_class_name_in_any_module(client):
    """A name with a dot must equal the stored error class; one without also matches that class in any module, LIKE wildcards taken literally (R-ADM-13, R-SE-20)."""
    first = execution_rows(failed_workflow().id)[0]
    update_execution(
        first["id"], error_class_name="example_app.workflows.Gateway_Timeout"
    )
    assert listed_ids(get(client, error_class="Gateway_Timeout")) == ids([first])
    assert listed_ids(
        get(client, error_class="example_app.workflows.Gateway_Timeout")
    ) == ids([first])
    assert listed_ids(get(client, error_class="workflows.Gateway_Timeout")) == []
    assert listed_ids(get(client, error_class="Gateway%")) == []
    assert listed_ids(get(client, error_class="GatewayXTimeout")) == []
    text = get(client)
    assert "example_app.workflows.GatewayTimeout" in re.search(
        r'<input id="geneva-filter-error"[^>]*>', text
    ).group(0)


def test_overdue_stuck_and_housekeeping_overdue_flags(client):
    """'overdue' is scheduled_for < now; 'stuck_scheduled' is beyond the housekeeping threshold; 'stuck' is in progress beyond the threshold (R-ADM-13, R-HK-20)."""
    just_late = execution_rows(ready_workflow().id)[0]
    long_late = execution_rows(ready_workflow().id)[0]
    future = execution_rows(ready_workflow().id)[0]
    recent_run = execution_rows(ready_workflow().id)[0]
    stuck = execution_rows(ready_workflow().id)[0]
    update_execution(just_late["id"], scheduled_for=overdue_by(timedelta(minutes=1)))
    update_execution(long_late["id"], scheduled_for=overdue_by(timedelta(hours=1)))
    update_execution(future["id"], scheduled_for=overdue_by(timedelta(hours=-1)))
    update_execution(
        recent_run["id"],
        state="in_progress",
        started_at=overdue_by(timedelta(minutes=5)),
    )
    update_execution(
        stuck["id"], state="in_progress", started_at=overdue_by(timedelta(hours=2))
    )
    assert listed_ids(get(client, only="overdue")) == ids([just_late, long_late])
    assert listed_ids(get(client, only="stuck_scheduled")) == ids([long_late])
    assert listed_ids(get(client, only="stuck")) == ids([stuck])


def test_has_cursor_flag(client):
    """'has cursor' keeps the executions with a stored cursor (R-ADM-13)."""
    _, rows = finished_resumable_chain()
    ready_workflow()
    assert listed_ids(get(client, only="has_cursor")) == ids(rows[:3])


def test_the_form_keeps_the_filter_values(client):
    """The filter form shows the values of the current filters, escaped (R-ADM-13, R-ADM-06)."""
    text = get(
        client,
        state="failed",
        step_name=SCRIPT,
        type="AdminFailing",
        error_class="Boom",
        only="stuck_scheduled",
    )
    assert SCRIPT not in text
    assert '<option value="failed" selected>failed</option>' in text
    assert f'placeholder="step name" value="{ESCAPED_SCRIPT}"' in text
    assert '<option value="AdminFailing" selected>AdminFailing</option>' in text
    assert 'placeholder="error class (module.Class)"' in text
    assert 'value="Boom"' in text
    assert (
        '<option value="stuck_scheduled" selected>'
        "overdue beyond the housekeeping threshold</option>"
    ) in text
    # A class no longer in the code is still a valid filter: kept as an option.
    text = get(client, type="RemovedClass")
    assert '<option value="RemovedClass" selected>RemovedClass</option>' in text


def test_unknown_state_is_ignored_with_a_note_and_no_invented_option(client):
    """An unknown state is ignored with a note naming it and the states allowed; the dropdown offers no such option (R-ADM-13, R-ADM-31)."""
    rows = execution_rows(failed_workflow().id) + execution_rows(ready_workflow().id)
    text = get(client, state="bogus")
    assert (
        "ignored state filter &#39;bogus&#39;: not one of scheduled, in_progress, "
        "waiting, completed, failed, canceled, skipped"
    ) in text
    assert listed_ids(text) == ids(rows)
    assert 'value="bogus"' not in text
    state_select = re.search(
        r'<select id="geneva-filter-state".*?</select>', text, re.S
    ).group(0)
    assert re.findall(r'<option value="([^"]*)"', state_select) == [
        "",
        "scheduled",
        "in_progress",
        "waiting",
        "completed",
        "failed",
        "canceled",
        "skipped",
    ]
    assert "selected" not in state_select


def test_pagination_keeps_the_filters(client, monkeypatch):
    """The next/previous links carry the filters; every page holds only matching rows (R-ADM-13)."""
    monkeypatch.setattr(step_executions_view, "PAGE_SIZE", 2)
    _, chain = finished_resumable_chain()
    failed_workflow()
    text = get(client, step_name="walk", only="has_cursor")
    assert listed_ids(text) == ids(chain[:3])[:2]
    following = re.search(r'<a rel="next" href="([^"]+)">', text)
    assert following is not None
    url = html.unescape(following.group(1))
    assert "step_name=walk" in url
    assert "only=has_cursor" in url
    assert "page=2" in url
    second = client.get(url).get_data(as_text=True)
    assert listed_ids(second) == ids(chain[:3])[2:]
    assert 'rel="next"' not in second
    back = html.unescape(re.search(r'<a rel="prev" href="([^"]+)">', second).group(1))
    assert "step_name=walk" in back
    assert "only=has_cursor" in back


def test_unknown_flags_and_nul_bytes_are_ignored_with_a_note(client):
    """An unknown 'only' value or a NUL byte is ignored with a note, never a 500 (R-ADM-31)."""
    rows = execution_rows(paused_resumable_workflow().id)
    text = get(client, only="<b>bogus</b>")
    assert "<b>bogus</b>" not in text
    assert "ignored only=" in text
    assert listed_ids(text) == ids(rows)
    text = get(client, step_name="wa\x00lk")
    assert "contains a NUL byte" in text
    assert listed_ids(text) == ids(rows)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("state", "\x00"),
        ("state", "bogus"),
        ("step_name", "wa\x00lk"),
        ("step_name", "s" * 300),
        ("type", "\x00"),
        ("type", "T" * 300),
        ("error_class", "Boom\x00"),
        ("error_class", "E" * 300),
        ("only", "\x00"),
        ("only", "bogus"),
    ],
)
def test_an_ignored_value_is_not_echoed_into_the_form_or_the_pager(
    client, monkeypatch, name, value
):
    """An ignored filter value (NUL byte, over-long, unknown) gets a note but is not put back into any form field or pager link (R-ADM-13, R-ADM-06, R-ADM-31)."""
    monkeypatch.setattr(step_executions_view, "PAGE_SIZE", 1)
    rows = execution_rows(failed_workflow().id) + execution_rows(ready_workflow().id)
    text = get(client, **{name: value})
    assert "ignored" in text
    assert listed_ids(text) == ids(rows)[:1]
    assert "\x00" not in text
    form = re.search(r'<form method="get".*?</form>', text, re.S).group(0)
    assert value not in form
    assert " selected" not in form
    assert re.findall(r'<input [^>]*value="([^"]*)"', form) == ["", ""]
    following = re.search(r'<a rel="next" href="([^"]+)">', text).group(1)
    # Only the key of the page's last row and its number (R-ADM-150).
    assert html.unescape(following) == f"{LIST}?after={ids(rows)[0]}&page=2"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("9999999999999", "&#39;9999999999999&#39;"),
        ("0", "&#39;0&#39;"),
        ("-3", "&#39;-3&#39;"),
        ("x", "&#39;x&#39;"),
        ("\x00", "&#39;\\x00&#39;"),
    ],
)
def test_an_invalid_page_shows_page_one_with_a_note(client, raw, shown):
    """A page that is not a whole number from 1 to 999999 shows page 1 with a note naming it (R-ADM-13, R-ADM-31)."""
    rows = execution_rows(ready_workflow().id)
    text = get(client, page=raw)
    assert f"ignored page {shown}: use a whole number from 1 to 999999" in text
    assert listed_ids(text) == ids(rows)
    assert "<span>page 1</span>" in text


def test_a_page_past_the_end_says_so_and_links_the_first_page(client):
    """A page after the last one says the list ends before it and links page 1 with the filters (R-ADM-13)."""
    ready_workflow()
    text = get(client, page="999999", state="scheduled")
    assert "page 999999 is past the end of the list: it has no rows" in text
    assert (
        '<a rel="first" href="/geneva/step-executions/?state=scheduled">'
        "&larr; first page</a>"
    ) in text
    assert 'rel="prev"' not in text


@with_fixtures(max_examples=60)
@given(
    params=st.dictionaries(
        st.sampled_from(["state", "step_name", "type", "error_class", "only", "page"]),
        st.one_of(
            st.text(max_size=30),
            st.sampled_from(
                ["overdue", "stuck", "stuck_scheduled", "has_cursor", "failed", "0"]
            ),
        ),
        max_size=6,
    )
)
def test_random_filters_never_give_a_500(client, params):
    """Random filter and page values on the executions list never produce a 500 (R-ADM-31)."""
    response = client.get(LIST, query_string=params)
    assert response.status_code == 200, params
