"""Filters, search, sort, columns and capped count of the workflows list (R-ADM-11, R-ADM-30, R-ADM-31)."""

from __future__ import annotations

import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
from flask_admin import Admin
from flask_admin.contrib.sqla import ModelView

from flask_geneva.admin import filters
from flask_geneva.testing import perform_next_step
from tests.admin.support import failed_workflow
from tests.admin.support import listed
from tests.admin.support import new_user
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.admin.workflows import AdminFailing
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow

LIST = "/geneva/workflows/"


def page_text(client, **params) -> str:
    response = client.get(LIST, query_string=params)
    assert response.status_code == 200, params
    return response.get_data(as_text=True)


def ids(*workflows) -> list[str]:
    return [str(w.id) for w in workflows]


def test_class_filter_keeps_only_that_class(client):
    """The class filter keeps workflows of that class only (R-ADM-11)."""
    two_step = ready_workflow()
    failing = failed_workflow()
    assert listed(client, type="AdminFailing") == ids(failing)
    assert listed(client, type="AdminTwoStep") == ids(two_step)
    assert listed(client, type="NoSuchClass") == []


def test_state_filter_and_unknown_state_note(client):
    """The state filter narrows; an unknown state is ignored with a note naming it (R-ADM-11, R-ADM-31)."""
    ready = ready_workflow()
    paused = paused_workflow()
    assert listed(client, state="paused") == ids(paused)
    assert listed(client, state="ready") == ids(ready)
    text = page_text(client, state="sleeping")
    assert "ignored state filter &#39;sleeping&#39;: not one of ready" in text
    assert re.findall(r'<tr data-workflow-id="([^"]+)"', text) == ids(paused, ready)


def test_hero_type_and_hero_id_filters(client):
    """hero_type and hero_id narrow to the hero's workflows; a bad hero id gives a note (R-ADM-11)."""
    first = ready_workflow()
    second = ready_workflow()
    update_workflow(second.id, hero_type="Account")
    assert listed(client, hero_type="User") == ids(first)
    assert listed(client, hero_type="Account") == ids(second)
    assert listed(client, hero_id=str(first.hero_id)) == ids(first)
    assert listed(client, hero_type="Account", hero_id=str(first.hero_id)) == []
    text = page_text(client, hero_id="12abc")
    assert "ignored hero_id filter &#39;12abc&#39;: not a valid id" in text
    assert re.findall(r'<tr data-workflow-id="([^"]+)"', text) == ids(second, first)


def test_search_matches_workflow_id_or_hero_id(client):
    """The search box finds a workflow by its own id or by its hero id (R-ADM-11)."""
    first = ready_workflow()
    second = ready_workflow()
    # A hero id no workflow id can equal: the tables' sequences move apart
    # across tests, and the search matches hero ids too.
    update_workflow(second.id, hero_id=987654)
    assert str(first.id) in listed(client, q=str(first.id))
    assert str(second.id) not in listed(client, q=str(first.id))
    assert listed(client, q="987654") == ids(second)
    # Not an id: a search of the error messages now (R-ADM-50), no note.
    assert listed(client, q="abc") == []
    assert "ignored search" not in page_text(client, q="abc")


def test_search_accepts_the_hero_notation_the_list_shows(client):
    """The search box finds `User#17`, the hero as the list writes it; a bad id in it gives a note (R-ADM-11)."""
    first = ready_workflow()
    second = ready_workflow()
    update_workflow(second.id, hero_type="Account", hero_id=first.hero_id)
    shown = f"User#{first.hero_id}"
    assert shown in page_text(client)
    assert listed(client, q=shown) == ids(first)
    assert listed(client, q=f" Account # {first.hero_id} ") == ids(second)
    assert listed(client, q=f"Order#{first.hero_id}") == []
    text = page_text(client, q="User#abc")
    assert "ignored search &#39;User#abc&#39;: not a valid hero id" in text


def _created(workflow, at: datetime) -> None:
    update_workflow(workflow.id, created_at=at)


