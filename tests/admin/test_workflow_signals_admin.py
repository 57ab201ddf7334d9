"""Workflow signals in the admin (issue 18, operators' part).

R-WSIG-66 (a parked step says what it waits for and since when), R-WSIG-67 (the
workflow page's signals panel), R-WSIG-68 (the "Deliver signal…" form), R-WSIG-69
(the signals list), R-WSIG-70 (without the add_workflow_signals unit), R-ADM-05,
R-ADM-06.
"""

from __future__ import annotations

import html
import logging
import re
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import InvalidStateError
from flask_geneva.admin.signal_delivery import AUDIT_LOGGER
from flask_geneva.core import clock
from tests.admin.conftest import csrf_token
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.admin.support import ready_workflow
from tests.admin.workflows import AdminSignalWait
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import signal_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

SIGNALS_URL = "/geneva/signals/"


def _parked(geneva_jobs, email="waiter@example.com"):
    """An AdminSignalWait whose 'ship' step is parked waiting (R-WSIG-10)."""
    workflow = AdminSignalWait.create(hero=new_user(email))
    geneva_jobs.drain()
    assert execution_rows(workflow.id)[-1]["state"] == "waiting"
    return workflow


def _deliver_url(workflow_id):
    return f"/geneva/workflows/{workflow_id}/signal"


def _page(client, url):
    response = client.get(url)
    assert response.status_code == 200, response.data[:500]
    return response.get_data(as_text=True)


def _deliver(client, workflow_id, **data):
    token = csrf_token(client, detail_url(workflow_id))
    response = client.post(
        _deliver_url(workflow_id), data={"csrf_token": token, **data}
    )
    assert response.status_code == 303, response.data[:500]
    return html.unescape(_page(client, detail_url(workflow_id)))


# -- R-WSIG-66: the parked step ------------------------------------------------


def test_a_parked_step_says_what_it_waits_for_since_when_and_its_timeout(
    client, geneva_jobs
):
    """The workflow page reads "Step ship is waiting for payment_confirmed since
    3 d; times out in 2 d" (R-WSIG-66)."""
    workflow = _parked(geneva_jobs)
    now = clock.now()
    parked = execution_rows(workflow.id)[-1]
    update_execution(
        parked["id"],
        waiting_since=now - timedelta(days=3, minutes=1),
        wait_deadline=now + timedelta(days=2, hours=1),
    )
    text = html.unescape(_page(client, detail_url(workflow.id)))
    assert 'is waiting for <code class="geneva-awaited">payment_confirmed</code>' in (
        text
    )
    assert 'since <time class="geneva-time"' in text
    assert ">3 d</time>; times out in <time" in text
    assert ">2 d</time>." in text
    assert f'data-execution-id="{parked["id"]}"' in text


def test_a_passed_deadline_and_no_timeout_read_as_such(client, geneva_jobs):
    """A deadline in the past says the wait timed out; no deadline says "no
    timeout" (R-WSIG-66)."""
    workflow = _parked(geneva_jobs)
    parked = execution_rows(workflow.id)[-1]
    update_execution(parked["id"], wait_deadline=clock.now() - timedelta(minutes=5))
    text = _page(client, detail_url(workflow.id))
    assert "its wait timed out" in text
    assert "(the dispatcher wakes it)" in text
    update_execution(parked["id"], wait_deadline=None)
    assert "; no timeout." in _page(client, detail_url(workflow.id))


def test_run_now_of_a_parked_step_says_to_deliver_the_signal(client, geneva_jobs):
    """A step parked at its wait_for gate is in the state ``waiting``: the Run now
    button read "the step is not waiting", contradicting the badge beside it. Its
    reason and run_now()'s refusal now say it waits for a signal (R-ADM-45,
    R-ADM-51).
    """
    workflow = _parked(geneva_jobs)
    page = html.unescape(_page(client, detail_url(workflow.id)))
    reason = "not possible: step 'ship' waits for a signal, not for its time: "
    assert f"Run now: {reason}deliver the signal instead" in page
    assert "the step is not waiting" not in page
    with pytest.raises(InvalidStateError) as refused:
        workflow.run_now()
    assert "step 'ship' waits for a signal, not for its time" in str(refused.value)
    assert f"flask geneva signal {workflow.id} NAME" in str(refused.value)
    assert execution_rows(workflow.id)[-1]["state"] == "waiting"


