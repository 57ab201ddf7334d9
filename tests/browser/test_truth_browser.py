"""Pages that tell the truth and the overview at a glance, in Chromium (issue 39;
R-ADM-120..127, R-ADM-130..132).

Two tests, each one seeded database and several page loads: what an operator
reads of a paused, a reattempted, a recovered and a resumable workflow; the
overview's charts at a desktop's and a phone's width.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest

from flask_geneva import Limit
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.execution_support import finished_resumable_chain
from tests.admin.support import new_user
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.browser.admin_pages import seed_admin
from tests.browser.admin_pages import seed_throughput
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

pytestmark = pytest.mark.browser

#: The computed colour of an element (``rgb(…)``), for "not the completed green".
COLOUR = "(selector) => getComputedStyle(document.querySelector(selector)).{}"
GREEN = "rgb(25, 135, 84)"  # .geneva-badge--completed


class BrowserRecovers(geneva.Workflow):
    """Its first step raises once (paused by the default policy), then works."""

    raised = False

    @step
    def load(self):
        if not BrowserRecovers.raised:
            BrowserRecovers.raised = True
            raise ValueError("upstream returned 503")

    @step(wait=timedelta(hours=1))
    def report(self):
        pass


def tenant_of(workflow: Any) -> str:
    """The limit key of :data:`browser_partner`: one tenant."""
    return "acme"


browser_partner = Limit("browser-partner-api", concurrency=2, key=tenant_of)
browser_rate = Limit("browser-rate", rate=10, per=timedelta(minutes=1))


class BrowserPlanSettings(geneva.Workflow):
    """One step per setting the step plan writes in words (R-ADM-122)."""

    @step
    def start(self):
        pass

    @step(wait_for="approved", wait_timeout=timedelta(days=2), on_wait_timeout="pause")
    def approve(self):
        pass

    @step(wait_for_children=True)
    def gather(self):
        pass

    @step(limit=[browser_partner, browser_rate], timeout=timedelta(seconds=30))
    def push(self):
        pass

    @resumable_step(max_iterations=50, max_runtime=timedelta(minutes=5))
    def walk(self, it):
        pass


def _recovered_workflow() -> Any:
    """A workflow whose only execution was recovered from a dead worker."""
    from flask_geneva import run_housekeeping
    from tests.support.common_workflows import CountingOneStep
    from tests.support.workers import insert_worker
    from tests.support.workers import running_on

    db.session.remove()
    insert_worker(timedelta(0))
    workflow = running_on(CountingOneStep, insert_worker(timedelta(hours=1)))
    db.session.rollback()  # on SQLite a read holds the write lock
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    return workflow


def test_what_an_operator_reads_is_what_happened(live_url, page):
    """In Chromium: the charge workflow's reattempted executions are not green
    and say they raised, its paused step waits for Resume (not overdue, not the
    dispatcher), its plan and decisions agree that nothing is reported and the
    plan shows a wait_for's timeout; a recovered execution says why; the latest
    error clears once the workflow recovered; the executions list counts its
    matches and shows cursors; a chain's values are labelled (R-ADM-120..127)."""
    pages = seed_admin()
    charge = execution_rows(int(pages["workflow_reattempted"].rsplit("/", 1)[1]))
    preserved = charge[-1]["id"]
    update_execution(
        preserved,
        scheduled_for=clock.now() - timedelta(minutes=10),
        job_id="geneva:deferred",
    )
    recovered = _recovered_workflow().id
    BrowserRecovers.raised = False
    recovering = BrowserRecovers.create(hero=new_user("recovers@example.com"))
    with contextlib.suppress(ValueError):
        perform_next_step(recovering)
    recovering.resume()
    perform_next_step(recovering)
    recovering_id = recovering.id
    chain_id, _ = finished_resumable_chain()
    db.session.remove()

    page.goto(live_url + pages["workflow_reattempted"])
    reattempted = f'tr[data-execution-id="{charge[1]["id"]}"]'
    assert page.inner_text(f"{reattempted} td:nth-child(3)").split() == [
        "raised",
        "reattempted",
    ]
    for badge in (".geneva-badge--raised", ".geneva-badge--reattempted"):
        colour = page.evaluate(
            COLOUR.format("backgroundColor"), f"{reattempted} {badge}"
        )
        assert colour != GREEN, badge
    bar = f'g.bar[data-execution-id="{charge[1]["id"]}"] rect.run'
    assert page.evaluate(COLOUR.format("fill"), bar) != GREEN
    # The same two badges in the executions list and on its own page.
    page.goto(f"{live_url}/geneva/step-executions/?step_name=charge_card")
    listed = f'tr[data-execution-id="{charge[1]["id"]}"] .geneva-badge'
    assert page.locator(listed).all_inner_texts() == ["raised", "reattempted"]
    assert page.evaluate(COLOUR.format("backgroundColor"), listed) != GREEN
    page.goto(f"{live_url}/geneva/step-executions/{charge[1]['id']}")
    assert "completed" not in page.locator("h2 .geneva-badge").all_inner_texts()
    assert page.locator("h2 .geneva-badge").all_inner_texts() == [
        "raised",
        "reattempted",
    ]
    page.goto(live_url + pages["workflow_reattempted"])
    assert page.inner_text(".geneva-next-step") == "charge_card waits for Resume"
    row = page.inner_text(f'tr[data-execution-id="{preserved}"]')
    assert row.count("waits for Resume") == 2
    assert "overdue" not in row
    assert "dispatcher" not in row
    plan = page.inner_text("table.geneva-plan")
    decisions = page.inner_text("table.geneva-timeline")
    assert "— reported" not in plan
    assert "— reported" not in decisions
    said = "not reported: no error reporter is configured (report: always)"
    assert plan.count(said) == 3
    assert decisions.count(said) == 3

    page.goto(live_url + pages["workflow_waiting"])
    assert page.inner_text('td.geneva-plan-settings[data-step="ship"]') == (
        "waits for signal payment_confirmed; times out after 2 d, then "
        "SignalWaitTimeout goes to the exception policies"
    )

    page.goto(f"{live_url}/geneva/workflows/{recovered}")
    first = page.locator(".geneva-timeline tbody tr").first
    assert first.locator(".geneva-badge").all_inner_texts() == ["recovered"]
    assert (
        first.locator(".geneva-recovery")
        .inner_text()
        .startswith("Recovered by housekeeping: its worker was lost;")
    )
    first.locator("td a").first.click()
    assert page.locator("h2 .geneva-badge").all_inner_texts() == ["recovered"]
    assert "Recovered by housekeeping: its worker was lost;" in page.inner_text("body")

    page.goto(f"{live_url}/geneva/workflows/?type=BrowserRecovers")
    assert (
        page.inner_text(f'tr[data-workflow-id="{recovering_id}"] .geneva-error-class')
        == ""
    )
    page.goto(f"{live_url}/geneva/workflows/?type=AdminFailing")
    assert page.inner_text(".geneva-error-class") == "RuntimeError"  # not recovered

    page.goto(f"{live_url}/geneva/step-executions/?step_name=walk")
    assert page.inner_text(".geneva-match-count") == "3 step executions match."
    page.goto(live_url + pages["signals"])
    assert page.inner_text(".geneva-match-count") == (
        "2 signals match (no filter: all signals)."
    )
    page.goto(live_url + pages["signals_pending"])
    assert page.inner_text(".geneva-match-count") == "1 signal matches."
    page.goto(live_url + pages["workflows_paused"])
    paused = page.locator("tr[data-workflow-id]").count()
    assert page.inner_text(".geneva-match-count") == f"{paused} workflows match."
    page.goto(f"{live_url}/geneva/step-executions/?step_name=walk")
    assert page.locator(".geneva-cursor-cell").all_inner_texts() == ["5", "4", "2"]

    page.goto(f"{live_url}/geneva/workflows/{chain_id}")
    links = page.locator("ol.geneva-chain > li").all_inner_texts()
    assert [link.split("\n")[-1].strip() for link in links] == [
        "cursor: 2",
        "cursor: 4",
        "cursor: 5",
    ]
    assert "continued — interrupted: max_iterations after 2 iterations" in links[0]
    assert page.geneva_dialogs == []