def test_created_range_with_dates_and_datetimes(client):
    """created_from/created_to take UTC dates (the end date includes its whole day) or datetimes (R-ADM-11)."""
    old = ready_workflow()
    mid = ready_workflow()
    late = ready_workflow()
    _created(old, datetime(2024, 1, 1, 12, 0, tzinfo=UTC))
    _created(mid, datetime(2024, 2, 10, 23, 30, tzinfo=UTC))
    _created(late, datetime(2024, 3, 5, 8, 0, tzinfo=UTC))
    assert listed(client, created_from="2024-02-01") == ids(late, mid)
    assert listed(client, created_to="2024-02-10") == ids(mid, old)
    assert listed(client, created_to="2024-02-09") == ids(old)
    assert listed(client, created_from="2024-02-10", created_to="2024-02-10") == ids(
        mid
    )
    assert listed(client, created_from="2024-02-10T23:30:00") == ids(late, mid)
    assert listed(client, created_from="2024-02-10T23:30:01") == ids(late)
    assert listed(client, created_to="2024-02-10 23:29") == ids(old)
    # An explicit offset is converted to UTC: 00:15+01:00 is 23:15 UTC.
    assert listed(client, created_from="2024-02-11T00:15:00+01:00") == ids(late, mid)


def test_a_created_range_lists_the_newest_created_first_unless_sorted(client):
    """With a created range and no sort asked the list is ordered by created_at, newest first (read along the created_at index from the range's end), even where ids do not follow creation times; an explicit sort still applies (R-ADM-11, R-ADM-30)."""
    noon = ready_workflow()
    morning = ready_workflow()
    ten = ready_workflow()
    _created(noon, datetime(2024, 2, 10, 12, 0, tzinfo=UTC))
    _created(morning, datetime(2024, 2, 10, 8, 0, tzinfo=UTC))
    _created(ten, datetime(2024, 2, 10, 10, 0, tzinfo=UTC))
    by_created = ids(noon, ten, morning)
    assert listed(client, created_from="2024-02-10", created_to="2024-02-10") == (
        by_created
    )
    assert listed(client, created_from="2024-02-01") == by_created
    assert listed(client, created_to="2024-02-10") == by_created
    assert listed(client, created_to="2024-02-10", dir="asc") == by_created[::-1]
    # An explicit sort, and no range, keep their order (newest id first).
    assert listed(client, created_to="2024-02-10", sort="id") == ids(ten, morning, noon)
    assert listed(client) == ids(ten, morning, noon)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("created_from", "yesterday"),
        ("created_to", "2024-13-01"),
        ("created_from", "2024-02-30"),
        ("created_to", "0999-01-01"),
        ("created_from", "9999-12-31"),
        ("created_to", "2024-01-01T25:00"),
    ],
)
def test_invalid_created_bound_is_ignored_with_a_note_naming_the_format(
    client, name, value
):
    """An invalid created bound is ignored with a note naming the value and the accepted format, never a 500 (R-ADM-11, R-ADM-31)."""
    workflow = ready_workflow()
    text = page_text(client, **{name: value})
    assert f"ignored {name} &#39;{value}&#39;" in text
    assert "use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]" in text
    assert re.findall(r'<tr data-workflow-id="([^"]+)"', text) == ids(workflow)


def test_latest_error_class_column_and_filter_use_the_latest_error(client):
    """The latest error class shows per row and filters on the newest recorded error only (R-ADM-11)."""
    failing = failed_workflow()
    clean = ready_workflow()
    # A second failure: the workflow's latest error is the new one.
    failing.resume()
    with pytest.raises(RuntimeError):
        perform_next_step(failing)
    first, second = execution_rows(failing.id)[:2]
    assert second["error_class_name"] == "RuntimeError"
    update_execution(first["id"], error_class_name="OldError")
    text = page_text(client)
    row = re.search(rf'<tr data-workflow-id="{failing.id}">.*?</tr>', text, re.S).group(
        0
    )
    assert '<td class="geneva-error-class">RuntimeError</td>' in row
    row = re.search(rf'<tr data-workflow-id="{clean.id}">.*?</tr>', text, re.S).group(0)
    assert '<td class="geneva-error-class"></td>' in row
    assert listed(client, error_class="RuntimeError") == ids(failing)
    assert listed(client, error_class="OldError") == []
    update_execution(second["id"], error_class_name="NewError")
    assert listed(client, error_class="NewError") == ids(failing)