def test_the_execution_pages_show_the_waiting_state(client, geneva_jobs):
    """The executions list shows a waiting badge and "waiting for a signal" in its
    Next run column, as the workflows list does for the workflow; the execution's
    page says what it waits for (R-WSIG-66)."""
    workflow = _parked(geneva_jobs)
    parked = execution_rows(workflow.id)[-1]
    listed = _page(client, "/geneva/step-executions/?state=waiting")
    assert f'data-execution-id="{parked["id"]}"' in listed
    assert 'class="geneva-badge geneva-badge--waiting">waiting</span>' in listed
    assert "waiting for a signal" in listed
    detail = _page(client, f"/geneva/step-executions/{parked['id']}")
    assert "Waiting for <code" in detail
    assert "payment_confirmed</code> since" in detail
    timeline = _page(client, detail_url(workflow.id))
    assert "geneva-badge--waiting" in timeline
    workflows = _page(client, "/geneva/workflows/")
    row = workflows[workflows.index(f'<tr data-workflow-id="{workflow.id}"') :]
    assert "waiting for a signal" in row[: row.index("</tr>")]


# -- R-WSIG-67: the signals panel ----------------------------------------------


def test_the_panel_lists_each_signal_with_its_state_key_payload_and_executions(
    client, geneva_jobs
):
    """A consumed signal and one that expired with its workflow: state, key,
    payload, times, and links to the execution that claimed and consumed it
    (R-WSIG-67, R-WSIG-34)."""
    workflow = AdminSignalWait.create(hero=new_user())
    workflow.signal(
        "other", {"amount": 5}, idempotency_key="key-1", warn_unawaited=False
    )
    geneva_jobs.drain()  # 'other' does not match: ship parks
    delivery = workflow.signal("payment_confirmed", {"ok": True})
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"
    ship = next(r for r in execution_rows(workflow.id) if r["step_name"] == "ship")
    text = _page(client, detail_url(workflow.id))
    panel = text[text.index('id="signals"') :]
    consumed = panel[panel.index(f'data-signal-id="{delivery.signal.id}"') :]
    consumed = consumed[: consumed.index("</tr>")]
    assert "geneva-badge--consumed" in consumed
    assert f'href="/geneva/step-executions/{ship["id"]}">execution {ship["id"]}' in (
        consumed
    )
    assert "claimed by" in consumed
    assert "consumed by" in consumed
    assert "&#34;ok&#34;: true" in consumed or "&quot;ok&quot;: true" in consumed
    # The unmatched signal expired with its workflow (R-WSIG-34).
    other = next(r for r in signal_rows(workflow.id) if r["name"] == "other")
    assert other["state"] == "expired"
    expired = panel[panel.index(f'data-signal-id="{other["id"]}"') :]
    expired = expired[: expired.index("</tr>")]
    assert "geneva-badge--expired" in expired
    assert "key-1" in expired
    assert "amount" in expired
    assert "claimed by" not in expired


def test_a_long_payload_is_cut_with_a_control_to_see_all(client, geneva_jobs):
    """A payload over 2 KB shows its start and the whole text behind a <details>
    (R-WSIG-67)."""
    workflow = _parked(geneva_jobs)
    ready = AdminSignalWait.create(hero=new_user("other@example.com"))
    ready.signal("bulky", {"text": "y" * 5000}, warn_unawaited=False)
    text = _page(client, detail_url(ready.id))
    assert '<details class="geneva-payload">' in text
    assert "show all (" in text
    assert "y" * 5000 in text  # the whole payload is there to expand
    assert '<details class="geneva-payload">' not in _page(
        client, detail_url(workflow.id)
    )


def test_stored_signal_text_is_escaped_everywhere(client, geneva_jobs):
    """A name, key and payload holding <script> are escaped on the workflow page,
    the signals list and in the flash (R-ADM-06, R-WSIG-67..69)."""
    workflow = _parked(geneva_jobs)
    evil = "<script>alert('x')</script>"
    token = csrf_token(client, detail_url(workflow.id))
    client.post(
        _deliver_url(workflow.id),
        data={
            "csrf_token": token,
            "name": evil,
            "payload": '{"note": "<script>alert(1)</script>"}',
            "idempotency_key": "<b>k</b>",
        },
    )
    assert signal_rows(workflow.id)[0]["name"] == evil
    for url in (detail_url(workflow.id), SIGNALS_URL):
        text = _page(client, url)
        assert "<script>alert" not in text
        assert "<b>k</b>" not in text
        assert "&lt;script&gt;alert(" in text
        assert "&lt;b&gt;k&lt;/b&gt;" in text


