"""Bulk actions on every workflow matching the list filter (R-ADM-23, R-ADM-05, R-ADM-24, R-ADM-30)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva.admin import bulk_actions
from flask_geneva.admin import filters
from flask_geneva.admin import list_params
from tests.admin.conftest import ADMIN_CONFIG
from tests.admin.conftest import csrf_token
from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row
from tests.support.workflow import workflows_table

LIST = "/geneva/workflows/"
BULK = "/geneva/workflows/bulk"
BATCH_SIZE = 25


@pytest.fixture
def app_config() -> dict[str, Any]:
    """The standalone admin with a batch size below the test's workflow count."""
    return {**ADMIN_CONFIG, "GENEVA_HOUSEKEEPING_BATCH_SIZE": BATCH_SIZE}


def states() -> dict[str, str]:
    """``{str(id): state}`` of every stored workflow."""
    table = workflows_table()
    # Autocommit: on SQLite a transaction would begin IMMEDIATE and take the lock.
    reader = db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    with reader as connection:
        rows = connection.execute(sa.select(table.c.id, table.c.state)).all()
    return {str(workflow_id): state for workflow_id, state in rows}


def heading(text: str) -> str:
    return re.search(r"<h2[^>]*>(.*?)</h2>", text, re.S).group(1).strip()


def post_all(client, token: str, action: str, *, confirm: bool, **filter_params):
    data = {"csrf_token": token, "action": action, "scope": "all", **filter_params}
    if confirm:
        data["confirm"] = "yes"
    response = client.post(BULK, data=data)
    assert response.status_code == 200, response.data[:500]
    return response.get_data(as_text=True)


def test_resume_all_matching_acts_on_every_page_in_batches_and_on_no_other(client):
    """Resume all N paused: every matching workflow across pages is resumed in keyset batches, no other changes (R-ADM-23)."""
    paused = [paused_workflow() for _ in range(120)]
    ready = [ready_workflow() for _ in range(3)]
    finished = ready_workflow()
    update_workflow(finished.id, state="finished")
    failed = failed_workflow()  # paused, but of another class
    paused_ids = [str(w.id) for w in paused]
    other_ids = [str(w.id) for w in (*ready, finished, failed)]
    before = states()
    text = client.get(LIST, query_string={"state": "paused", "type": "AdminTwoStep"})
    text = text.get_data(as_text=True)
    assert "120 workflows match." in text
    assert len(re.findall(r'<tr data-workflow-id="', text)) == list_params.PAGE_SIZE
    assert 'data-geneva-bulk-all="resume"' in text
    assert '<input type="hidden" name="state" value="paused">' in text
    token = csrf_token(client, LIST)

    text = post_all(
        client, token, "resume", confirm=False, state="paused", type="AdminTwoStep"
    )
    assert heading(text) == "Resume all 120 workflows matching the filter?"
    assert "<li>class = AdminTwoStep</li>" in text
    assert "<li>state = paused</li>" in text
    assert f"batches of {BATCH_SIZE}" in text
    assert states() == before  # the confirmation changes nothing

    db.session.remove()
    statements: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append((statement, parameters))

    sa.event.listen(db.engine, "before_cursor_execute", record)
    try:
        text = post_all(
            client, token, "resume", confirm=True, state="paused", type="AdminTwoStep"
        )
    finally:
        sa.event.remove(db.engine, "before_cursor_execute", record)
    assert heading(text) == "Resume all matching: 120 succeeded, 0 refused"
    after = states()
    assert {after[workflow_id] for workflow_id in paused_ids} == {"ready"}
    assert [after[i] for i in other_ids] == [before[i] for i in other_ids]
    assert [before[i] for i in other_ids] == ["ready"] * 3 + ["finished", "paused"]
    # Keyset pagination: ceil(120 / 25) = 5 id reads, each after the last id seen,
    # none skipping rows with an OFFSET (SQLite always renders "OFFSET ?" = 0).
    reads = [(s, p) for s, p in statements if "ORDER BY geneva_drive_workflows.id" in s]
    assert len(reads) == 5, reads
    assert all("geneva_drive_workflows.id >" in s for s, _ in reads[1:])
    assert all("OFFSET" not in s or list(p)[-1] == 0 for s, p in reads)