def _failed_with_error_class(number: int, class_name: str):
    """An AdminFailing whose failed execution has ``class_name`` as error class."""
    workflow = AdminFailing.create(hero=new_user(f"class{number}@example.com"))
    with pytest.raises(RuntimeError):
        perform_next_step(workflow)
    update_execution(execution_rows(workflow.id)[0]["id"], error_class_name=class_name)
    return workflow


def test_error_class_filter_matches_the_stored_name_or_a_bare_class_name(client):
    """The error class filter matches the module-qualified name as stored; a name without a dot also matches that class in any module, with LIKE wildcards taken literally (R-ADM-11, R-SE-20)."""
    gateway = _failed_with_error_class(1, "example_app.workflows.GatewayTimeout")
    other = _failed_with_error_class(2, "other.module.GatewayTimeout")
    builtin = _failed_with_error_class(3, "TimeoutError")
    underscore = _failed_with_error_class(4, "app.Bad_Error")
    lookalike = _failed_with_error_class(5, "app.BadXError")
    assert listed(client, error_class="example_app.workflows.GatewayTimeout") == ids(
        gateway
    )
    assert listed(client, error_class="GatewayTimeout") == ids(other, gateway)
    assert listed(client, error_class="workflows.GatewayTimeout") == []
    assert listed(client, error_class="Timeout") == []
    assert listed(client, error_class="TimeoutError") == ids(builtin)
    assert listed(client, error_class="Bad_Error") == ids(underscore)
    assert listed(client, error_class="BadXError") == ids(lookalike)
    assert listed(client, error_class="Bad%") == []
    assert listed(client, error_class="%") == []
    assert listed(client, error_class="_") == []


def test_error_class_filter_explains_what_it_matches(client):
    """The error class input says it matches the module-qualified name as stored, and using it notes that reattempted executions' errors are not matched (R-ADM-11, R-SE-21)."""
    failed_workflow()
    text = page_text(client)
    field = re.search(r'<input name="error_class"[^>]*>', text).group(0)
    assert 'placeholder="latest error class (module.Class)"' in field
    assert "example_app.workflows.GatewayTimeout" in field
    assert "TimeoutError" in field
    assert 'aria-describedby="geneva-error-class-help"' in field
    help_text = re.search(
        r'<p class="geneva-filter-help" id="geneva-error-class-help">(.*?)</p>',
        text,
        re.S,
    ).group(1)
    assert "<code>example_app.workflows.GatewayTimeout</code>" in help_text
    assert "unqualified for builtins (e.g. <code>TimeoutError</code>)" in help_text
    caveat = (
        "reattempted executions keep their error in metadata only and are not matched"
    )
    assert caveat not in text
    text = page_text(client, error_class="RuntimeError")
    assert (
        f'<div class="alert alert-info geneva-caveat">{filters.ERROR_CLASS_CAVEAT}</div>'
        in text
    )
    assert caveat in text
    # A caveat is not an ignored value: the "all matching" action is offered.
    assert 'data-geneva-bulk-all="resume"' in text


def test_latest_error_class_costs_one_query_per_page_not_per_row(client):
    """The latest error classes of a page are read in one query, whatever the number of rows (R-ADM-11, R-ADM-30)."""

    def statements_for_page() -> int:
        db.session.remove()
        with recorded_statements() as statements:
            page_text(client)
        return len(statements)

    failing = AdminFailing.create(hero=new_user("a@example.com"))
    with pytest.raises(RuntimeError):
        perform_next_step(failing)
    one = statements_for_page()
    for number in range(4):
        more = AdminFailing.create(hero=new_user(f"f{number}@example.com"))
        with pytest.raises(RuntimeError):
            perform_next_step(more)
    assert statements_for_page() == one
    assert (
        page_text(client).count('<td class="geneva-error-class">RuntimeError</td>') == 5
    )


