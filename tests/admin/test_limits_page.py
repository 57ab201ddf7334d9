"""Limits in the admin (issue 35, operators' part).

R-LIM-45: the Limits page (keys most waiting first, filters limit / key prefix /
busy only, "… N more keys", idle declared limits, a key's waiters) and its page
without the add_flow_limits unit. R-LIM-42: the workflow and execution pages'
sentence, the executions list's and the workflows list's "waiting for <limit>"
(a waiter resume() published again included). R-LIM-43: the overview's limits
line. R-ADM-06: stored keys are escaped. R-LIM-23: a rate key's starts in its
window and the next start when it is full.
"""

from __future__ import annotations

import html
import re
from datetime import timedelta

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.db.queries import limits as limit_reads
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.limit_rows import park
from tests.support.limit_rows import record_starts
from tests.support.limit_rows import set_key
from tests.support.workflow import externally

LIMITS_URL = "/geneva/limits/"

admin_partner = Limit("admin-partner-api", concurrency=2, key=lambda wf: "acme")
admin_exports = Limit("admin-exports", concurrency=5)
admin_rate = Limit("admin-rate", rate=10, per=timedelta(minutes=1))


class AdminPartnerSync(geneva.Workflow):
    @step(limit=admin_partner)
    def push(self):
        pass


class AdminExport(geneva.Workflow):
    @step(limit=admin_exports)
    def export(self):
        pass

    @step(limit=admin_rate)
    def notify(self):
        pass


def _page(client, url):
    response = client.get(url)
    assert response.status_code == 200, response.data[:500]
    return html.unescape(response.get_data(as_text=True))


def _waiter(email, key="acme", *, since, priority=0, granted_at=None):
    workflow = AdminPartnerSync.create(hero=new_user(email))
    ids = workflow.id, workflow.current_execution.id
    db.session.commit()
    park(
        *ids,
        "admin-partner-api",
        key,
        since=since,
        priority=priority,
        granted_at=granted_at,
    )
    return ids


def _picture():
    """acme: 2/2 running, 2 waiting (the oldest 4 min); globex: 1 running;
    initech: idle. Returns the oldest waiter's (workflow id, execution id)."""
    now = clock.now()
    set_key("admin-partner-api", "acme", running=2, waiting=2)
    set_key("admin-partner-api", "globex", running=1)
    set_key("admin-partner-api", "initech")
    first = _waiter("a@example.com", since=now - timedelta(minutes=4))
    _waiter("b@example.com", since=now - timedelta(seconds=20), priority=3)
    return first


def _keys_in_order(page):
    return re.findall(r'data-limit="([^"]*)" data-key="([^"]*)"', page)


def test_the_limits_page_lists_keys_most_waiting_first(client, geneva_jobs):
    """R-LIM-45: running of the cap, granted, waiting; idle declared limits."""
    _picture()
    page = _page(client, LIMITS_URL)
    keys = [k for n, k in _keys_in_order(page) if n == "admin-partner-api"]
    assert keys == ["acme", "globex", "initech"]
    row = page.split('data-key="acme"', 1)[1].split("</tr>", 1)[0]
    assert "2 of 2" in row
    assert '<td class="geneva-limit-waiting">2</td>' in row
    assert "4 min ago" in row
    assert "Idle (no key used yet):" in page
    assert "admin-exports (concurrency 5)" in page
    assert "admin-rate (rate 10 per 1 min)" in page
    key_link = "/geneva/limits/key?limit=admin-partner-api&key=acme"
    assert key_link in page


def test_filters_by_limit_key_prefix_and_busy_only(client, geneva_jobs):
    """R-LIM-45: limit, key prefix (LIKE characters match themselves), busy only."""
    _picture()
    set_key("admin-partner-api", "glo%x", running=1)
    busy = _page(client, LIMITS_URL + "?busy=1&limit=admin-partner-api")
    assert [k for _, k in _keys_in_order(busy)] == ["acme", "glo%x", "globex"]
    prefixed = _page(client, LIMITS_URL + "?key=glo%25")
    assert [k for _, k in _keys_in_order(prefixed)] == ["glo%x"]
    assert 'value="glo%"' in prefixed
    other = _page(client, LIMITS_URL + "?limit=admin-exports")
    assert _keys_in_order(other) == []
    assert "admin-exports (concurrency 5)" in other


def test_an_unusable_filter_is_ignored_with_a_note(client, geneva_jobs):
    """R-LIM-45, R-ADM-31: a NUL byte or an overlong key is a note, not an error."""
    _picture()
    page = _page(client, LIMITS_URL + "?key=" + "k" * 300)
    assert "ignored key" in page
    assert "longer than 255 characters" in page
    assert len(_keys_in_order(page)) >= 3
    assert "contains a NUL byte" in _page(client, LIMITS_URL + "?limit=a%00b")


