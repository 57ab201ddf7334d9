"""Pages that tell the truth (issue 39): what an operator reads matches what
happened (R-ADM-120..127).

Each test makes the situation through the engine, as an operator meets it, and
reads the pages it shows on.
"""

from __future__ import annotations

import contextlib
import re
from datetime import timedelta

from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.execution_support import ExecDetailTimeout
from tests.admin.execution_support import finished_resumable_chain
from tests.admin.execution_support import flaky_workflow
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

EXECUTIONS = "/geneva/step-executions/"


def page(client, url, **params) -> str:
    response = client.get(url, query_string=params)
    assert response.status_code == 200, url
    return response.get_data(as_text=True)


def row_of(html: str, execution_id) -> str:
    """The ``<tr>`` of an execution on a timeline or list page."""
    return re.search(
        rf'<tr data-execution-id="{execution_id}">(.*?)</tr>', html, re.S
    ).group(1)


class TruthFlakyOnce(geneva.Workflow):
    """Its first step raises once (the default policy pauses), then works."""

    raised = False

    @step
    def load(self):
        if not TruthFlakyOnce.raised:
            TruthFlakyOnce.raised = True
            raise ValueError("upstream returned 503")

    @step(wait=timedelta(hours=1))
    def report(self):
        pass


def test_a_paused_workflows_step_waits_for_resume_not_the_dispatcher(client):
    """A paused workflow's preserved execution, past its time and deferred to
    the dispatcher, reads "waits for Resume" on the workflow page (next step,
    timeline, job), in the executions list and on its own page; never
    "overdue" or "waiting for the dispatcher" (R-ADM-120)."""
    workflow = AdminTwoStep.create(hero=new_user())
    perform_next_step(workflow)
    workflow.pause()
    execution_id = execution_rows(workflow.id)[-1]["id"]
    update_execution(
        execution_id,
        scheduled_for=clock.now() - timedelta(minutes=10),
        job_id="geneva:deferred",
    )
    html = page(client, detail_url(workflow.id))
    next_step = re.search(r'geneva-next-step">(.*?)</dd>', html, re.S).group(1)
    assert "second" in next_step
    assert "waits for Resume" in next_step
    row = row_of(html, execution_id)
    assert row.count("waits for Resume") == 2  # scheduled for, job
    assert "overdue" not in row
    assert "waiting for the dispatcher" not in row
    listed = row_of(page(client, EXECUTIONS), execution_id)
    assert "waits for Resume" in listed
    assert "overdue" not in listed
    own = page(client, f"{EXECUTIONS}{execution_id}")
    header = own.split("</section>", 1)[0]
    assert "waits for Resume" in header
    assert 'class="geneva-overdue"' not in header
    assert "waiting for the dispatcher" not in header
    # Resumed, the same execution is overdue again, as it is.
    workflow.resume()
    update_execution(execution_id, scheduled_for=clock.now() - timedelta(minutes=10))
    row = row_of(page(client, detail_url(workflow.id)), execution_id)
    assert "overdue" in row
    assert "waits for Resume" not in row


def test_an_execution_that_raised_and_was_reattempted_is_not_a_green_badge(client):
    """An execution that raised and was reattempted reads "raised reattempted" in
    the timeline, the executions list and its page, and its chart bar is not the
    completed colour (R-ADM-121)."""
    workflow = flaky_workflow()
    reattempted = execution_rows(workflow.id)[0]
    assert (reattempted["state"], reattempted["outcome"]) == (
        "completed",
        "reattempted",
    )
    execution_id = reattempted["id"]
    html = page(client, detail_url(workflow.id))
    for row in (
        row_of(html, execution_id),
        row_of(page(client, EXECUTIONS), execution_id),
    ):
        assert "geneva-badge--raised" in row
        assert "geneva-badge--reattempted" in row
        assert "geneva-badge--completed" not in row
    assert re.search(
        rf'<g class="bar st-reattempted" data-execution-id="{execution_id}">', html
    )
    own = page(client, f"{EXECUTIONS}{execution_id}").split("</h2>", 1)[0]
    assert "geneva-badge--raised" in own
    assert "geneva-badge--completed" not in own


def test_the_plan_shows_each_steps_waits_limits_and_timeouts(client):
    """The workflow page's step plan has a column of each step's wait_for, its
    timeout, children, limits and timeouts in words (R-ADM-122)."""
    from tests.admin.test_step_plan import PlanSettings

    workflow = PlanSettings.create(hero=new_user())
    html = page(client, detail_url(workflow.id))
    cell = re.search(
        r'<td class="geneva-plan-settings" data-step="confirm">(.*?)</td>', html
    ).group(1)
    assert cell == (
        "<div>waits for signal payment_confirmed; times out after 2 d, then pause</div>"
    )
    push = re.search(
        r'<td class="geneva-plan-settings" data-step="push">(.*?)</td>', html
    ).group(1)
    assert "limit plan-partner-api: 2 at once, per key tenant_of" in push
    assert "timeout 30 s a run (then StepTimeout)" in push


