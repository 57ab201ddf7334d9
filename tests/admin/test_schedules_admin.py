"""The admin's Schedules page and its buttons (issue 37, operators' part).

R-SCHED-36: one row per declared schedule (class, cron, zone, paused, the next
5 fire times in the schedule's zone and the operator's, the last fire with its
outcome and error, the recent fires with their counts), the operator actions
below; without the add_schedules unit a note and no buttons. R-SCHED-37:
Pause, Resume and Run now POST with CSRF (R-ADM-05), need GENEVA_ADMIN_CAN_ACT
(R-ADM-03), go through the engine's operations with via="admin" and the actor
(R-ADM-04), Run now without running the fan-out; a refusal is a flash message,
never a 500. R-SCHED-35: each action is recorded on the schedule's row.
R-ADM-06: stored error text is escaped.
"""

from __future__ import annotations

import html
import re
import threading
from datetime import UTC
from datetime import datetime

import pytest
import sqlalchemy as sa

from flask_geneva.core import clock
from flask_geneva.engine.schedules import pause_schedule
from flask_geneva.engine.schedules.fan_out import run_fire
from flask_geneva.ext.app_state import current_context
from tests.admin.conftest import csrf_token
from tests.apps.basic import User
from tests.apps.basic import db
from tests.engine.schedules.support import SCHEDULES
from tests.engine.schedules.support import Digest
from tests.engine.schedules.support import Tick
from tests.engine.schedules.support import fire_at
from tests.engine.schedules.support import fires
from tests.engine.schedules.support import make_users
from tests.engine.schedules.support import schedule_row
from tests.engine.schedules.support import workflows_of

URL = "/geneva/schedules/"
ACTION_URL = "/geneva/schedules/action"
SCRIPT = "<script>alert('schedule')</script>"


def _utc(*parts):
    return datetime(*parts, tzinfo=UTC)


def _text(response):
    assert response.status_code == 200, response.data[:800]
    return html.unescape(response.get_data(as_text=True))


def _row(page, name):
    """The page's table row of schedule ``name`` (its HTML)."""
    match = re.search(
        rf'<tr data-schedule="{re.escape(name)}">(.*?)</tr>', page, flags=re.S
    )
    assert match is not None, f"no row for {name}"
    return match.group(1)


def _post(client, action, name, *, token=None, follow_redirects=True):
    token = token if token is not None else csrf_token(client, URL)
    return client.post(
        ACTION_URL,
        data={"csrf_token": token, "action": action, "schedule": name},
        follow_redirects=follow_redirects,
    )


def _flashes(response):
    """The page's flash messages as ``(category, text)``."""
    page = response.get_data(as_text=True)
    return [
        (category, html.unescape(" ".join(re.sub(r"<[^>]+>", " ", body).split())))
        for category, body in re.findall(
            r'<div class="alert alert-(\w+) alert-dismissable">\s*<button[^>]*>'
            r"[^<]*</button>(.*?)</div>",
            page,
            flags=re.S,
        )
    ]


def _users():
    return sa.select(User)


def _actions(name):
    return schedule_row(name)["operator_actions"] or []