def test_more_keys_than_shown_says_how_many_more(client, monkeypatch, geneva_jobs):
    """R-LIM-45: past the cap (lowered to 2 here), "… N more keys"; the page
    says how many keys match in all, as every list does (R-ADM-127)."""
    monkeypatch.setattr(limit_reads, "MAX_OVERVIEW_KEYS", 2)
    for number in range(5):
        set_key("admin-partner-api", f"tenant-{number}", running=1)
    page = _page(client, LIMITS_URL + "?limit=admin-partner-api")
    assert len(_keys_in_order(page)) == 2
    assert "… 3 more keys" in page
    assert '<p class="geneva-match-count">5 limit keys match.</p>' in page


def test_a_keys_page_lists_its_waiters_granted_first_then_in_grant_order(
    client, geneva_jobs
):
    """R-LIM-45: execution and workflow links, priority, waiting since, granted."""
    now = clock.now()
    set_key("admin-partner-api", "acme", running=1, granted=1, waiting=2)
    _, late = _waiter("late@example.com", since=now - timedelta(minutes=1))
    _, early = _waiter("early@example.com", since=now - timedelta(minutes=9))
    _, vip = _waiter("vip@example.com", since=now, priority=9)
    _, granted = _waiter(
        "granted@example.com",
        since=now - timedelta(minutes=2),
        granted_at=now - timedelta(seconds=3),
    )
    page = _page(client, "/geneva/limits/key?limit=admin-partner-api&key=acme")
    order = [int(i) for i in re.findall(r'<tr data-execution-id="(\d+)"', page)]
    assert order == [granted, vip, early, late]
    assert f'href="/geneva/step-executions/{vip}"' in page
    assert "1 of 2 running, 1 granted (task on its way), 2 waiting" in page
    assert page.count("granted <time") == 1
    missing = _page(client, "/geneva/limits/key?limit=admin-partner-api&key=nope")
    assert "This limit has no such key" in missing


def test_the_workflow_and_execution_pages_say_what_the_step_waits_for(
    client, geneva_jobs
):
    """R-LIM-42: the sentence, and a link to the key's queue."""
    workflow_id, execution_id = _picture()
    page = " ".join(_page(client, detail_url(workflow_id)).split())
    assert (
        "Step <strong>push</strong>: waiting for an admin-partner-api slot "
        "(key acme, 2 of 2 "
        "running, 2 waiting, position 2) since 4 min."
    ) in page
    assert "/geneva/limits/key?limit=admin-partner-api&key=acme" in page
    detail = " ".join(_page(client, f"/geneva/step-executions/{execution_id}").split())
    assert "Waiting for an admin-partner-api slot (key acme" in detail


def test_the_executions_list_says_waiting_for_the_limit(client, geneva_jobs):
    """R-LIM-42: the Next run column of a waiter names its limit, not a time."""
    _, execution_id = _picture()
    page = _page(client, "/geneva/step-executions/")
    row = page.split(f'<tr data-execution-id="{execution_id}">', 1)[1]
    row = row.split("</tr>", 1)[0]
    assert "waiting for admin-partner-api" in row
    assert "overdue" not in row


def _row_of(page, marker):
    return page.split(marker, 1)[1].split("</tr>", 1)[0]


def test_a_resumed_waiter_still_reads_waiting_in_both_lists(client, geneva_jobs):
    """R-LIM-42 (R-EXT-21): resume() publishes the waiter again under a task id;
    the executions list and the workflows list still say what it waits for,
    not a due time."""
    workflow_id, execution_id = _picture()
    externally(workflow_id, "pause")
    externally(workflow_id, "resume")
    executions = _page(client, "/geneva/step-executions/")
    row = _row_of(executions, f'<tr data-execution-id="{execution_id}">')
    assert "waiting for admin-partner-api" in row
    assert "overdue" not in row
    workflows = _page(client, "/geneva/workflows/")
    row = _row_of(workflows, f'<tr data-workflow-id="{workflow_id}">')
    cell = row.split('geneva-next-run">', 1)[1].split("</td>", 1)[0]
    assert "waiting for admin-partner-api" in cell
    assert "<time" not in cell


def test_the_workflows_list_says_waiting_for_the_limit_only_for_waiters(
    client, geneva_jobs
):
    """R-LIM-42: a waiter's workflow reads "waiting for <limit>" in Next run; a
    paused one and a workflow that does not wait have none."""
    workflow_id, _ = _picture()
    paused_id, _ = _waiter("c@example.com", since=clock.now())
    externally(paused_id, "pause")
    other = AdminExport.create(hero=new_user("other@example.com")).id
    db.session.commit()
    page = _page(client, "/geneva/workflows/")
    waiting = _row_of(page, f'<tr data-workflow-id="{workflow_id}">')
    assert "waiting for admin-partner-api" in waiting
    plain = _row_of(page, f'<tr data-workflow-id="{other}">')
    assert "waiting for" not in plain
    assert "<time" in plain.split('geneva-next-run">', 1)[1].split("</td>", 1)[0]
    paused = _row_of(page, f'<tr data-workflow-id="{paused_id}">')
    assert "waiting for" not in paused