def test_overdue_filter_keeps_workflows_with_a_past_due_scheduled_execution(client):
    """'has overdue execution' keeps workflows whose scheduled execution is past due (R-ADM-11)."""
    due = ready_workflow()
    later = ready_workflow()
    done = failed_workflow()  # its execution failed: nothing scheduled
    update_execution(
        execution_rows(due.id)[0]["id"],
        scheduled_for=datetime.now(UTC) - timedelta(minutes=5),
    )
    update_execution(
        execution_rows(later.id)[0]["id"],
        scheduled_for=datetime.now(UTC) + timedelta(days=1),
    )
    assert listed(client, overdue="1") == ids(due)
    assert listed(client, overdue="0") == ids(done, later, due)
    assert "ignored overdue filter &#39;maybe&#39;" in page_text(
        client, overdue="maybe"
    )


def test_filters_combine_and_are_kept_in_sort_and_pager_links(client):
    """Filters combine with AND and survive sorting and paging links (R-ADM-11)."""
    ready_workflow()
    paused = paused_workflow()
    failed_workflow()
    assert listed(client, type="AdminTwoStep", state="paused") == ids(paused)
    text = page_text(client, type="AdminTwoStep", state="paused")
    assert (
        'href="/geneva/workflows/?sort=created_at&amp;dir=desc&amp;type=AdminTwoStep&amp;state=paused"'
        in text
    )


def test_sorting_by_each_column_and_newest_first_by_default(client):
    """Sort by id, created_at or transitioned_at in both directions; the default is newest first (R-ADM-11)."""
    first = ready_workflow()
    second = ready_workflow()
    third = ready_workflow()
    _created(first, datetime(2024, 5, 1, tzinfo=UTC))
    _created(second, datetime(2024, 3, 1, tzinfo=UTC))
    _created(third, datetime(2024, 4, 1, tzinfo=UTC))
    update_workflow(first.id, transitioned_at=datetime(2024, 6, 3, tzinfo=UTC))
    update_workflow(second.id, transitioned_at=datetime(2024, 6, 1, tzinfo=UTC))
    update_workflow(third.id, transitioned_at=datetime(2024, 6, 2, tzinfo=UTC))
    assert listed(client) == ids(third, second, first)
    assert listed(client, sort="id", dir="asc") == ids(first, second, third)
    assert listed(client, sort="created_at") == ids(first, third, second)
    assert listed(client, sort="created_at", dir="asc") == ids(second, third, first)
    assert listed(client, sort="transitioned_at", dir="asc") == ids(
        second, third, first
    )
    assert listed(client, sort="hero_id") == ids(third, second, first)


def test_hero_links_to_the_hosts_model_view_when_there_is_one(app, client):
    """The hero cell links to the host's Flask-Admin view of the hero model, and is plain text without one (R-ADM-11)."""
    host = Admin(app, name="Host admin", url="/admin", endpoint="admin")
    host.add_view(ModelView(User, db, endpoint="users"))
    linked = ready_workflow()
    plain = ready_workflow()
    update_workflow(plain.id, hero_type="Account")  # no model, no view
    text = page_text(client)
    assert (
        f'<td class="geneva-hero"><a href="/admin/users/edit/?id={linked.hero_id}">'
        f"User#{linked.hero_id}</a></td>"
    ) in text
    assert f'<td class="geneva-hero">Account#{plain.hero_id}</td>' in text
    assert client.get(f"/admin/users/edit/?id={linked.hero_id}").status_code == 200


def test_counts_are_capped_and_never_unbounded(client, monkeypatch):
    """The match count stops at the cap ("N+") and every COUNT runs over a LIMITed subquery (R-ADM-30)."""
    for _ in range(4):
        ready_workflow()
    assert "4 workflows match (no filter: all workflows)." in page_text(client)
    assert "0 workflows match." in page_text(client, state="paused")
    monkeypatch.setattr(filters, "COUNT_CAP", 3)
    db.session.remove()
    with recorded_statements() as statements:
        text = page_text(client)
    if db.engine.dialect.name == "postgresql":
        # Past the cap PostgreSQL may show the planner's estimate instead,
        # when the table's statistics (autovacuum's) know more rows (R-ADM-152).
        assert re.search(
            r">(3\+|about [\d,]+) workflows match \(no filter: all workflows\)\.",
            text,
        )
    else:
        assert "3+ workflows match (no filter: all workflows)." in text
    counts = [s for s in statements if "count(" in s.lower()]
    assert counts
    assert all("LIMIT" in s.upper() for s in counts), counts