def test_the_page_shows_each_schedule_with_its_fires_in_both_zones(
    app, client, declare
):
    """R-SCHED-36: class, cron, zone, state, the next 5 fires in the schedule's
    zone and as exact UTC <time> elements the zone switch rewrites (R-ADM-41),
    the last fire and its outcome, the recent fires with their counts."""
    make_users(2)
    declare(
        "berlin-digest",
        Digest,
        cron="0 9 * * MON",
        timezone="Europe/Berlin",
        heroes=_users,
    )
    fire_at(_utc(2025, 3, 17, 7, 30))  # first seen: fire_after = then
    fire_at(_utc(2025, 3, 17, 8, 0, 5))  # Monday 09:00 CET fires
    declare("hourly", Tick, cron="0 * * * *")  # never fired
    context = current_context()
    schedule = context.models.schedules["berlin-digest"]
    with clock.frozen(_utc(2025, 3, 17, 8, 1)):
        run_fire(context, context.session, schedule, _utc(2025, 3, 17, 8))
    db.session.remove()
    with clock.frozen(_utc(2025, 3, 17, 8, 2)):
        page = _text(client.get(URL))
    assert page.index('data-schedule="berlin-digest"') < page.index(
        'data-schedule="hourly"'
    )
    row = _row(page, "berlin-digest")
    assert "Digest" in row
    assert "0 9 * * MON" in row
    assert "Europe/Berlin" in row
    assert "active" in row
    # The next 5 Mondays at 09:00 Berlin time: CET, then CEST from 30 March.
    upcoming = re.search(r'class="[^"]*geneva-schedule-next">(.*?)</td>', row, re.S)
    assert re.findall(r"Mon 2025-\d\d-\d\d 09:00 CES?T", upcoming.group(1)) == [
        "Mon 2025-03-24 09:00 CET",
        "Mon 2025-03-31 09:00 CEST",
        "Mon 2025-04-07 09:00 CEST",
        "Mon 2025-04-14 09:00 CEST",
        "Mon 2025-04-21 09:00 CEST",
    ]
    assert 'datetime="2025-03-24T08:00:00Z"' in row
    assert 'datetime="2025-03-31T07:00:00Z"' in row
    assert "2025-03-31 07:00:00 UTC" in row  # the operator's zone: UTC by default
    last = re.search(r'class="geneva-schedule-last">(.*?)</td>', row, flags=re.S)
    assert "Mon 2025-03-17 09:00 CET" in last.group(1)
    assert "geneva-badge--done" in last.group(1)
    recent = re.search(r'class="geneva-schedule-fires">(.*?)</td>', row, flags=re.S)
    assert "cron" in recent.group(1)
    assert "2 started, 0 skipped" in recent.group(1)
    hourly = _row(page, "hourly")
    assert "never" in hourly
    assert list(re.findall(r'data-geneva-action="(\w+)">', hourly)) == [
        "pause",
        "resume",
        "run_now",
    ]
    assert re.search(
        r'disabled title="not possible: the schedule is not paused"', hourly
    )