# -- R-WSIG-68: the "Deliver signal…" form ----------------------------------------


def test_the_form_delivers_the_signal_wakes_the_step_and_is_audited(
    client, app, geneva_jobs, caplog
):
    """Posting name and JSON payload calls workflow.signal(): the parked step is
    woken, the flash says so, and the delivery is logged with the actor
    (R-WSIG-68, R-WSIG-62)."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "alice"
    workflow = _parked(geneva_jobs)
    parked = execution_rows(workflow.id)[-1]
    page = _page(client, detail_url(workflow.id))
    assert 'data-geneva-action="deliver_signal"' in page
    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        text = _deliver(
            client, workflow.id, name="payment_confirmed", payload='{"amount": 100}'
        )
    signal = signal_rows(workflow.id)[0]
    assert (
        f"Workflow {workflow.id}: payment_confirmed: signal {signal['id']} stored, "
        f"woke execution {parked['id']}"
    ) in text
    assert signal["state"] == "claimed"
    assert execution_rows(workflow.id)[-1]["state"] == "scheduled"
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [parked["id"]]
    records = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    assert len(records) == 1
    assert "by alice" in records[0].getMessage()
    assert (records[0].geneva_via, records[0].geneva_actor) == ("admin", "alice")
    db.session.expire_all()
    # Not an operator action: the workflow's metadata is not written (R-WSIG-62).
    assert not workflow.read_metadata("operator_actions")
    geneva_jobs.drain()
    assert workflow_row(workflow.id)["state"] == "finished"


def test_a_pending_delivery_and_a_duplicate_key_are_reported(client, geneva_jobs):
    """A signal nothing waits for is "stored, pending"; the same key again is a
    duplicate that changes nothing (R-WSIG-68, R-WSIG-22)."""
    workflow = _parked(geneva_jobs)
    first = _deliver(client, workflow.id, name="later", idempotency_key="k-7")
    signal = signal_rows(workflow.id)[0]
    assert f"later: signal {signal['id']} stored, pending" in first
    again = _deliver(client, workflow.id, name="later", idempotency_key="k-7")
    assert (
        f"later: duplicate of signal {signal['id']} (idempotency key 'k-7'), "
        "nothing changed"
    ) in again
    assert len(signal_rows(workflow.id)) == 1
    assert execution_rows(workflow.id)[-1]["state"] == "waiting"


def test_a_name_no_step_waits_for_is_stored_with_a_warning(client, geneva_jobs):
    """A misspelt name is delivered (a later deploy may wait for it), and a
    warning flash names what the class's steps wait for, as the CLI and
    workflow.signal() say (R-WSIG-73, R-WSIG-68)."""
    workflow = _parked(geneva_jobs)
    text = _deliver(client, workflow.id, name="payment_confirmd")
    signal = signal_rows(workflow.id)[0]
    assert f"payment_confirmd: signal {signal['id']} stored, pending" in text
    flashes = re.findall(
        r'<div class="alert alert-(\w+) alert-dismissable">.*?</button>\s*(.*?)\s*</div>',
        text,
        re.S,
    )
    assert (
        "warning",
        f"Workflow {workflow.id}: payment_confirmd: no step of AdminSignalWait "
        "waits for 'payment_confirmd'; its steps wait for 'payment_confirmed' "
        "(the signal is stored)",
    ) in flashes
    assert execution_rows(workflow.id)[-1]["state"] == "waiting"
    good = _deliver(
        client, _parked(geneva_jobs, "w2@example.com").id, name="payment_confirmed"
    )
    assert "alert-warning alert-dismissable" not in good


@pytest.mark.parametrize(
    ("data", "config", "expected"),
    [
        (
            {"name": "payment_confirmed", "payload": "{not json"},
            {},
            "the payload is not valid JSON (Expecting property name",
        ),
        ({"name": "  "}, {}, "give the signal's name"),
        (
            {"name": "payment_confirmed", "payload": '{"t": "' + "x" * 100 + '"}'},
            {"GENEVA_MAX_SIGNAL_PAYLOAD_SIZE": 50},
            "more than GENEVA_MAX_SIGNAL_PAYLOAD_SIZE (50 bytes)",
        ),
        (
            {"name": "payment_confirmed", "payload": "[" * 100_000 + "]" * 100_000},
            {},
            "the payload is not valid JSON (nested too deeply",
        ),
        (
            {"name": "n" * 256},
            {},
            "signal name must be a non-empty str of at most 255 characters",
        ),
    ],
)
def test_bad_input_is_a_flashed_refusal_that_stores_nothing(
    client, app, geneva_jobs, data, config, expected
):
    """Invalid JSON, no name, an oversize payload or a too long name: a flash
    "Deliver signal refused: …", never a 500, nothing stored (R-WSIG-68)."""
    app.config.update(config)
    workflow = _parked(geneva_jobs)
    text = _deliver(client, workflow.id, **data)
    assert f"Workflow {workflow.id}: Deliver signal refused: " in text
    assert expected in text
    assert signal_rows(workflow.id) == []
    assert execution_rows(workflow.id)[-1]["state"] == "waiting"


def test_a_full_buffer_is_a_flashed_refusal(client, app, geneva_jobs):
    """One pending signal more than GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW is
    refused with the engine's message (R-WSIG-68, R-WSIG-23)."""
    app.config["GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW"] = 1
    workflow = _parked(geneva_jobs)
    workflow.signal("first", warn_unawaited=False)
    text = _deliver(client, workflow.id, name="second")
    assert f"Workflow {workflow.id}: Deliver signal refused: " in text
    assert "1 pending" in text
    assert [r["name"] for r in signal_rows(workflow.id)] == ["first"]


