"""``flask geneva pause|resume|cancel|skip|recover`` refuse exactly the states the
transition table does not allow (issue 33; R-CLI-02).

The commands call the workflow's own methods, so their refusals are the engine's,
from :func:`flask_geneva.engine.operator_transaction.allowed_from`: here each command runs on one
workflow per state and the ids refused for their state are those the table does
not allow the action from, each refusal printed on one line naming the state
(R-CLI-02, R-EXT-01/03/04, R-EXT-20, R-EVO-06, R-HK-28).
"""

from __future__ import annotations

import re

import pytest

from flask_geneva.models import WorkflowState
from tests.apps.cli_app import CliOnboarding
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.engine.operators.test_operator_states import allowed
from tests.engine.operators.test_operator_states import refused_by_state
from tests.support.workflow import make_user
from tests.support.workflow import update_workflow

#: (operator action, the command's arguments before the ids).
COMMANDS = (
    ("pause", ("pause",)),
    ("resume", ("resume",)),
    ("resume_rewind", ("resume", "--rewind")),
    ("resume_at", ("resume", "--at", "follow_up")),
    ("cancel", ("cancel",)),
    ("skip", ("skip",)),
    ("recover", ("recover", "--force")),
)


@pytest.mark.parametrize(
    ("action", "arguments"), COMMANDS, ids=[a for a, _ in COMMANDS]
)
def test_each_command_refuses_the_states_outside_the_table(
    geneva_cli,  # noqa: F811 - the fixture
    action,
    arguments,
):
    """One id per workflow state: those the table does not allow the action from
    are refused with the engine's message naming the state, the others are not
    refused for their state (R-CLI-02)."""
    states = {}
    for state in WorkflowState:
        email = f"{action}-{state.value}@example.com"
        workflow = CliOnboarding.create(hero=make_user(email))
        update_workflow(workflow.id, state=state.value)
        states[str(workflow.id)] = state.value
    result = geneva_cli(*arguments, *states)
    command = arguments[0]
    refusals = dict(
        re.findall(rf"^workflow (\d+): {command} refused: (.*)$", result.stderr, re.M)
    )
    done = re.findall(rf"^workflow (\d+): {command}.* done", result.stdout, re.M)
    assert set(refusals) | set(done) == set(states), result
    refused_for_state = {
        states[workflow_id]
        for workflow_id, message in refusals.items()
        if refused_by_state(action, states[workflow_id], message)
    }
    assert refused_for_state == {str(s) for s in WorkflowState} - allowed(action)
    assert result.returncode == (1 if refusals else 0)