def test_pause_resume_and_run_now_go_through_the_engine_and_are_audited(
    app, client, declare
):
    """R-SCHED-37, R-SCHED-35: each button changes the schedule through its
    operation, flashes what it did and is recorded with via="admin" and the
    actor; Run now creates a run_now fire and leaves its fan-out to the
    dispatcher (no workflow yet)."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "alice@example.com"
    declare("hourly", Tick, cron="0 * * * *")
    paused = _post(client, "pause", "hourly")
    assert ("success", "Schedule 'hourly': Pause done") in _flashes(paused)
    assert schedule_row("hourly")["paused"] is True
    row = _row(_text(paused), "hourly")
    assert "geneva-badge--paused" in row
    assert re.search(r'disabled title="not possible: the schedule is paused"', row)
    resumed = _post(client, "resume", "hourly")
    assert ("success", "Schedule 'hourly': Resume done") in _flashes(resumed)
    assert schedule_row("hourly")["paused"] is False
    ran = _post(client, "run_now", "hourly")
    [(category, message)] = _flashes(ran)
    assert category == "success"
    assert "Run now done: fire at" in message
    assert "the dispatcher's next run starts its workflows" in message
    [fire] = fires("hourly")
    assert (fire["kind"], fire["state"], fire["started"]) == ("run_now", "running", 0)
    assert workflows_of(Tick) == []  # process=False: the request ran no fan-out
    actions = _actions("hourly")
    assert [(a["action"], a["actor"], a["via"]) for a in actions] == [
        ("pause", "alice@example.com", "admin"),
        ("resume", "alice@example.com", "admin"),
        ("run_now", "alice@example.com", "admin"),
    ]
    assert datetime.fromisoformat(actions[2]["fire_at"]) == fire["fire_at"]
    log = _text(ran).split('id="operator-actions"')[1]
    assert list(re.findall(r'data-action="(\w+)"', log)) == [
        "run_now",
        "resume",
        "pause",
    ]
    assert log.count("alice@example.com") == 3


def test_wrong_state_and_unknown_names_are_flashed_refusals(app, client, declare):
    """R-SCHED-37: Resume of a running schedule, a second Pause and an
    undeclared name are flashed refusals in the engine's words, nothing
    recorded; never a 500."""
    declare("hourly", Tick, cron="0 * * * *")
    refused = _post(client, "resume", "hourly")
    assert _flashes(refused) == [
        (
            "danger",
            "Schedule 'hourly': Resume refused: cannot resume schedule "
            "'hourly': it is not paused",
        )
    ]
    _post(client, "pause", "hourly")
    again = _post(client, "pause", "hourly")
    assert _flashes(again) == [
        (
            "danger",
            "Schedule 'hourly': Pause refused: cannot pause schedule 'hourly': "
            "it is paused",
        )
    ]
    unknown = _post(client, "run_now", "nope")
    assert _flashes(unknown) == [
        (
            "danger",
            "Schedule 'nope': Run now refused: no such schedule is declared (it "
            "may have been removed since the page was shown)",
        )
    ]
    huge = _post(client, "pause", "x" * 20_000)
    [(category, message)] = _flashes(huge)
    assert category == "danger"
    assert message.startswith(f"Schedule '{'x' * 80}…': Pause refused")
    assert [a["action"] for a in _actions("hourly")] == ["pause"]
    assert fires("hourly") == []


def test_a_post_without_a_valid_csrf_token_changes_nothing(app, client, declare):
    """R-ADM-05: no token or a forged one is a 400; an unknown action too."""
    declare("hourly", Tick, cron="0 * * * *")
    client.get(URL)
    missing = client.post(ACTION_URL, data={"action": "pause", "schedule": "hourly"})
    assert missing.status_code == 400
    forged = _post(
        client,
        "pause",
        "hourly",
        token="forged",  # noqa: S106 - a forged CSRF token
        follow_redirects=False,
    )
    assert forged.status_code == 400
    assert "missing or invalid CSRF token" in forged.get_data(as_text=True)
    unknown = _post(client, "delete", "hourly", follow_redirects=False)
    assert unknown.status_code == 400
    assert "unknown schedule action 'delete'" in html.unescape(
        unknown.get_data(as_text=True)
    )
    assert schedule_row("hourly") is None  # not even its row was inserted


def test_read_only_operators_see_disabled_buttons_and_cannot_post(app, client, declare):
    """R-ADM-03: with GENEVA_ADMIN_CAN_ACT false every button is disabled with
    the reason, and a POST is a 403 that changes nothing."""
    declare("hourly", Tick, cron="0 * * * *")
    token = csrf_token(client, URL)  # the session's token, from a page that acts
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    page = _text(client.get(URL))
    row = _row(page, "hourly")
    assert "<form" not in row
    assert len(re.findall(r'disabled title="read-only: GENEVA_ADMIN_CAN_ACT', row)) == 2
    assert "read-only: GENEVA_ADMIN_CAN_ACT does not allow you to act" in page
    forbidden = _post(client, "pause", "hourly", token=token, follow_redirects=False)
    assert forbidden.status_code == 403
    assert schedule_row("hourly") is None


def test_no_access_no_page(app, client, declare):
    """R-ADM-02: without access the page is the standalone 403, naming no schedule."""
    declare("secret-schedule", Tick, cron="0 * * * *")
    app.config["GENEVA_ADMIN_ACCESS"] = lambda: False
    response = client.get(URL)
    assert response.status_code == 403
    assert "secret-schedule" not in response.get_data(as_text=True)


def test_two_operators_pausing_at_once_one_wins_one_is_refused(app, client, declare):
    """R-SCHED-37, R-SCHED-31: two Pause posts at the same time, from two
    operators' pages: exactly one is done, the other a clear refusal, and one
    pause is recorded (the row lock and the guarded UPDATE decide)."""
    declare("hourly", Tick, cron="0 * * * *")
    operators = [app.test_client(), app.test_client()]
    tokens = [csrf_token(operator, URL) for operator in operators]
    db.session.remove()
    barrier = threading.Barrier(2)
    results: list = [None, None]

    def pause(index):
        barrier.wait()
        response = _post(operators[index], "pause", "hourly", token=tokens[index])
        results[index] = _flashes(response)

    threads = [threading.Thread(target=pause, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    flashes = sorted(flash for result in results for flash in result)
    assert flashes == [
        (
            "danger",
            "Schedule 'hourly': Pause refused: cannot pause schedule 'hourly': "
            "it is paused",
        ),
        ("success", "Schedule 'hourly': Pause done"),
    ]
    assert schedule_row("hourly")["paused"] is True
    assert [a["action"] for a in _actions("hourly")] == ["pause"]


def test_a_page_rendered_before_another_operator_acted_is_refused(app, client, declare):
    """R-SCHED-37: Pause from a page rendered while the schedule ran, after
    the CLI paused it meanwhile, is refused; the CLI's pause stays recorded."""
    declare("hourly", Tick, cron="0 * * * *")
    token = csrf_token(client, URL)
    context = current_context()
    pause_schedule(context, context.session, "hourly", actor="bob", via="cli")
    refused = _post(client, "pause", "hourly", token=token)
    assert (
        "Pause refused: cannot pause schedule 'hourly': it is paused"
        in (_flashes(refused)[0][1])
    )
    assert [(a["actor"], a["via"]) for a in _actions("hourly")] == [("bob", "cli")]