def test_the_overview_charts_throughput_and_work_in_flight(live_url, page):
    """In Chromium the overview draws the last hour's and the last day's
    throughput by outcome (a bar per minute and per hour, its title on hover)
    and the workflows in flight per class; the charts are named for screen
    readers, their table opens, and at a phone's width the page still does not
    scroll sideways (R-ADM-130..132, R-ADM-42)."""
    seed_admin()
    seed_throughput()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_url}/geneva/")
    hour = page.locator('figure[data-geneva-chart="hour"]')
    day = page.locator('figure[data-geneva-chart="day"]')
    assert hour.locator("g.geneva-tp-bar").count() == 60
    assert day.locator("g.geneva-tp-bar").count() == 24
    svg = hour.locator("svg")
    assert svg.get_attribute("role") == "img"
    named = svg.get_attribute("aria-labelledby").split()
    assert page.locator(f"#{named[0]}").text_content() == (
        "Finished per minute, last hour"
    )
    assert (
        page.locator(f"#{named[1]}")
        .text_content()
        .startswith(
            "Step executions finished per minute over the last hour, by outcome"
        )
    )
    box = svg.bounding_box()
    assert box["width"] > 400
    assert box["height"] > 60
    # Stacked by outcome: failures and reattempts on the succeeded minutes.
    assert hour.locator("rect.geneva-tp--succeeded").count() == 60
    assert hour.locator("rect.geneva-tp--reattempted").count() >= 15
    assert day.locator("rect.geneva-tp--failed").count() >= 3
    title = hour.locator("g.geneva-tp-bar title").nth(30).text_content()
    assert " UTC: " in title
    assert " succeeded" in title
    assert not hour.locator("details table").is_visible()
    hour.locator("details summary").click()
    assert hour.locator("details tbody tr").count() == 60
    active = page.locator("table.geneva-active")
    assert "AdminTwoStep" in active.locator("tbody").inner_text()
    running = active.locator(
        'tr[data-geneva-class="AdminTwoStep"] .geneva-active-running a'
    )
    assert running.inner_text() == "1"
    row = 'tr[data-geneva-class="AdminTwoStep"]'
    counts = {
        key: active.locator(f"{row} .geneva-active-{key}").inner_text()
        for key in ("running", "waiting", "paused")
    }
    assert counts == {"running": "1", "waiting": "14", "paused": "6"}
    bar = active.locator(f"{row} svg.geneva-active-svg")
    assert "14 waiting" in bar.get_attribute("aria-label")
    assert "AdminSignalWait" in active.locator("tbody").inner_text()
    assert "AdminFailing" in active.locator("tbody").inner_text()  # paused only
    active.locator(f"{row} .geneva-active-waiting a").click()
    page.wait_for_url("**state=ready**")
    assert page.inner_text(".geneva-match-count") == "14 workflows match."
    page.go_back()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_url}/geneva/")
    width, inner = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]"
    )
    assert width <= inner
    assert page.geneva_dialogs == []


