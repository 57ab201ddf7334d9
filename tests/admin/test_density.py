"""What the dense admin pages say (issue 21; R-ADM-43..46), read as HTML."""

from __future__ import annotations

import re
from datetime import timedelta

from flask_geneva.core import clock
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow


def _row(text: str, workflow_id: object) -> str:
    return re.search(
        rf'<tr data-workflow-id="{workflow_id}">(.*?)</tr>', text, re.S
    ).group(1)


def test_workflows_list_shows_when_a_ready_workflow_runs_next(client):
    """The workflows list's Next run reads "in 45 min" for a ready workflow and is empty for a paused one (R-ADM-44)."""
    ready = ready_workflow()
    update_execution(
        execution_rows(ready.id)[0]["id"],
        scheduled_for=clock.now() + timedelta(minutes=45),
    )
    paused = paused_workflow()
    text = client.get("/geneva/workflows/").get_data(as_text=True)
    assert "<th>Next run</th>" in text
    cell = re.search(
        r'<td class="[^"]*geneva-next-run">(.*?)</td>', _row(text, ready.id)
    )
    assert re.search(r">in 45 min</time>$", cell.group(1))  # 45 min less a moment
    cell = re.search(
        r'<td class="[^"]*geneva-next-run">(.*?)</td>', _row(text, paused.id)
    )
    assert cell.group(1) == ""


def test_an_ended_workflow_has_no_next_step_nothing_upcoming_and_one_reason(client):
    """A canceled workflow shows no Next step or Next run, no "upcoming" step, and the reason its buttons are disabled once (R-ADM-45, R-ADM-46)."""
    workflow = ready_workflow()
    update_workflow(workflow.id, state="canceled")
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert "Next step" not in text
    assert "Next run" not in text
    assert "upcoming" not in text
    assert 'class="geneva-plan--not-run"' in text
    assert text.count("not possible: workflow is canceled</li>") == 1
    assert re.findall(r'<li class="geneva-reason">([^<]*)</li>', text) == [
        "Pause, Resume, Resume from the beginning, Cancel, Skip current step, Run now: "
        "not possible: workflow is canceled",
        "Recover running step: no step execution is in progress",
    ]


def test_deferred_job_and_doubled_badges_read_plainly(client):
    """The job id geneva:deferred reads "waiting for the dispatcher"; a failed execution shows one "failed" badge (R-ADM-46)."""
    workflow = failed_workflow()
    ready = ready_workflow()
    update_execution(execution_rows(ready.id)[0]["id"], job_id="geneva:deferred")
    text = client.get(detail_url(ready.id)).get_data(as_text=True)
    assert ">waiting for the dispatcher</span>" in text
    assert ">geneva:deferred<" not in text
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    timeline = re.search(r'geneva-timeline">(.*?)</table>', text, re.S).group(1)
    assert timeline.count("geneva-badge--failed") == 1


def test_step_plan_policy_and_wait_are_in_words(client):
    """The step plan shows the default policy in words and a wait of "1 h", not
    reprs (R-ADM-43, R-ADM-123)."""
    workflow = ready_workflow()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    plan = re.search(r'geneva-plan">(.*?)</table>', text, re.S).group(1)
    assert "<td>1 h</td>" in plan
    assert "0:" not in plan
    default = (
        "<div>default: pause — for any error — not reported: no error reporter "
        "is configured (report: always)</div>"
    )
    assert plan.count(default) == 2
    assert "ExceptionPolicy" not in plan


def test_deferred_job_reads_plainly_on_the_execution_page_and_the_overview(client):
    """The execution page's Job and the overview's oldest overdue execution say
    "waiting for the dispatcher" for the job id geneva:deferred (R-ADM-46, R-ADM-56)."""
    ready = ready_workflow()
    execution_id = execution_rows(ready.id)[0]["id"]
    update_execution(
        execution_id,
        job_id="geneva:deferred",
        scheduled_for=clock.now() - timedelta(minutes=5),
    )
    text = client.get(f"/geneva/step-executions/{execution_id}").get_data(as_text=True)
    job = re.search(r'<dd class="col-sm-10 geneva-job">(.*?)</dd>', text, re.S)
    assert ">waiting for the dispatcher</span>" in job.group(1)
    assert ">geneva:deferred<" not in job.group(1)
    text = client.get("/geneva/").get_data(as_text=True)
    oldest = re.search(r'<p class="geneva-oldest-overdue">(.*?)</p>', text, re.S)
    assert f">{execution_id}</a>" in oldest.group(1)
    assert ", waiting for the dispatcher." in oldest.group(1)