def _rated_key(ages):
    set_key(
        "admin-rate",
        "",
        running=1,
        concurrency=None,
        rate=10,
        per=timedelta(minutes=1),
    )
    return record_starts("admin-rate", "", ages)


def test_the_limits_page_shows_a_rate_keys_starts_in_its_window(client, geneva_jobs):
    """R-LIM-45, R-LIM-23: the Rate used column: 7 of 10 per 1 min (a start
    older than the window left out), nothing for a key without a rate."""
    _picture()
    _rated_key([timedelta(minutes=2)] + [timedelta(seconds=5 * i) for i in range(7)])
    page = _page(client, LIMITS_URL)
    assert "<th>Rate used</th>" in page
    row = _row_of(page, 'data-limit="admin-rate" data-key=""')
    rate = row.split('geneva-limit-rate">', 1)[1].split("</td>", 1)[0]
    assert rate == "7 of 10 per 1 min"
    acme = _row_of(page, 'data-key="acme"')
    assert '<td class="geneva-nowrap geneva-limit-rate"></td>' in acme
    key_page = " ".join(
        _page(client, "/geneva/limits/key?limit=admin-rate&key=").split()
    )
    assert "Rate: 7 of 10 starts in the last 1 min." in key_page


def test_a_full_rate_window_shows_when_the_next_start_is_allowed(client, geneva_jobs):
    """R-LIM-45, R-LIM-23: 10 of 10: the next start, the oldest start in the
    window plus per (50 s old: in about 10 s)."""
    starts = _rated_key([timedelta(seconds=5 * i) for i in range(1, 11)])
    next_at = (min(starts) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    page = _page(client, LIMITS_URL)
    row = _row_of(page, 'data-limit="admin-rate" data-key=""')
    assert "10 of 10 per 1 min, next start" in row
    assert f'datetime="{next_at}"' in row
    assert re.search(r">in (9|10) s</time>", row), row
    key_page = " ".join(
        _page(client, "/geneva/limits/key?limit=admin-rate&key=").split()
    )
    assert (
        "Rate: 10 of 10 starts in the last 1 min: the window is full, the next "
        "start is allowed <time"
    ) in key_page
    assert f'datetime="{next_at}"' in key_page


def test_the_overview_has_the_limits_line_only_when_a_key_is_busy(client, geneva_jobs):
    """R-LIM-43: "limits: N keys busy, M waiting, oldest D" linking to busy keys."""
    set_key("admin-partner-api", "initech")
    assert "geneva-limits-line" not in _page(client, "/geneva/")
    _picture()
    page = _page(client, "/geneva/")
    assert "limits: 2 keys busy, 2 waiting, oldest 4 min" in page
    assert '<a href="/geneva/limits/?busy=1">limits:' in page


def test_stored_keys_are_escaped(client, geneva_jobs):
    """R-ADM-06: a key is stored text; the page escapes it."""
    set_key("admin-partner-api", "<script>alert(1)</script>", running=1)
    raw = client.get(LIMITS_URL).get_data(as_text=True)
    assert "<script>alert(1)</script>" not in raw
    assert "&lt;script&gt;" in raw


def test_without_the_unit_the_pages_say_how_to_install_it(
    client, without_unit, geneva_jobs
):
    """R-LIM-45, R-LIM-50: the Limits page names the unit; the other pages work."""
    workflow = AdminPartnerSync.create(hero=new_user("old@example.com"))
    ids = workflow.id, workflow.current_execution.id
    db.session.commit()
    without_unit("add_flow_limits")
    page = _page(client, LIMITS_URL)
    assert "Limits are not installed in this database" in page
    assert "flask geneva install" in page
    assert "add_flow_limits" in page
    assert "not installed" in _page(client, "/geneva/limits/key?limit=x&key=y")
    assert "geneva-limit-wait" not in _page(client, detail_url(ids[0]))
    detail = _page(client, f"/geneva/step-executions/{ids[1]}")
    assert "limit_holds" in detail  # listed as "not in this database"
    _page(client, "/geneva/step-executions/")
    assert "geneva-limits-line" not in _page(client, "/geneva/")


def test_the_menu_has_limits_next_to_signals(client, geneva_jobs):
    """R-LIM-45: the menu entry follows Signals."""
    page = _page(client, "/geneva/")
    assert page.index("Signals</a>") < page.index("Limits</a>")
