"""Starting a workflow and roles in Chromium (issue 39; R-ADM-200..204, R-ADM-210..214).

The role comes from an ``X-Role`` header the browser context sends
(``GENEVA_ADMIN_CURRENT_ROLE`` reads it), so one server serves a viewer and an
operator in turn.
"""

from __future__ import annotations

import logging
import re

import pytest
from flask import request

from flask_geneva.admin.audit import AUDIT_LOGGER
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import new_user
from tests.admin.support import paused_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.workflow import workflow_row

pytestmark = pytest.mark.browser


@pytest.fixture
def app_config():
    """The standalone admin with roles read from the X-Role header (R-ADM-210)."""
    from tests.admin.conftest import ADMIN_CONFIG

    return {
        **ADMIN_CONFIG,
        "GENEVA_ADMIN_CURRENT_ROLE": lambda: request.headers.get("X-Role"),
        "GENEVA_ADMIN_ACTOR": lambda: request.headers.get("X-Role"),
    }


def test_an_operator_starts_a_workflow_found_by_its_label(live_url, page, monkeypatch):
    """From the list's "Start a workflow…": pick the class, search the hero by the
    start of its email, use it, give a priority, start; the workflow's page says
    so and the list shows it (R-ADM-200..203)."""
    monkeypatch.setattr(User, "__geneva_hero_label__", "email", raising=False)
    hero_id = new_user("zoe@example.com").id
    new_user("zack@example.com")
    db.session.remove()
    page.set_extra_http_headers({"X-Role": "operator"})
    page.goto(f"{live_url}/geneva/workflows/")
    page.click(".geneva-start-link")
    page.select_option("#geneva-start-type", "AdminTwoStep")
    page.select_option("#geneva-start-hero-type", "User")
    page.fill("#geneva-start-q", "zo")
    page.click('button[data-geneva-action="find_hero"]')
    assert page.locator(".geneva-start-matches tr[data-hero-id]").count() == 1
    page.click(f'tr[data-hero-id="{hero_id}"] a')
    assert page.inner_text(".geneva-start-hero").startswith(f"Hero: User#{hero_id}")
    page.fill("#geneva-start-priority", "5")
    page.click('button[data-geneva-submit="start"]')
    page.wait_for_selector("text=Started AdminTwoStep workflow")
    workflow_id = re.search(r"/workflows/(\d+)$", page.url).group(1)
    row = workflow_row(int(workflow_id))
    assert row["metadata"]["operator_actions"][0]["actor"] == "operator"
    page.goto(f"{live_url}/geneva/workflows/?hero_type=User&hero_id={hero_id}")
    listed = page.locator("tr[data-workflow-id]")
    assert [listed.nth(i).get_attribute("data-workflow-id") for i in range(1)] == [
        workflow_id
    ]
    assert listed.count() == 1


def test_a_viewer_has_no_buttons_and_a_forged_post_is_refused(live_url, page, caplog):
    """The viewer's workflow page has no button; the same viewer's POST with a valid
    CSRF token is a 403 page in the admin layout, audited, and changes nothing; the
    operator's page has the buttons and Resume works (R-ADM-213, R-ADM-214)."""
    workflow_id = paused_workflow().id
    db.session.remove()
    detail = f"{live_url}/geneva/workflows/{workflow_id}"
    page.set_extra_http_headers({"X-Role": "viewer"})
    page.goto(f"{live_url}/geneva/workflows/")
    token = page.get_attribute('input[name="csrf_token"]', "value")
    assert page.locator("[data-geneva-bulk], .geneva-start-link").count() == 0
    page.goto(detail)
    assert page.locator("[data-geneva-action]").count() == 0
    assert page.locator("form[method=post]").count() == 0
    with caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        forged = page.request.post(
            f"{detail}/action",
            form={"csrf_token": token, "action": "resume"},
            headers={"X-Role": "viewer"},
        )
    assert forged.status == 403
    assert "your role &#39;viewer&#39; does not allow &#39;resume&#39;" in forged.text()
    assert "geneva-error-page" in forged.text()
    [record] = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    assert (record.geneva_actor, record.geneva_action) == ("viewer", "resume")
    assert workflow_row(workflow_id)["state"] == "paused"

    page.set_extra_http_headers({"X-Role": "operator"})
    page.goto(detail)
    assert page.locator('[data-geneva-action="recover"]').count() == 0
    page.click('button[data-geneva-action="resume"]')
    page.wait_for_selector(f"text=Workflow {workflow_id}: Resume done")
    assert workflow_row(workflow_id)["state"] == "ready"