def test_bad_values_of_every_filter_give_a_note_not_a_500(client):
    """NUL bytes, over-long text and garbage in each filter are ignored with a note (R-ADM-11, R-ADM-31)."""
    ready_workflow()
    for params in (
        {"type": "a\x00b"},
        {"hero_type": "x" * 300},
        {"error_class": "\x00"},
        {"hero_id": "-1"},
        {"created_from": "\x00"},
        {"q": "9" * 40},
    ):
        text = page_text(client, **params)
        assert "ignored" in text, params


def test_filter_values_are_escaped_in_inputs_links_and_hidden_fields(client):
    """Filter values echoed into inputs, links and the bulk form's hidden fields are escaped (R-ADM-06)."""
    workflow = ready_workflow()
    script = '"><script>alert(1)</script>'
    escaped = "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
    text = page_text(client, hero_type=script, error_class=script)
    assert "<script>alert(1)" not in text
    assert (
        f'name="hero_type" class="form-control form-control-sm mr-1" placeholder="hero type" aria-label="hero type" value="{escaped}"'
        in text
    )
    # A hero type that matches, so the "all matching" form repeats it as a
    # hidden field.
    update_workflow(workflow.id, hero_type=script)
    text = page_text(client, hero_type=script)
    assert "<script>alert(1)" not in text
    assert "1 workflow matches." in text
    assert f'<input type="hidden" name="hero_type" value="{escaped}">' in text
    # An ignored value (hero_id is not an id) is escaped in its note and not
    # echoed into any field.
    text = page_text(client, hero_id=script)
    assert "<script>alert(1)" not in text
    assert "ignored hero_id filter &#39;&#34;&gt;&lt;script&gt;" in text
    assert f'value="{escaped}"' not in text
    # Text that is no id searches the error messages (R-ADM-50): echoed escaped.
    text = page_text(client, q=script)
    assert "<script>alert(1)" not in text
    assert f'value="{escaped}"' in text


_FILTER_FORM = re.compile(
    r'<form method="get" class="form-inline geneva-filters".*?</form>', re.S
)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("type", "\x00"),
        ("type", "t" * 300),
        ("state", "\x00"),
        ("state", "bogus"),
        ("hero_type", "User\x00"),
        ("hero_type", "h" * 300),
        ("hero_id", "\x00"),
        ("hero_id", "abc"),
        ("created_from", "\x00"),
        ("created_from", "yesterday"),
        ("created_to", "2024-02-30\x00"),
        ("created_to", "0999-01-01"),
        ("error_class", "\x00"),
        ("error_class", "E" * 300),
        ("overdue", "\x00"),
        ("overdue", "maybe"),
        ("q", "\x00"),
        ("q", "User#abc"),
        ("parent", "\x00"),
        ("parent", "abc"),
    ],
)
def test_an_ignored_value_is_not_echoed_into_any_form_field_or_link(
    client, name, value
):
    """An ignored filter value gets a note but is not put back into the filter form, the bulk forms or the sort and pager links (R-ADM-11, R-ADM-06, R-ADM-31)."""
    workflow = ready_workflow()
    text = page_text(client, **{name: value})
    assert re.search(r'<div class="alert alert-info geneva-note">ignored ', text)
    assert re.findall(r'<tr data-workflow-id="([^"]+)"', text) == ids(workflow)
    assert "\x00" not in text
    form = _FILTER_FORM.search(text).group(0)
    assert value not in form
    assert "selected" not in form
    assert "checked" not in form
    inputs = dict(re.findall(r'<input [^>]*name="(\w+)"[^>]*value="([^"]*)"', form))
    assert inputs == {
        "hero_type": "",
        "hero_id": "",
        "created_from": "",
        "created_to": "",
        "error_class": "",
        "overdue": "1",
        "q": "",
        "parent": "",  # the parent filter's field (R-CHD-62)
    }
    assert '<input type="hidden" name="' + name not in text
    links = [href for href in re.findall(r'href="([^"]+)"', text) if "?" in href]
    assert links
    assert all(f"{name}=" not in href for href in links), links
    # The "all matching" action would drop the ignored value: not offered.
    assert "data-geneva-bulk-all" not in text
    assert "is not offered while a filter value is ignored" in text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("9999999999999", "&#39;9999999999999&#39;"),
        ("1000000", "&#39;1000000&#39;"),
        ("0", "&#39;0&#39;"),
        ("-1", "&#39;-1&#39;"),
        ("two", "&#39;two&#39;"),
        ("²", "&#39;²&#39;"),
        ("\x00", "&#39;\\x00&#39;"),
        ("9" * 5000, "&#39;" + "9" * 40 + "&#39;…"),
    ],
)
def test_an_invalid_page_shows_page_one_with_a_note(client, raw, shown):
    """A page that is not a whole number from 1 to 999999 shows page 1 with a note naming it; never a 500 (R-ADM-11, R-ADM-31)."""
    workflow = ready_workflow()
    text = page_text(client, page=raw)
    assert f"ignored page {shown}: use a whole number from 1 to 999999</div>" in text
    assert re.findall(r'<tr data-workflow-id="([^"]+)"', text) == ids(workflow)
    assert "<span>page 1</span>" in text
    # Only filter values stop the "all matching" action.
    assert 'data-geneva-bulk-all="resume"' in text


