"""One search box: workflow id, hero as the CLI writes it (any case), error text; gone classes in the class filter (issue 21; R-ADM-50)."""

from __future__ import annotations

import re

from flask_geneva.db.queries import admin as admin_queries
from tests.admin.support import failed_workflow
from tests.admin.support import listed
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow

LIST = "/geneva/workflows/"


def test_hero_search_ignores_the_case_of_the_type(client):
    """`user#17`, `USER#17` and `User#17` find the same workflow; the hero_type filter also ignores case (R-ADM-50)."""
    workflow = ready_workflow()
    other = ready_workflow()
    hero = workflow.hero_id
    for typed in (f"User#{hero}", f"user#{hero}", f"USER # {hero}"):
        assert listed(client, q=typed) == [str(workflow.id)], typed
    assert listed(client, hero_type="user") == [str(other.id), str(workflow.id)]
    assert listed(client, q=f"Order#{hero}") == []


def test_search_by_error_text_finds_failed_workflows(client):
    """Text that is no id and no hero finds workflows with that text in a failed execution's error message, ignoring case; % and _ match themselves (R-ADM-50)."""
    failing = failed_workflow()
    ready = ready_workflow()
    message = execution_rows(failing.id)[0]["error_message"]
    assert message
    word = message.split()[0]
    assert listed(client, q=word.upper()) == [str(failing.id)]
    assert listed(client, q=word.lower()) == [str(failing.id)]
    assert listed(client, q="no such error text") == []
    assert listed(client, q="%") == []
    update_execution(execution_rows(failing.id)[0]["id"], error_message="50% _done")
    assert listed(client, q="50% _d") == [str(failing.id)]
    assert listed(client, q="5_%") == []
    page = client.get(LIST, query_string={"q": "no such error text"})
    assert b"error message contains" in page.data
    del ready


def test_search_by_workflow_id_still_works(client):
    """A number is a workflow id or hero id (R-ADM-11, R-ADM-50)."""
    first = ready_workflow()
    ready_workflow()
    assert str(first.id) in listed(client, q=str(first.id))


def test_class_filter_lists_classes_whose_code_is_gone(client):
    """A class with rows but no code is offered in the class filter, marked, and filters (R-ADM-50)."""
    gone = ready_workflow()
    ready_workflow()
    update_workflow(gone.id, type="RetiredFlow")
    page = client.get(LIST).get_data(as_text=True)
    assert re.search(
        r'<option value="RetiredFlow" data-geneva-gone\s*>RetiredFlow '
        r"\(class no longer defined\)</option>",
        page,
    )
    assert listed(client, type="RetiredFlow") == [str(gone.id)]


def test_stored_types_walk_the_type_index(client):
    """workflow_types_stored returns each stored class once, sorted (R-ADM-50)."""
    for _ in range(3):
        ready_workflow()
    failed_workflow()
    assert admin_queries.workflow_types_stored(
        db.session, type(ready_workflow()).__mro__[1]
    ) == ["AdminFailing", "AdminTwoStep"]


def test_error_text_search_reads_the_newest_recorded_errors(client, monkeypatch):
    """The error-text search reads the newest ERROR_SEARCH_DEPTH recorded errors, by created_at, and the list says so (R-ADM-50, R-ADM-30)."""
    from datetime import timedelta

    import pytest

    from flask_geneva.core import clock
    from flask_geneva.db.queries import admin_filters as admin_filter_queries
    from flask_geneva.testing import perform_next_step
    from tests.admin.support import new_user
    from tests.admin.workflows import AdminFailing

    newer = failed_workflow()
    older = AdminFailing.create(hero=new_user("older@example.com"))
    with pytest.raises(RuntimeError):
        perform_next_step(older)
    [row] = [r for r in execution_rows(older.id) if r["error_message"]]
    update_execution(row["id"], created_at=clock.now() - timedelta(days=1))
    word = row["error_message"].split()[0]
    assert set(listed(client, q=word)) == {str(newer.id), str(older.id)}
    monkeypatch.setattr(admin_filter_queries, "ERROR_SEARCH_DEPTH", 1)
    assert listed(client, q=word) == [str(newer.id)]
    page = client.get(LIST, query_string={"q": word}).get_data(as_text=True)
    assert "the search reads the newest 1 recorded errors" in page