def test_resume_all_records_the_operator_action_via_admin(app, client):
    """Each workflow acted on records the operator action with via="admin" and the actor (R-ADM-24)."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "ops@example.com"
    geneva.reload_settings(app)
    workflow = paused_workflow()
    token = csrf_token(client, LIST)
    post_all(client, token, "resume", confirm=True, state="paused")
    actions = workflow_row(workflow.id)["metadata"]["operator_actions"]
    assert actions[-1]["action"] == "resume"
    assert actions[-1]["via"] == "admin"
    assert actions[-1]["actor"] == "ops@example.com"


def test_refusals_are_listed_with_their_reason(client):
    """Workflows whose state refuses the action are listed with the reason; the others proceed (R-ADM-23)."""
    paused = [paused_workflow() for _ in range(3)]
    ready = ready_workflow()
    finished = ready_workflow()
    update_workflow(finished.id, state="finished")
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=True, type="AdminTwoStep")
    assert heading(text) == "Resume all matching: 3 succeeded, 2 refused"
    assert f'<tr data-workflow-id="{ready.id}">' in text
    assert f'<tr data-workflow-id="{finished.id}">' in text
    assert "Cannot resume a ready workflow" in text
    assert "Cannot resume a finished workflow" in text
    assert {workflow_row(w.id)["state"] for w in paused} == {"ready"}
    assert workflow_row(finished.id)["state"] == "finished"


def test_listed_refusals_are_capped_and_the_rest_counted(client, monkeypatch):
    """Past the cap, refusals are counted but not listed, and the page says how many more (R-ADM-23)."""
    monkeypatch.setattr(bulk_actions, "MAX_LISTED_REFUSALS", 2)
    for _ in range(5):
        ready_workflow()
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=True)
    assert heading(text) == "Resume all matching: 0 succeeded, 5 refused"
    assert len(re.findall(r'<tr data-workflow-id="', text)) == 2
    assert "The first 2 refusals are listed; 3 more are not." in text


def test_cancel_all_needs_the_confirmation_step(client):
    """Cancel all matching only cancels after the confirmation POST (R-ADM-22, R-ADM-23)."""
    workflows = [ready_workflow() for _ in range(3)]
    token = csrf_token(client, LIST)
    text = post_all(client, token, "cancel", confirm=False, state="ready")
    assert heading(text) == "Cancel all 3 workflows matching the filter?"
    assert "Canceling cannot be undone." in text
    assert 'data-geneva-confirm="bulk-all-cancel"' in text
    assert {workflow_row(w.id)["state"] for w in workflows} == {"ready"}
    text = post_all(client, token, "cancel", confirm=True, state="ready")
    assert heading(text) == "Cancel all matching: 3 succeeded, 0 refused"
    assert {workflow_row(w.id)["state"] for w in workflows} == {"canceled"}


def test_no_filter_means_all_workflows_and_the_confirmation_says_so(client):
    """Without any filter the action covers every workflow, and the confirmation warns loudly (R-ADM-23)."""
    workflows = [ready_workflow() for _ in range(2)] + [paused_workflow()]
    token = csrf_token(client, LIST)
    text = post_all(client, token, "pause", confirm=False)
    assert heading(text) == "Pause all 3 workflows (no filter)?"
    assert "No filter is set: this pauses EVERY workflow in the database (3)." in text
    text = post_all(client, token, "pause", confirm=True)
    assert heading(text) == "Pause all matching: 2 succeeded, 1 refused"
    assert {workflow_row(w.id)["state"] for w in workflows} == {"paused"}


def test_one_matching_workflow_is_worded_in_the_singular(client):
    """The list button, the confirmation and its button say "1 workflow", with and without a filter (R-ADM-23)."""
    paused_workflow()
    text = client.get(LIST, query_string={"state": "paused"}).get_data(as_text=True)
    assert 'data-geneva-bulk-all="resume">Resume 1 matching workflow&hellip;' in text
    text = client.get(LIST).get_data(as_text=True)
    assert 'data-geneva-bulk-all="resume">Resume 1 workflow&hellip;' in text
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=False, state="paused")
    assert heading(text) == "Resume 1 workflow matching the filter?"
    assert ">Yes, resume 1 matching workflow</button>" in text
    text = post_all(client, token, "cancel", confirm=False)
    assert heading(text) == "Cancel 1 workflow (no filter)?"
    assert ">Yes, cancel 1 workflow</button>" in text
    assert "1 workflows" not in text


def test_one_listed_refusal_is_worded_in_the_singular(client, monkeypatch):
    """With one refusal listed and one more counted, the result page uses the singular (R-ADM-23)."""
    monkeypatch.setattr(bulk_actions, "MAX_LISTED_REFUSALS", 1)
    for _ in range(2):
        ready_workflow()
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=True)
    assert "The first refusal is listed; 1 more is not." in text


def test_confirmation_count_is_capped(client, monkeypatch):
    """The confirmation's N is a capped count ("2+"), and all matching are still processed (R-ADM-30, R-ADM-23)."""
    monkeypatch.setattr(filters, "COUNT_CAP", 2)
    workflows = [paused_workflow() for _ in range(4)]
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=False, state="paused")
    assert heading(text) == "Resume all 2+ workflows matching the filter?"
    assert "More than 2 workflows match; counting stopped there." in text
    text = post_all(client, token, "resume", confirm=True, state="paused")
    assert heading(text) == "Resume all matching: 4 succeeded, 0 refused"
    assert {workflow_row(w.id)["state"] for w in workflows} == {"ready"}