@pytest.mark.parametrize("ended", ["canceled", "finished"])
def test_a_workflow_that_ended_after_the_page_was_rendered_is_refused(
    client, geneva_jobs, ended
):
    """The form was rendered while the workflow was ready; it was canceled (by
    another operator) or finished before the POST: a clear flash, nothing stored
    (R-WSIG-68, R-WSIG-24)."""
    workflow = _parked(geneva_jobs)
    token = csrf_token(client, detail_url(workflow.id))
    if ended == "canceled":
        workflow.cancel()
    else:
        update_workflow(workflow.id, state="finished")
    response = client.post(
        _deliver_url(workflow.id),
        data={"csrf_token": token, "name": "payment_confirmed"},
        follow_redirects=True,
    )
    assert response.status_code == 200
    text = html.unescape(response.get_data(as_text=True))
    assert (
        f"Workflow {workflow.id}: Deliver signal refused: Cannot signal a {ended} "
        f"workflow ({workflow.id}): signal 'payment_confirmed' was not stored"
    ) in text
    assert signal_rows(workflow.id) == []
    # The ended workflow's page offers no form any more.
    assert 'data-geneva-action="deliver_signal"' not in text


def test_no_token_is_400_and_a_read_only_operator_gets_no_form_and_403(
    client, app, geneva_jobs
):
    """No CSRF token: 400; GENEVA_ADMIN_CAN_ACT false: no form, 403; nothing
    stored (R-ADM-05, R-ADM-03, R-WSIG-68)."""
    workflow = _parked(geneva_jobs)
    no_token = client.post(_deliver_url(workflow.id), data={"name": "go"})
    assert no_token.status_code == 400
    token = csrf_token(client, detail_url(workflow.id))
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    page = _page(client, detail_url(workflow.id))
    assert 'data-geneva-action="deliver_signal"' not in page
    refused = client.post(
        _deliver_url(workflow.id), data={"csrf_token": token, "name": "go"}
    )
    assert refused.status_code == 403
    assert client.post(_deliver_url("999999"), data={}).status_code == 404
    assert signal_rows(workflow.id) == []


# -- R-WSIG-69: the signals list -----------------------------------------------