def test_a_page_past_the_end_says_so_and_links_the_first_page(client):
    """A page after the last one says the list ends before it and links page 1 (R-ADM-11)."""
    ready_workflow()
    text = page_text(client, page="999999", state="ready")
    assert "page 999999 is past the end of the list: it has no rows" in text
    assert "No workflows match." in text
    assert (
        '<a rel="first" href="/geneva/workflows/?sort=id&amp;dir=desc&amp;state=ready">'
        "&larr; first page</a>"
    ) in text
    assert "past the end" not in page_text(client, page="1")


def test_an_unknown_sort_or_direction_is_ignored_with_a_note(client):
    """sort and dir values the list does not know are ignored with a note naming the value and the allowed ones (R-ADM-11, R-ADM-31)."""
    first = ready_workflow()
    second = ready_workflow()
    text = page_text(client, dir="sideways", sort="hero_id")
    assert "ignored dir &#39;sideways&#39;: use asc or desc" in text
    assert (
        "ignored sort &#39;hero_id&#39;: use id, created_at or transitioned_at" in text
    )
    assert re.findall(r'<tr data-workflow-id="([^"]+)"', text) == ids(second, first)
    assert "sideways" not in re.sub(r'<div class="alert[^>]*>.*?</div>', "", text)
    assert "ignored" not in page_text(client, dir="asc", sort="created_at")
    assert "ignored" not in page_text(client, dir="", sort="", page="")


def test_overdue_and_error_class_filters_read_their_ids_first_on_postgresql():
    """On PostgreSQL the overdue and error-class filters are ``id = ANY(ARRAY(...))``: the few matching ids are read once and looked up along the list's order, whatever the planner estimates; elsewhere ``id IN (...)`` (R-ADM-30, R-ADM-11)."""
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.dialects import sqlite

    from flask_geneva.db.queries import admin_filters as admin_filter_queries
    from tests.apps.basic import geneva

    workflow_cls, execution_cls = geneva.Workflow, geneva.StepExecution
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for condition in (
        admin_filter_queries.has_overdue_execution(workflow_cls, execution_cls, now),
        admin_filter_queries.latest_error_class_is(
            workflow_cls, execution_cls, "TimeoutError"
        ),
    ):
        query = sa.select(workflow_cls.id).where(condition)
        on_postgresql = str(query.compile(dialect=postgresql.dialect()))
        assert "geneva_drive_workflows.id = ANY(ARRAY(SELECT " in on_postgresql
        on_sqlite = str(query.compile(dialect=sqlite.dialect()))
        assert "geneva_drive_workflows.id IN (SELECT " in on_sqlite
