"""What a developer meets around child workflows: the test helpers' messages
and the reads' refusals (R-CHD-03, R-CHD-14, R-CHD-21, R-CHD-31)."""

from __future__ import annotations

import pytest

from flask_geneva.engine.flow_control import step_context
from flask_geneva.testing import WaitingForChildren
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import geneva
from tests.engine.children import workflows
from tests.engine.children.workflows import Abandoning
from tests.engine.children.workflows import Doubler
from tests.engine.children.workflows import Summing
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row


@pytest.fixture(autouse=True)
def _fan_out():
    workflows.FAN_OUT[:] = ["a@example.com", "b@example.com"]
    workflows.CHILD_FAILS.clear()


def test_speedrun_stops_at_a_wait_for_children_saying_so(app, geneva_jobs):
    """R-CHD-21: a speedrun runs one workflow; at a step waiting for its
    children it raises WaitingForChildren with the counts, not a signal wait."""
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    parent = Summing.create(hero=heroes[0])
    with pytest.raises(WaitingForChildren) as raised:
        speedrun_workflow(parent)
    error = raised.value
    assert (error.workflow_id, error.step_name) == (parent.id, "collect")
    assert (error.settled, error.started) == (0, 2)
    assert "child workflows (0 of 2 settled)" in str(error)
    assert "signal" not in str(error)
    geneva_jobs.drain()
    assert speedrun_workflow(Summing.get(parent.id)).state == "finished"


def test_children_refuses_an_unknown_state_and_a_bad_limit(app, geneva_jobs):
    """R-CHD-03: a typo in ``state`` or a limit below 1 is an error listing
    what is allowed, never an empty list."""
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    parent_id = Summing.create(hero=heroes[0]).id
    geneva_jobs.drain()
    parent = Summing.get(parent_id)
    assert len(parent.children(state="finished")) == 2
    with pytest.raises(ValueError, match=r"unknown workflow state 'pause'.*paused"):
        parent.children(state="pause")
    for limit in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="a positive int"):
            parent.children(limit=limit)


def test_a_long_invalid_key_is_shown_by_its_length(app, geneva_jobs):
    """R-CHD-14: a key over 255 characters is named by its start and length."""
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    parent = Summing.create(hero=heroes[0])
    execution_id = execution_rows(parent.id)[0]["id"]
    with (
        step_context(parent.id, "body", execution_id=execution_id, step_name="x"),
        pytest.raises(ValueError, match="invalid child key") as raised,
    ):
        parent.start_child(Doubler, hero=heroes[0], key="k" * 5000)
    message = str(raised.value)
    assert "(5000 characters)" in message
    assert len(message) < 300


def test_the_dispatchers_count_is_its_publications_not_its_cancels(app, geneva_jobs):
    """R-CHD-31: canceling a parent's children is no publication: the
    dispatcher's count (``flask geneva dispatch``) leaves them out."""
    workflows.FAN_OUT[:] = ["kept@example.com", "canceled@example.com"]
    heroes = [make_user(email) for email in workflows.FAN_OUT]
    parent = Abandoning.create(hero=heroes[0])
    geneva_jobs.drain()
    Abandoning.get(parent.id).cancel()
    geneva_jobs.clear()
    assert geneva.dispatch_due() == 0
    states = sorted(
        workflow_row(child.id)["state"]
        for child in Abandoning.get(parent.id).children()
    )
    assert states == ["canceled", "ready"]