def test_the_signals_list_filters_by_state_name_class_and_received_range(
    client, geneva_jobs
):
    """Filters narrow the list; each row links to its workflow (R-WSIG-69)."""
    waiting = _parked(geneva_jobs)
    waiting.signal("payment_confirmed", {"n": 1})  # claimed (woken)
    other = ready_workflow()
    other.signal("nudge", idempotency_key="n-1", warn_unawaited=False)  # pending
    text = _page(client, SIGNALS_URL)
    assert f'href="/geneva/workflows/{waiting.id}#signals"' in text
    assert f'href="/geneva/workflows/{other.id}#signals"' in text
    nudge, paid = '">nudge</td>', '">payment_confirmed</td>'
    by_state = _page(client, SIGNALS_URL + "?state=pending")
    assert nudge in by_state
    assert paid not in by_state
    by_name = _page(client, SIGNALS_URL + "?name=payment_confirmed")
    assert nudge not in by_name
    assert paid in by_name
    by_class = _page(client, SIGNALS_URL + "?type=AdminTwoStep")
    assert nudge in by_class
    assert paid not in by_class
    today = clock.now().date()
    in_range = _page(
        client, SIGNALS_URL + f"?received_from={today}&received_to={today}"
    )
    assert nudge in in_range
    assert "received before" in in_range
    later = today + timedelta(days=1)
    past = _page(client, SIGNALS_URL + f"?received_from={later}")
    assert nudge not in past
    assert "No signals match these filters." in past


def test_bad_filter_values_are_ignored_with_a_note(client):
    """An unknown state or a date that does not parse is ignored with a note,
    never a 500 (R-WSIG-69, R-ADM-31)."""
    text = html.unescape(
        _page(client, SIGNALS_URL + "?state=lost&received_from=yesterday&page=x")
    )
    assert "ignored state 'lost': use pending, claimed, consumed, expired" in text
    assert "ignored received_from 'yesterday': not a date or datetime" in text
    assert "ignored page 'x'" in text
    assert "No workflow signals yet." in text


def test_the_signals_list_pages_newest_first(client, app, geneva_jobs):
    """51 signals: page 1 shows the newest 50 and a next link, page 2 the oldest
    (R-WSIG-69)."""
    workflow = _parked(geneva_jobs)
    for number in range(51):
        workflow.signal(f"s{number}", warn_unawaited=False)
    first = _page(client, SIGNALS_URL)
    assert first.count("data-signal-id=") == 50
    assert 'rel="next"' in first
    assert first.index(">s50<") < first.index(">s1<")
    assert ">s0<" not in first
    second = _page(client, SIGNALS_URL + "?page=2")
    assert second.count("data-signal-id=") == 1
    assert ">s0<" in second
    assert 'rel="next"' not in second


def test_the_signals_list_is_in_the_menu(client):
    """The standalone admin's menu links the signals list (R-WSIG-69)."""
    text = _page(client, "/geneva/")
    assert 'href="/geneva/signals/"' in text


# -- R-WSIG-70: without the unit -------------------------------------------------


@pytest.fixture
def without_signals(without_unit):
    without_unit("add_workflow_signals")


def test_without_the_unit_the_pages_work_and_say_how_to_install_it(
    client, without_signals
):
    """Without add_workflow_signals the workflow page, the execution pages and the
    signals list render and name the unit; a delivery is a flashed refusal naming
    `flask geneva install` (R-WSIG-70, R-WSIG-04)."""
    workflow = ready_workflow()
    db.session.rollback()
    table = geneva.StepExecution.__table__
    with db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        execution_id = connection.scalar(
            sa.select(table.c.id).where(table.c.workflow_id == workflow.id)
        )
    page = _page(client, detail_url(workflow.id))
    assert "Workflow signals are not installed in this database" in page
    assert "add_workflow_signals" in page
    assert 'data-geneva-action="deliver_signal"' not in page
    listed = _page(client, SIGNALS_URL)
    assert "add_workflow_signals" in listed
    detail = _page(client, f"/geneva/step-executions/{execution_id}")
    assert "not in this database" in detail
    _page(client, "/geneva/step-executions/")
    assert f'data-workflow-id="{workflow.id}"' in _page(client, "/geneva/workflows/")
    text = _deliver(client, workflow.id, name="go")
    assert f"Workflow {workflow.id}: Deliver signal refused: " in text
    assert "flask geneva install" in text