def test_stored_error_text_is_escaped(app, client, declare):
    """R-ADM-06: a failed fire's error (the heroes callable's message) with
    markup is shown as text in the last fire and the recent fires."""

    def failing():
        raise RuntimeError(SCRIPT)

    declare("broken", Digest, cron="0 * * * *", heroes=failing)
    fire_at(_utc(2025, 1, 1, 8, 30))
    fire_at(_utc(2025, 1, 1, 9, 0, 5))
    context = current_context()
    with clock.frozen(_utc(2025, 1, 1, 9, 1)):
        run_fire(
            context,
            context.session,
            context.models.schedules["broken"],
            _utc(2025, 1, 1, 9),
        )
    db.session.remove()
    raw = client.get(URL).get_data(as_text=True)
    assert "<script>alert" not in raw
    assert "&lt;script&gt;alert(&#39;schedule&#39;)&lt;/script&gt;" in raw
    row = _row(html.unescape(raw), "broken")
    assert row.count(f"RuntimeError: {SCRIPT}") >= 2  # last fire and recent fire
    assert "geneva-badge--failed" in row


def test_without_the_unit_the_page_says_so_and_offers_no_buttons(
    app, client, declare, without_unit
):
    """R-SCHED-36, R-SCHED-50: without add_schedules the page names the unit
    and the commands, lists the schedules with their next fires and has no
    button; a POST anyway is a flashed refusal naming the unit."""
    declare("hourly", Tick, cron="0 * * * *")
    without_unit("add_schedules")
    page = _text(client.get(URL))
    assert "install unit add_schedules" in page
    assert "flask geneva install" in page
    assert "flask db upgrade" in page
    row = _row(page, "hourly")
    assert "data-geneva-action" not in row
    assert len(re.findall(r":00:00 UTC", row)) >= 5
    assert 'id="operator-actions"' not in page
    token = csrf_token(client, "/geneva/workflows/")
    refused = _post(client, "pause", "hourly", token=token)
    [(category, message)] = _flashes(refused)
    assert category == "danger"
    assert "install unit add_schedules" in message


def test_no_schedules_declared_says_how_to_declare_one(app, client):
    """R-SCHED-36: the empty page shows how a schedule is declared."""
    page = _text(client.get(URL))
    assert "No schedules are declared" in page
    assert 'geneva.schedule("weekly-digest"' in page


@pytest.mark.parametrize("action", ["pause", "run_now"])
def test_the_menu_links_the_page(app, client, declare, action):
    """R-SCHED-36: the navigation has "Schedules" next to Limits; the page
    answers after either kind of action with the row still there."""
    declare("hourly", Tick, cron="0 * * * *")
    overview = _text(client.get("/geneva/"))
    assert re.search(r'href="/geneva/schedules/">\s*Schedules</a>', overview)
    response = _post(client, action, "hourly")
    assert 'data-schedule="hourly"' in _text(response)
    assert (
        db.session.execute(sa.text(f"select count(*) from {SCHEDULES}")).scalar() == 1
    )