#: Every control a role may lack: flow-control and schedule buttons, Recover,
#: the resume-at and signal forms, the bulk buttons, the rows' checkboxes
#: that choose what a bulk button acts on, and the start link.
CONTROLS = (
    "[data-geneva-action], [data-geneva-submit], [data-geneva-bulk], "
    "[data-geneva-bulk-all], .geneva-start-link, form.geneva-resume-at, "
    'form.geneva-signal-form, input[name="ids"]'
)


def _controls_pages(declare) -> dict[str, str]:
    """A paused workflow, one parked at its wait_for gate, one running its step,
    a declared schedule: ``{page name: URL path}`` of the pages holding each
    control (R-ADM-213)."""
    from tests.admin.workflows import AdminSignalWait
    from tests.admin.workflows import AdminTwoStep
    from tests.engine.schedules.support import Tick
    from tests.support.workflow import execution_rows
    from tests.support.workflow import update_execution
    from tests.support.workflow import update_workflow

    paused = paused_workflow().id
    parked = AdminSignalWait.create(hero=new_user("parked@example.com"))
    perform_next_step(parked)
    parked_id = parked.id
    running = AdminTwoStep.create(hero=new_user("running@example.com")).id
    [execution] = execution_rows(running)
    update_execution(execution["id"], state="in_progress", started_at=clock.now())
    update_workflow(running, state="performing")
    declare("hourly-tick", Tick, cron="0 * * * *")
    db.session.remove()
    return {
        "list": "/geneva/workflows/",
        "paused": f"/geneva/workflows/{paused}",
        "parked": f"/geneva/workflows/{parked_id}",
        "running_execution": f"/geneva/step-executions/{execution['id']}",
        "schedules": "/geneva/schedules/",
        "signals": "/geneva/signals/",
        "limits": "/geneva/limits/",
        "overview": "/geneva/",
    }


def _controls(page, url: str) -> list[str]:
    """The controls of the page at ``url``, each named by its action (a bulk
    button for all matching prefixed ``all:``), sorted."""
    page.goto(url)
    return sorted(
        page.locator(CONTROLS).evaluate_all(
            """elements => elements.map(e =>
                e.dataset.genevaBulkAll ? "all:" + e.dataset.genevaBulkAll
                : e.name === "ids" ? "select"
                : e.dataset.genevaAction || e.dataset.genevaSubmit
                  || e.dataset.genevaBulk || e.className)"""
        )
    )


