"""Overview, workflows list and detail page contents (R-ADM-10..12, R-PDR-01, R-PDR-05)."""

from __future__ import annotations

import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta

from flask_geneva.admin.presenters import describe_policy_decision
from tests.admin.conftest import post_action
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import paused_resumable_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


def test_overview_counts_workflows_by_class_and_state_and_warns_on_paused_ratio(client):
    """The overview counts class x state, links each number and colours a high paused ratio (R-ADM-10)."""
    ready_workflow()
    paused_workflow()
    text = client.get("/geneva/").get_data(as_text=True)
    row = re.search(
        r'<tr>\s*<td><a href="/geneva/class/AdminTwoStep">AdminTwoStep</a></td>(.*?)</tr>',
        text,
        re.S,
    ).group(1)
    assert 'href="/geneva/workflows/?type=AdminTwoStep&amp;state=ready">1</a>' in row
    assert 'href="/geneva/workflows/?type=AdminTwoStep&amp;state=paused">1</a>' in row
    assert '<td class="geneva-warn">50.0 %</td>' in row


def test_overview_lists_the_latest_failures(client):
    """The overview lists failed executions with class, step, error class and message (R-ADM-10)."""
    failed_workflow()
    text = client.get("/geneva/").get_data(as_text=True)
    assert '<td class="geneva-wide">AdminFailing</td>' in text
    assert "<td>explode</td>" in text
    assert "<td>RuntimeError</td>" in text


def test_list_filters_by_state_and_searches_by_id(client):
    """The list filters by state and searches by workflow id (R-ADM-11)."""
    ready = ready_workflow()
    paused = paused_workflow()
    text = client.get("/geneva/workflows/?state=paused").get_data(as_text=True)
    ids = re.findall(r'data-workflow-id="([^"]+)"', text)
    assert ids == [str(paused.id)]
    # A hero id no workflow id can equal: the search matches hero ids too.
    update_workflow(paused.id, hero_id=987655)
    text = client.get(f"/geneva/workflows/?q={ready.id}").get_data(as_text=True)
    assert str(ready.id) in re.findall(r'data-workflow-id="([^"]+)"', text)
    assert str(paused.id) not in re.findall(r'data-workflow-id="([^"]+)"', text)


def test_list_is_newest_first_with_badges(client):
    """The default order is newest first and states render as badges (R-ADM-11)."""
    first = ready_workflow()
    second = paused_workflow()
    text = client.get("/geneva/workflows/").get_data(as_text=True)
    assert re.findall(r'data-workflow-id="([^"]+)"', text) == [
        str(second.id),
        str(first.id),
    ]
    assert '<span class="geneva-badge geneva-badge--paused">paused</span>' in text


def test_detail_shows_plan_timeline_and_policy_sentence(client):
    """The detail page shows the step plan, the failed execution and its policy decision sentence (R-ADM-12, R-PDR-01)."""
    workflow = failed_workflow()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert '<tr class="geneva-plan--current">' in text
    assert (
        "Policy: pause — default policy — not reported: no error reporter is "
        "configured (report: always)" in text
    )
    assert '<details class="geneva-backtrace">' in text


def test_detail_shows_the_operator_actions_log(client):
    """Operator actions appear newest first with actor and via; a null actor shows a dash (R-ADM-12, R-PDR-05)."""
    workflow = paused_workflow()
    workflow.resume(actor="bob", via="cli")
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    rows = re.findall(r"<td>(pause|resume)</td><td>([^<]+)</td><td>(\w+)</td>", text)
    assert rows == [("resume", "bob", "cli"), ("pause", "—", "api")]


def test_operator_action_without_an_execution_shows_a_dash_not_none(client):
    """An operator action whose execution_id is null shows "—" in the Execution column, never "None" (R-ADM-12, R-PDR-05)."""
    workflow = paused_workflow()
    entries = workflow_row(workflow.id)["metadata"]["operator_actions"]
    assert entries[-1]["execution_id"] is None
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    table = re.search(
        r'<table class="table table-sm geneva-operator-actions">(.*?)</table>',
        text,
        re.S,
    ).group(1)
    cells = re.findall(
        r"<td>([^<]*)</td>", re.search(r"<tbody>(.*?)</tbody>", table, re.S).group(1)
    )
    # The time is a <time> element like every other time (R-ADM-40), not raw ISO.
    assert cells == ["pause", "—", "api", "ready", "paused", "—"]
    assert "None" not in table
    at = re.search(r'<td class="[^"]*geneva-action-at">(.*?)</td>', table).group(1)
    assert re.match(r'<time class="geneva-time geneva-time--exact" datetime="', at)
    assert re.search(r">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>", at)


def test_resumable_chain_shows_each_cursor(client):
    """A resumable step's chain lists each execution with its outcome, its
    labelled cursor and interrupt reason (R-ADM-12, R-ADM-126)."""
    workflow = paused_resumable_workflow()
    rows = execution_rows(workflow.id)
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    chain = re.search(r'<ol class="geneva-chain">(.*?)</ol>', text, re.S).group(1)
    assert f'data-execution-id="{rows[0]["id"]}"' in chain
    assert (
        f'continues <a href="/geneva/step-executions/{rows[0]["id"]}">'
        f"{rows[0]['id']}</a>" in chain
    )
    assert "interrupted: max_iterations after 2 iterations" in chain
    assert "geneva-badge--continued" in chain
    assert re.search(
        r'<span class="geneva-chain-label">cursor:</span>\s*<pre class="geneva-cursor">',
        chain,
    )


