"""`flask geneva list` and `show` say what happened (issue 39): no next step for a
workflow that ended, the errors of reattempted executions (R-CLI-07, R-CLI-08)."""

from __future__ import annotations

import pytest

from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.execution_support import ExecDetailFlaky
from tests.admin.execution_support import ExecDetailTimeout
from tests.apps.cli_app import CliOnboarding
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow


def test_an_ended_workflow_has_no_next_step_in_list_and_show(geneva_cli):  # noqa: F811
    """A canceled workflow keeps next_step_name in its row; `list` prints "-" for
    its current and next step, and `show` prints no current or next step line
    and its never-run steps as "not run", not "upcoming" (R-CLI-07)."""
    workflow = CliOnboarding.create(hero=make_user())
    perform_next_step(workflow)
    workflow.cancel()
    assert workflow.next_step_name == "follow_up"  # the row still holds it
    listed = geneva_cli("list", "--class", "CliOnboarding")
    assert listed.returncode == 0, listed.stderr
    row = next(
        line for line in listed.stdout.splitlines() if line.startswith(str(workflow.id))
    )
    assert row.split()[3:6] == ["canceled", "-", "-"]
    shown = geneva_cli("show", str(workflow.id))
    assert shown.returncode == 0, shown.stderr
    assert "next step:" not in shown.stdout
    assert "current step:" not in shown.stdout
    assert "2. follow_up: canceled" in shown.stdout
    assert "3. sweep: not run  (resumable)" in shown.stdout
    assert "upcoming" not in shown.stdout
    # An ongoing workflow still has both lines.
    ongoing = CliOnboarding.create(hero=make_user("ongoing@example.com"))
    out = geneva_cli("show", str(ongoing.id)).stdout
    assert "  next step:    welcome" in out
    assert "3. sweep: upcoming" in out


def test_show_prints_the_error_of_a_reattempted_execution(geneva_cli):  # noqa: F811
    """An execution that raised and was reattempted keeps its error in its
    metadata; `show` prints it under the timeline row like a failed one's, with
    its class (R-CLI-08, R-CLI-06)."""
    workflow = ExecDetailFlaky.create(hero=make_user())
    with pytest.raises(ExecDetailTimeout):
        perform_next_step(workflow)
    out = geneva_cli("show", str(workflow.id)).stdout
    _row, error, error_class = out.split("completed/reattempted", 1)[1].splitlines()[:3]
    assert error == "      error: the API timed out <script>alert(1)</script>"
    assert error_class == (
        f"      error class: {ExecDetailTimeout.__module__}.ExecDetailTimeout"
    )


def test_a_finished_workflow_has_no_next_step_whatever_its_row_holds(geneva_cli):  # noqa: F811
    """A finished workflow whose row still names a current and a next step (an
    old row, a hand edit) is listed with "-" for both, and `show` prints
    neither line (R-CLI-07)."""
    workflow = CliOnboarding.create(hero=make_user())
    for _ in range(3):
        update_execution(workflow.current_execution.id, scheduled_for=clock.now())
        perform_next_step(workflow)
    assert workflow.state == "finished"
    update_workflow(workflow.id, current_step_name="sweep", next_step_name="sweep")
    listed = geneva_cli("list", "--class", "CliOnboarding")
    assert listed.returncode == 0, listed.stderr
    row = next(
        line for line in listed.stdout.splitlines() if line.startswith(str(workflow.id))
    )
    assert row.split()[3:6] == ["finished", "-", "-"]
    shown = geneva_cli("show", str(workflow.id)).stdout
    assert "next step:" not in shown
    assert "current step:" not in shown
    assert "3. sweep: done  (resumable)" in shown
