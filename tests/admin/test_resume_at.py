"""The "Resume at step…" form and both names of renamed steps (issue 19).

R-EVO-04 (the admin shows "new (was old)"), R-EVO-06 (the form: a select of the
defined steps, CSRF-checked, audited), R-ADM-03, R-ADM-05.
"""

from __future__ import annotations

from tests.admin.conftest import csrf_token
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.common_workflows import EvolvedSignup
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


def _paused_evolved(**rows):
    workflow = EvolvedSignup.create(hero=new_user())
    if "step_name" in rows:
        update_execution(workflow.current_execution.id, step_name=rows.pop("step_name"))
    update_workflow(workflow.id, state="paused", **rows)
    db.session.expire_all()
    return workflow


def _url(workflow_id):
    return f"/geneva/workflows/{workflow_id}/resume-at"


def test_the_form_offers_the_defined_steps_of_a_paused_workflow(client):
    """A paused workflow's page has a select of the defined steps; a ready one has
    no form (R-EVO-06).
    """
    workflow = _paused_evolved()
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert 'data-geneva-action="resume_at"' in page
    assert '<option value="start">start</option>' in page
    assert '<option value="send_mail">send_mail</option>' in page
    assert 'value="charge"' not in page
    ready = ready_workflow()
    other = client.get(detail_url(ready.id)).get_data(as_text=True)
    assert 'data-geneva-action="resume_at"' not in other


def test_posting_the_form_resumes_at_the_step_and_records_the_actor(client):
    """The POST calls resume_at via the admin: the step is scheduled and the
    action recorded with its step (R-EVO-06, R-PDR-05).
    """
    workflow = _paused_evolved(step_name="vanished", next_step_name="vanished")
    token = csrf_token(client, detail_url(workflow.id))
    page = client.post(
        _url(workflow.id),
        data={"csrf_token": token, "step_name": "send_mail"},
        follow_redirects=True,
    )
    text = page.get_data(as_text=True)
    assert f"Workflow {workflow.id}: resumed at step send_mail; state is now ready" in (
        text
    )
    assert "resume_at at step send_mail" in text
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"]) == ("ready", "send_mail")
    assert [r["step_name"] for r in execution_rows(workflow.id)][-1] == "send_mail"
    db.session.expire_all()
    action = workflow.read_metadata("operator_actions")[-1]
    assert (action["action"], action["via"], action["step"]) == (
        "resume_at",
        "admin",
        "send_mail",
    )


def test_an_invalid_token_or_step_is_refused_and_nothing_changes(client):
    """No token: 400; a step outside the select (or a removed one): 400 naming the
    allowed steps (R-ADM-05, R-EVO-06).
    """
    workflow = _paused_evolved()
    no_token = client.post(_url(workflow.id), data={"step_name": "start"})
    assert no_token.status_code == 400
    token = csrf_token(client, detail_url(workflow.id))
    removed = client.post(
        _url(workflow.id), data={"csrf_token": token, "step_name": "charge"}
    )
    assert removed.status_code == 400
    assert "allowed steps: &#39;start&#39;, &#39;send_mail&#39;" in (
        removed.get_data(as_text=True)
    )
    assert workflow_row(workflow.id)["state"] == "paused"


def test_a_read_only_operator_gets_no_form_and_a_403(client, app):
    """With GENEVA_ADMIN_CAN_ACT false there is no form and a POST is refused
    (R-ADM-03).
    """
    workflow = _paused_evolved()
    token = csrf_token(client, detail_url(workflow.id))
    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert 'data-geneva-action="resume_at"' not in page
    refused = client.post(
        _url(workflow.id), data={"csrf_token": token, "step_name": "start"}
    )
    assert refused.status_code == 403
    assert workflow_row(workflow.id)["state"] == "paused"


def test_the_page_shows_both_names_of_a_renamed_step(client):
    """Current/next step and the timeline show "new (was old)"; a removed step's
    execution is marked removed (R-EVO-04, R-EVO-02).
    """
    workflow = _paused_evolved(step_name="mail", next_step_name="mail")
    page = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert page.count("send_mail (was mail)") >= 2
    other = _paused_evolved(step_name="charge")
    text = client.get(detail_url(other.id)).get_data(as_text=True)
    assert "charge" in text
    assert ">removed<" in text or "removed</" in text


def test_the_executions_list_and_page_show_both_names_of_a_renamed_step(client):
    """The step executions list and an execution's page show "new (was old)" for
    an execution stored under a renamed step's old name (R-EVO-04).
    """
    workflow = _paused_evolved(step_name="mail")
    execution_id = execution_rows(workflow.id)[-1]["id"]
    listing = client.get("/geneva/step-executions/").get_data(as_text=True)
    assert "send_mail (was mail)" in listing
    page = client.get(f"/geneva/step-executions/{execution_id}").get_data(as_text=True)
    assert "send_mail (was mail)" in page
