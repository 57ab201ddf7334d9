"""``flask geneva show`` says why a deleted hero canceled the workflow (R-HERO-07).

Run in-process like tests/cli/test_cli.py.
"""

from __future__ import annotations

from flask_geneva import Executor
from tests.apps.basic import db
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.support.common_workflows import CountingTwoSteps
from tests.support.workflow import deleting_user_after_the_claim
from tests.support.workflow import make_user


def test_show_prints_why_a_hero_deleted_during_the_step_canceled_it(geneva_cli):  # noqa: F811
    """The hero deleted after the claim: `show` prints the canceled execution with
    the reason and what the step raised (R-HERO-07)."""
    hero = make_user("gone@example.com")
    workflow = CountingTwoSteps.create(hero=hero)
    workflow_id, execution_id, hero_id = (
        workflow.id,
        workflow.current_execution.id,
        hero.id,
    )
    db.session.remove()  # as a worker's session: no hero in its identity map
    with deleting_user_after_the_claim(hero_id):
        Executor.execute(execution_id)
    result = geneva_cli("show", str(workflow_id))
    assert result.returncode == 0, result.stderr
    assert "  state:        canceled" in result.stdout
    # `show` cuts an error at 200 characters: the reason comes first.
    assert (
        f"      error: hero User#{hero_id} no longer exists: the workflow is "
        "canceled (CountingTwoSteps does not set may_proceed_without_hero, "
        "R-EXE-13); the step raised AttributeError: 'NoneType' object"
    ) in result.stdout