def test_with_a_reporter_the_plan_and_the_decisions_say_reported(app, client):
    """With a GENEVA_ERROR_REPORTER configured, the plan says "reported" and the
    recorded decision "reported (always)"; without one both say no error
    reporter is configured (R-ADM-123)."""
    reports = []
    app.config["GENEVA_ERROR_REPORTER"] = lambda error, **context: reports.append(error)
    geneva.reload_settings(app)
    workflow = flaky_workflow()
    assert len(reports) == 1
    html = page(client, detail_url(workflow.id))
    plan = html.split('class="table table-sm geneva-plan"', 1)[1].split("</table>")[0]
    assert "30 s apart, then pause — for " in plan
    assert f"{ExecDetailTimeout.__module__}.ExecDetailTimeout — reported" in plan
    assert "reattempt 1 of 2 in 30 s — class-level policy #1 for" in html
    assert "— reported (always)" in html
    assert "no error reporter" not in html
    app.config["GENEVA_ERROR_REPORTER"] = None
    geneva.reload_settings(app)
    html = page(client, detail_url(workflow.id))
    plan = html.split('class="table table-sm geneva-plan"', 1)[1].split("</table>")[0]
    assert "not reported: no error reporter is configured (report: always)" in plan
    assert "— reported" not in plan


def test_the_latest_error_clears_when_the_workflow_recovers(client):
    """A workflow whose failed step later completed (resumed and run again) has
    no latest error in the list, nor does the error class filter find it; one
    that did not recover keeps it (R-ADM-124)."""
    TruthFlakyOnce.raised = False
    workflow = TruthFlakyOnce.create(hero=new_user())
    with contextlib.suppress(ValueError):
        perform_next_step(workflow)

    def error_cell():
        html = page(client, "/geneva/workflows/", type="TruthFlakyOnce")
        row = re.search(
            rf'<tr data-workflow-id="{workflow.id}">(.*?)</tr>', html, re.S
        ).group(1)
        return re.search(r'geneva-error-class">([^<]*)<', row).group(1)

    def filtered():
        html = page(client, "/geneva/workflows/", error_class="ValueError")
        return re.findall(r'<tr data-workflow-id="([^"]+)"', html)

    assert error_cell() == "ValueError"
    assert filtered() == [str(workflow.id)]
    workflow.resume()
    perform_next_step(workflow)
    assert [row["outcome"] for row in execution_rows(workflow.id)][:2] == [
        "failed",
        "success",
    ]
    assert error_cell() == ""
    assert filtered() == []


def test_an_execution_recovered_after_its_worker_died_says_so_and_why(client):
    """An execution recovered from a lost worker reads "recovered", not
    "completed", and says who recovered it and why, in the timeline and on its
    page; one recovered without a record says what its columns tell
    (R-ADM-125)."""
    from flask_geneva import run_housekeeping
    from tests.support.common_workflows import CountingOneStep
    from tests.support.workers import insert_worker
    from tests.support.workers import running_on

    db.session.remove()
    insert_worker(timedelta(0))
    dead = insert_worker(timedelta(hours=1))
    workflow = running_on(CountingOneStep, dead)
    execution_id = execution_rows(workflow.id)[0]["id"]
    db.session.rollback()  # on SQLite a read holds the write lock
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    why = (
        "Recovered by housekeeping: its worker was lost; the step&#39;s outcome "
        "was never recorded (it may have run in part or in full)."
    )
    row = row_of(page(client, detail_url(workflow.id)), execution_id)
    assert "geneva-badge--recovered" in row
    assert "geneva-badge--completed" not in row
    assert why in row
    own = page(client, f"{EXECUTIONS}{execution_id}")
    assert "geneva-badge--completed" not in own.split("</h2>", 1)[0]
    assert f'<li class="geneva-recovery">{why}</li>' in own
    # A row recovered before the record existed (or a scheduled one).
    update_execution(execution_id, metadata=None, started_at=None)
    row = row_of(page(client, detail_url(workflow.id)), execution_id)
    assert "Recovered: it was scheduled and never started" in row


def test_lists_count_their_matches_and_show_cursors(client, monkeypatch):
    """The executions list shows each execution's cursor in a column of its own
    and, like the signals list, how many rows match, capped (R-ADM-126,
    R-ADM-127)."""
    from flask_geneva.admin import filters

    finished_resumable_chain()
    html = page(client, EXECUTIONS, step_name="walk")
    assert '<p class="geneva-match-count">3 step executions match.</p>' in html
    cells = re.findall(r'<td class="geneva-wide geneva-cursor-cell">(.*?)</td>', html)
    assert [re.sub(r"<[^>]+>", "", cell) for cell in cells] == ["5", "4", "2"]
    assert "(no filter: all step executions)" in page(client, EXECUTIONS)
    monkeypatch.setattr(filters, "COUNT_CAP", 2)
    html = page(client, EXECUTIONS, step_name="walk")
    assert '<p class="geneva-match-count">2+ step executions match.</p>' in html
    signals = page(client, "/geneva/signals/", state="pending")
    assert '<p class="geneva-match-count">0 signals match.</p>' in signals
