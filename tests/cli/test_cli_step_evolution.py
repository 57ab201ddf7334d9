"""``flask geneva check-steps``, ``resume --at`` and step names in ``show`` (issue 19).

Run in-process like tests/cli/test_cli.py (R-EVO-04, R-EVO-06, R-EVO-08).
"""

from __future__ import annotations

from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.cli_app import CliOnboarding
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.common_workflows import EvolvedSignup
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


def _evolved(email, **rows):
    workflow = EvolvedSignup.create(hero=make_user(email))
    if "step_name" in rows:
        update_execution(workflow.current_execution.id, step_name=rows.pop("step_name"))
    if rows:
        update_workflow(workflow.id, **rows)
    return workflow.id


def test_check_steps_passes_when_every_step_is_known(geneva_cli):  # noqa: F811
    """Defined, renamed and removed names pass the gate: exit 0 (R-EVO-08)."""
    _evolved("a@example.com", step_name="charge")
    _evolved("b@example.com", next_step_name="mail")
    finished = _evolved("c@example.com", step_name="gone")
    update_workflow(finished, state="finished")
    result = geneva_cli("check-steps")
    assert result.returncode == 0, result
    assert "ok: every ongoing workflow's steps are defined" in result.stdout


def test_check_steps_lists_stranded_workflows_by_class_and_step(geneva_cli):  # noqa: F811
    """Unknown names are grouped by class and step with counts and ids; exit 1
    (R-EVO-08, R-CLI-05)."""
    first = _evolved("a@example.com", step_name="vanished", next_step_name="vanished")
    second = _evolved("b@example.com", next_step_name="vanished")
    lost = _evolved("c@example.com", current_step_name="lost")
    onboarding = CliOnboarding.create(hero=make_user("d@example.com"))
    gone = onboarding.id
    update_workflow(gone, type="DeletedWorkflow")
    result = geneva_cli("check-steps")
    assert result.returncode == 1, result
    lines = [line.split() for line in result.stdout.splitlines()]
    assert ["EvolvedSignup", "lost", "1", str(lost)] in lines
    assert ["EvolvedSignup", "vanished", "2", f"{first},", str(second)] in lines
    assert ["DeletedWorkflow", "(no", "class)", "welcome", "1", str(gone)] in lines
    assert "flask geneva resume ID --at STEP" in result.stderr


def _id_cells(result, step_name):
    """``(count, ids)`` of the row of ``step_name``: the cells after the step."""
    for line in result.stdout.splitlines():
        cells = line.split(None, 3)
        if len(cells) == 4 and cells[1] == step_name:
            return cells[2], cells[3].strip()
    raise AssertionError(f"no row for {step_name!r} in {result.stdout!r}")


def test_check_steps_names_the_stranded_workflows_capped_per_group(geneva_cli):  # noqa: F811
    """Each group lists its workflow ids, the first 10 then "and N more";
    ``--all`` lists every id, so its ``resume ID --at STEP`` hint can be
    followed (R-EVO-08, R-CLI-05).
    """
    vanished = [_evolved(f"v{i}@example.com", step_name="vanished") for i in range(12)]
    lost = _evolved("lost@example.com", current_step_name="lost")
    result = geneva_cli("check-steps")
    assert result.returncode == 1, result
    header = next(x for x in result.stdout.splitlines() if x.startswith("class"))
    assert header.split() == ["class", "step", "workflows", "workflow", "ids"]
    first = ", ".join(str(i) for i in sorted(vanished)[:10])
    assert _id_cells(result, "vanished") == ("12", f"{first} and 2 more")
    assert _id_cells(result, "lost") == ("1", str(lost))
    every = geneva_cli("check-steps", "--all")
    assert every.returncode == 1, every
    assert _id_cells(every, "vanished") == (
        "12",
        ", ".join(str(i) for i in sorted(vanished)),
    )
    assert "flask geneva check-steps --all" in result.stderr
    assert "check-steps --all" not in every.stderr  # nothing left out
    # The hint can be followed with a printed id.
    paused = sorted(vanished)[0]
    update_workflow(paused, state="paused")
    resumed = geneva_cli("resume", str(paused), "--at", "send_mail")
    assert resumed.returncode == 0, resumed


def test_resume_at_from_the_cli_runs_the_named_step_and_records_the_actor(
    geneva_cli,  # noqa: F811
):
    """``resume ID --at STEP`` resumes at the step; refusals list the allowed
    steps; --at and --rewind exclude each other (R-EVO-06, R-CLI-02).
    """
    workflow_id = _evolved("a@example.com", step_name="vanished", state="paused")
    refused = geneva_cli("resume", str(workflow_id), "--at", "charge")
    assert refused.returncode == 1
    assert "it was removed from EvolvedSignup" in refused.stderr
    assert "allowed steps: 'start', 'send_mail'" in refused.stderr
    both = geneva_cli("resume", str(workflow_id), "--at", "start", "--rewind")
    assert both.returncode == 2
    assert "--at and --rewind cannot be combined" in both.stderr
    done = geneva_cli("resume", str(workflow_id), "--at", "send_mail", actor="bob")
    assert done.returncode == 0, done
    assert f"workflow {workflow_id}: resume at send_mail done, state is ready" in (
        done.stdout
    )
    row = workflow_row(workflow_id)
    assert (row["state"], row["next_step_name"]) == ("ready", "send_mail")
    assert [r["step_name"] for r in execution_rows(workflow_id)] == [
        "vanished",
        "send_mail",
    ]
    shown = geneva_cli("show", str(workflow_id))
    assert "resume_at via cli by bob (paused -> ready) at step send_mail" in (
        shown.stdout
    )


def test_show_and_list_print_both_names_of_a_renamed_step(geneva_cli):  # noqa: F811
    """A renamed name is printed as ``new (was old)`` (R-EVO-04)."""
    workflow = EvolvedSignup.create(hero=make_user("a@example.com"))
    update_execution(workflow.current_execution.id, step_name="mail")
    update_workflow(workflow.id, next_step_name="mail")
    db.session.expire_all()
    speedrun_workflow(workflow)
    shown = geneva_cli("show", str(workflow.id))
    assert "send_mail (was mail): completed/success" in shown.stdout
    assert "2. send_mail: done" in shown.stdout
    paused = _evolved("b@example.com", next_step_name="mail", state="paused")
    listed = geneva_cli("list")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(str(paused)))
    assert "send_mail (was mail)" in line


def test_an_empty_resume_at_step_is_a_usage_error_not_a_traceback(geneva_cli):  # noqa: F811
    """``resume ID --at ''`` exits 2 with one line naming the value; nothing changes (R-EVO-06)."""
    workflow_id = _evolved("a@example.com", step_name="vanished", state="paused")
    result = geneva_cli("resume", str(workflow_id), "--at", " ")
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert "needs a step name, got ' '" in result.stderr
    assert workflow_row(workflow_id)["state"] == "paused"


def test_show_and_list_mark_a_removed_step_name(geneva_cli):  # noqa: F811
    """A gravestone's name in ``next_step_name`` or a timeline row reads
    ``old (removed)`` in ``list`` and ``show`` (R-EVO-04, R-CLI-01).
    """
    workflow_id = _evolved(
        "a@example.com", step_name="charge", next_step_name="charge", state="paused"
    )
    listed = geneva_cli("list")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(str(workflow_id)))
    assert "charge (removed)" in line
    shown = geneva_cli("show", str(workflow_id))
    assert "next step:    charge (removed)" in shown.stdout
    assert "charge (removed): scheduled" in shown.stdout