def test_each_role_sees_only_the_controls_it_may_use(live_url, page, declare):
    """On every page holding a control, the viewer sees none (no post form
    button, no row checkbox that no button would act on), the operator sees
    the workflow buttons, the signal and resume-at forms, the checked-rows
    bulk buttons with the rows' checkboxes and the start link, but no Recover,
    no "all matching" bulk buttons and no schedule buttons, which the admin
    sees too; the start page answers a viewer 403 (R-ADM-212, R-ADM-213)."""
    pages = _controls_pages(declare)
    seen: dict[str, dict[str, list[str]]] = {}
    for role in ("viewer", "operator", "admin"):
        page.set_extra_http_headers({"X-Role": role})
        seen[role] = {
            name: _controls(page, live_url + url) for name, url in pages.items()
        }
        if role == "viewer":
            for name, url in pages.items():
                page.goto(live_url + url)
                assert page.locator("form[method=post] button").count() == 0, name
    assert seen["viewer"] == {name: [] for name in pages}
    operator, admin = seen["operator"], seen["admin"]
    assert "resume" in operator["paused"]
    assert "cancel" in operator["paused"]
    assert "resume_at" in operator["paused"]
    assert "deliver_signal" in operator["parked"]
    assert "pause" in operator["list"]
    assert "select" in operator["list"]  # the rows' checkboxes
    assert "start" in operator["list"]  # the start link
    assert not [c for c in operator["list"] if c.startswith("all:")]
    assert [c for c in admin["list"] if c.startswith("all:")]
    assert operator["running_execution"] == []
    assert admin["running_execution"] == ["recover"]
    assert operator["schedules"] == []
    assert admin["schedules"] == ["pause", "resume", "run_now"]
    assert set(admin["paused"]) - set(operator["paused"]) == {"recover"}
    assert operator["limits"] == admin["limits"] == []  # the page only reads

    page.set_extra_http_headers({"X-Role": "viewer"})
    assert page.goto(f"{live_url}/geneva/workflows/start").status == 403
    assert "your role 'viewer' does not allow 'start'" in page.inner_text("body")


def test_an_operator_pauses_and_resumes_and_may_not_pause_a_schedule(
    live_url, page, declare, caplog
):
    """The operator clicks Pause on a ready workflow and Resume on it: each
    flashes done, the state and the next step's words follow (R-ADM-120); the operator's forged schedule Pause
    (the page shows no such button) is a 403 page, audited, and the schedule
    stays active (R-ADM-212..214)."""
    from tests.admin.support import ready_workflow
    from tests.engine.schedules.support import Tick
    from tests.engine.schedules.support import schedule_row

    workflow_id = ready_workflow().id
    declare("hourly-tick", Tick, cron="0 * * * *")
    db.session.remove()
    detail = f"{live_url}/geneva/workflows/{workflow_id}"
    page.set_extra_http_headers({"X-Role": "operator"})
    page.goto(detail)
    page.click('button[data-geneva-action="pause"]')
    page.wait_for_selector(f"text=Workflow {workflow_id}: Pause done")
    assert workflow_row(workflow_id)["state"] == "paused"
    assert page.inner_text(".geneva-next-step") == "first waits for Resume"
    page.click('button[data-geneva-action="resume"]')
    page.wait_for_selector(f"text=Workflow {workflow_id}: Resume done")
    assert workflow_row(workflow_id)["state"] == "ready"
    # Resumed, the same execution reads as any scheduled one again (R-ADM-120).
    assert "waits for Resume" not in page.inner_text("#geneva-live")
    assert page.inner_text(".geneva-next-step").startswith("first")
    actions = workflow_row(workflow_id)["metadata"]["operator_actions"]
    assert [(a["action"], a["actor"], a["via"]) for a in actions] == [
        ("pause", "operator", "admin"),
        ("resume", "operator", "admin"),
    ]

    token = page.get_attribute('input[name="csrf_token"]', "value")
    with caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        forged = page.request.post(
            f"{live_url}/geneva/schedules/action",
            form={"csrf_token": token, "action": "pause", "schedule": "hourly-tick"},
            headers={"X-Role": "operator"},
        )
    assert forged.status == 403
    assert "does not allow &#39;schedule_pause&#39;" in forged.text()
    assert "geneva-error-page" in forged.text()
    [record] = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    assert (record.geneva_role, record.geneva_action, record.geneva_target) == (
        "operator",
        "schedule_pause",
        "schedule 'hourly-tick'",
    )
    assert (schedule_row("hourly-tick") or {}).get("paused") in (None, False)
    page.goto(f"{live_url}/geneva/schedules/")
    assert "active" in page.inner_text(
        'tr[data-schedule="hourly-tick"] .geneva-schedule-state'
    )