def test_filters_are_revalidated_on_the_post(client):
    """The POST validates its filter fields like the list: an invalid one refuses the action with its note (R-ADM-23, R-ADM-11)."""
    paused = paused_workflow()
    ready = ready_workflow()
    token = csrf_token(client, LIST)
    text = post_all(
        client, token, "resume", confirm=False, state="paused", hero_id="abc"
    )
    assert heading(text) == "Resume all matching: nothing was changed"
    assert "ignored hero_id filter &#39;abc&#39;: not a valid id" in text
    assert "data-geneva-confirm" not in text
    # Query-string filters do not count: only the form's fields do.
    response = client.post(
        f"{BULK}?state=ready",
        data={
            "csrf_token": token,
            "action": "resume",
            "scope": "all",
            "state": "paused",
            "confirm": "yes",
        },
    )
    assert "Resume all matching: 1 succeeded, 0 refused" in response.get_data(
        as_text=True
    )
    assert workflow_row(paused.id)["state"] == "ready"
    assert workflow_row(ready.id)["state"] == "ready"


@pytest.mark.parametrize(
    "ignored",
    [
        {"state": "bogus"},
        {"created_from": "yesterday"},
        {"created_to": "2024-02-30"},
        {"q": "\x00"},
        {"q": "User#abc"},
        {"type": "\x00"},
        {"hero_type": "h" * 300},
        {"hero_id": "-1"},
        {"error_class": "Boom\x00"},
        {"overdue": "maybe"},
    ],
)
@pytest.mark.parametrize("confirm", [False, True])
def test_an_ignored_filter_value_refuses_all_matching_and_changes_nothing(
    client, ignored, confirm
):
    """With any ignored filter value, neither the confirmation nor the confirmed POST acts: the page shows the note and says nothing was changed (R-ADM-23, R-ADM-11)."""
    workflows = [ready_workflow() for _ in range(2)] + [paused_workflow()]
    before = states()
    token = csrf_token(client, LIST)
    text = post_all(client, token, "cancel", confirm=confirm, **ignored)
    assert heading(text) == "Cancel all matching: nothing was changed"
    assert "Some filter values were ignored (below)" in text
    assert "nothing was done" in text
    assert '<div class="alert alert-warning geneva-note">ignored ' in text
    assert "data-geneva-confirm" not in text
    assert 'name="confirm"' not in text
    assert "\x00" not in text
    assert states() == before
    assert {workflow_row(w.id)["state"] for w in workflows} == {"ready", "paused"}