def test_the_step_plan_says_every_setting_and_the_limits_page_counts(live_url, page):
    """The workflow page's "Waits, limits, timeouts" column writes, one line
    each, a wait_for with its timeout, waiting for children, each limit, the
    body's timeout and a resumable step's bounds, and nothing for a plain step;
    the limits page counts the keys matching its filter (R-ADM-122,
    R-ADM-127)."""
    from tests.support.limit_rows import set_key

    workflow_id = BrowserPlanSettings.create(hero=new_user("plan@example.com")).id
    set_key("browser-partner-api", "acme", running=2, waiting=1)
    set_key("browser-partner-api", "globex")
    set_key("browser-partner-api", "initech")
    db.session.remove()
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    headers = page.locator("table.geneva-plan thead th").all_inner_texts()
    assert "Waits, limits, timeouts" in headers

    def lines(step_name: str) -> list[str]:
        cell = page.locator(f'td.geneva-plan-settings[data-step="{step_name}"] div')
        return cell.all_inner_texts()

    assert lines("start") == []
    assert lines("approve") == [
        "waits for signal approved; times out after 2 d, then pause"
    ]
    assert lines("gather") == [
        "waits for all its children to settle; a failed child fails the step "
        "(ChildWorkflowFailed)"
    ]
    assert lines("push") == [
        "limit browser-partner-api: 2 at once, per key tenant_of",
        "limit browser-rate: 10 starts per 1 min, one key for all",
        "timeout 30 s a run (then StepTimeout)",
    ]
    assert lines("walk") == [
        "at most 50 iterations an execution",
        "at most 5 min an execution",
    ]
    # Each line is a line of its own on the screen, not run together.
    push = page.locator('td.geneva-plan-settings[data-step="push"]')
    line_height = page.locator(
        'td.geneva-plan-settings[data-step="push"] div'
    ).first.bounding_box()["height"]
    assert push.bounding_box()["height"] >= 3 * line_height

    page.goto(f"{live_url}/geneva/limits/")
    assert page.inner_text(".geneva-match-count") == (
        "3 limit keys match (no filter: all limit keys)."
    )
    page.check('input[name="busy"]')
    page.click("form.geneva-filters button[type=submit]")
    page.wait_for_url("**busy=1**")
    assert page.inner_text(".geneva-match-count") == "1 limit key matches."
    assert page.geneva_dialogs == []