def test_resume_from_the_beginning_creates_a_successor_with_an_empty_cursor(client):
    """The confirmed rewind resumes with the cursor cleared (R-ADM-20, R-ADM-22, R-EXT-26)."""
    workflow = paused_resumable_workflow()
    page = post_action(
        client, workflow.id, "resume_rewind", confirm="yes", follow_redirects=True
    )
    assert "Resume from the beginning done; state is now ready" in page.get_data(
        as_text=True
    )
    assert workflow_row(workflow.id)["state"] == "ready"
    latest = execution_rows(workflow.id)[-1]
    assert latest["state"] == "scheduled"
    assert latest["cursor"] in (None, "", [], {})
    assert (
        workflow_row(workflow.id)["metadata"]["operator_actions"][-1]["action"]
        == "resume_rewind"
    )


def test_policy_sentence_for_a_reattempt_decision():
    """A reattempt decision reads 'reattempt N of M in W s — source for matcher — report' (R-PDR-01)."""
    sentence = describe_policy_decision(
        {
            "source": "class_specific",
            "index": None,
            "matched_by": "TimeoutError",
            "action": "reattempt",
            "wait_seconds": 30.0,
            "terminal": False,
            "consecutive_reattempts": 2,  # two before: this is the third
            "max_reattempts": 5,
            "report": "terminal_only",
            "reported": False,
            "handler": None,
        }
    )
    assert sentence == (
        "reattempt 3 of 5 in 30 s — class-level policy for TimeoutError — "
        "not reported (terminal_only)"
    )


def test_policy_sentence_for_garbage_says_so():
    """Malformed decision records give an 'unreadable' sentence instead of raising (R-ADM-31)."""
    assert describe_policy_decision("nope").startswith("unreadable policy decision")
    assert describe_policy_decision(
        {"action": "reattempt", "consecutive_reattempts": "x"}
    ).startswith("unreadable policy decision")


def test_step_executions_list_filters_by_state_and_error_class(client):
    """The executions list filters by state and error class and links the workflow (R-ADM-13)."""
    failing = failed_workflow()
    ready = ready_workflow()
    text = client.get("/geneva/step-executions/?state=failed").get_data(as_text=True)
    ids = re.findall(r'data-execution-id="([^"]+)"', text)
    assert ids == [str(execution_rows(failing.id)[0]["id"])]
    assert f'href="/geneva/workflows/{failing.id}"' in text
    text = client.get("/geneva/step-executions/?error_class=RuntimeError").get_data(
        as_text=True
    )
    assert re.findall(r'data-execution-id="([^"]+)"', text) == ids
    text = client.get("/geneva/step-executions/?state=scheduled").get_data(as_text=True)
    assert re.findall(r'data-execution-id="([^"]+)"', text) == [
        str(execution_rows(ready.id)[0]["id"])
    ]


def test_step_executions_list_overdue_filter(client):
    """'overdue' keeps scheduled executions whose time has passed, not future ones (R-ADM-13)."""
    due = ready_workflow()
    later = paused_workflow()  # its scheduled execution stays scheduled
    later_row = execution_rows(later.id)[0]
    update_execution(
        later_row["id"], scheduled_for=datetime.now(UTC) + timedelta(days=1)
    )
    text = client.get("/geneva/step-executions/?only=overdue").get_data(as_text=True)
    assert re.findall(r'data-execution-id="([^"]+)"', text) == [
        str(execution_rows(due.id)[0]["id"])
    ]


def test_reattempted_execution_shows_its_error_message_from_metadata(client):
    """A reattempted row keeps its error in metadata only; the timeline still shows the message (R-SE-21, R-ADM-12)."""
    from tests.admin.execution_support import flaky_workflow

    workflow = flaky_workflow()
    [first, _second] = execution_rows(workflow.id)
    assert first["error_message"] is None  # only the metadata has it
    page = client.get(f"/geneva/workflows/{workflow.id}").get_data(as_text=True)
    row = page.split(f'data-execution-id="{first["id"]}"', 1)[1].split("</tr>", 1)[0]
    error = row.split('<div class="geneva-error">', 1)[1].split("</div>", 1)[0]
    assert "</strong> the API timed out &lt;script&gt;" in error


def test_step_plan_names_the_policy_that_applies_to_each_step(client):
    """Without a step-level policy the plan shows the class-level ones, else the default (R-ADM-12, R-POL-40)."""
    from tests.admin.execution_support import flaky_workflow
    from tests.admin.support import failed_workflow

    flaky = client.get(f"/geneva/workflows/{flaky_workflow().id}")
    plan = flaky.get_data(as_text=True).split("geneva-plan", 1)[1].split("</table>")[0]
    assert "class-level: " in plan
    assert "ExecDetailTimeout" in plan
    failed = client.get(f"/geneva/workflows/{failed_workflow().id}")
    plan = failed.get_data(as_text=True).split("geneva-plan", 1)[1].split("</table>")[0]
    assert "default: pause" in plan