def test_an_ignored_value_next_to_valid_filters_still_refuses(client):
    """A valid filter beside an ignored value does not make the action go ahead: POST scope=all, state=paused, created_from=bogus with confirm changes nothing (R-ADM-23)."""
    paused = paused_workflow()
    token = csrf_token(client, LIST)
    text = post_all(
        client,
        token,
        "resume",
        confirm=True,
        state="paused",
        created_from="bogus",
    )
    assert heading(text) == "Resume all matching: nothing was changed"
    assert "ignored created_from &#39;bogus&#39;" in text
    assert workflow_row(paused.id)["state"] == "paused"


def test_error_class_filter_shows_its_caveat_and_still_acts(client):
    """Filtering by error class shows what it does not match (R-SE-21) on the confirmation, and the action goes ahead (R-ADM-23, R-ADM-11)."""
    failed = failed_workflow()  # paused by the default policy
    other = paused_workflow()
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=False, error_class="RuntimeError")
    assert heading(text) == "Resume 1 workflow matching the filter?"
    assert (
        "<li>latest error class = RuntimeError or &lt;module&gt;.RuntimeError</li>"
        in text
    )
    assert "reattempted executions keep their error in metadata only" in text
    text = post_all(client, token, "resume", confirm=True, error_class="RuntimeError")
    assert heading(text) == "Resume all matching: 1 succeeded, 0 refused"
    assert workflow_row(failed.id)["state"] == "ready"
    assert workflow_row(other.id)["state"] == "paused"


def test_nothing_matching_says_so_and_offers_no_confirm_button(client):
    """With no matching workflow the confirmation says so and has nothing to confirm (R-ADM-23)."""
    ready_workflow()
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=False, state="paused")
    assert heading(text) == "Resume: no workflows match the filter"
    assert "data-geneva-confirm" not in text


def test_bulk_all_without_csrf_token_is_400_and_changes_nothing(client):
    """A bulk-all POST without a valid CSRF token gets 400 and changes nothing (R-ADM-05)."""
    workflows = [paused_workflow() for _ in range(3)]
    client.get(LIST)
    for token in (None, "forged"):
        data = {"action": "resume", "scope": "all", "confirm": "yes", "state": "paused"}
        if token is not None:
            data["csrf_token"] = token
        assert client.post(BULK, data=data).status_code == 400
    assert {workflow_row(w.id)["state"] for w in workflows} == {"paused"}


def test_get_on_the_bulk_url_is_405_and_changes_nothing(client):
    """GET never changes state: a GET of the bulk URL with bulk parameters is 405 Method Not Allowed, Allow: POST (R-ADM-05)."""
    workflows = [paused_workflow() for _ in range(2)]
    token = csrf_token(client, LIST)
    response = client.get(
        BULK,
        query_string={
            "csrf_token": token,
            "action": "resume",
            "scope": "all",
            "confirm": "yes",
        },
    )
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"
    assert {workflow_row(w.id)["state"] for w in workflows} == {"paused"}


def test_read_only_operator_cannot_bulk_all(app, client):
    """With GENEVA_ADMIN_CAN_ACT false the all-matching buttons are disabled and a POST is refused (R-ADM-03, R-ADM-23)."""
    workflow = paused_workflow()
    token = csrf_token(client, LIST)
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    geneva.reload_settings(app)
    text = client.get(LIST).get_data(as_text=True)
    assert re.search(
        r'disabled title="read-only: GENEVA_ADMIN_CAN_ACT[^"]*" data-geneva-bulk-all="resume"',
        text,
    )
    response = client.post(
        BULK,
        data={
            "csrf_token": token,
            "action": "resume",
            "scope": "all",
            "confirm": "yes",
        },
    )
    assert response.status_code == 403
    assert workflow_row(workflow.id)["state"] == "paused"


def test_workflows_created_during_the_walk_are_not_included(client):
    """Only workflows created before the confirmation are processed (R-ADM-23)."""
    old = paused_workflow()
    new = paused_workflow()
    # A workflow created "in the future" stands in for one created mid-walk.
    update_workflow(
        new.id, created_at=workflow_row(old.id)["created_at"].replace(year=2999)
    )
    token = csrf_token(client, LIST)
    text = post_all(client, token, "resume", confirm=True, type="AdminTwoStep")
    assert workflow_row(old.id)["state"] == "ready"
    assert workflow_row(new.id)["state"] == "paused"
    assert str(new.id) not in re.findall(r'data-workflow-id="([^"]+)"', text)
