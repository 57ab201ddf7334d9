"""The admin offers each action in the transition table's states only (issue 33).

The states a workflow page's button is enabled in (R-ADM-20), the "Resume at
step…" form is shown in (R-EVO-06) and a state-filtered list offers a bulk action
in (R-ADM-52) are the engine's :func:`flask_geneva.engine.operator_transaction.allowed_from`,
read from the table: the same states the engine refuses outside of
(tests/engine/operators/test_operator_states.py).
"""

from __future__ import annotations

import re

from flask_geneva.admin.bulk_actions import BULK_ACTIONS
from flask_geneva.admin.flow_control_actions import ACTIONS
from flask_geneva.engine.operator_transaction import OPERATOR_ENTRIES
from flask_geneva.engine.operator_transaction import allowed_from
from flask_geneva.models import WorkflowState
from tests.admin.support import detail_url
from tests.admin.support import new_user
from tests.admin.workflows import AdminTwoStep
from tests.support.workflow import update_workflow

LIST = "/geneva/workflows/"


def _one_workflow_per_state() -> dict[WorkflowState, object]:
    workflows = {}
    for state in WorkflowState:
        workflow = AdminTwoStep.create(hero=new_user(f"{state.value}@example.com"))
        update_workflow(workflow.id, state=state.value)
        workflows[state] = workflow.id
    return workflows


def test_every_button_is_disabled_for_the_state_exactly_outside_the_table(client):
    """Each button says "not possible: workflow is <state>" in the states its
    action is not allowed from, and only there (R-ADM-20, R-ADM-45); the Resume
    at step form is offered in resume_at's states only (R-EVO-06)."""
    assert set(ACTIONS) | set(BULK_ACTIONS) <= set(OPERATOR_ENTRIES)
    for state, workflow_id in _one_workflow_per_state().items():
        page = client.get(detail_url(workflow_id)).get_data(as_text=True)
        reason = f"not possible: workflow is {state.value}"
        for action in ACTIONS:
            disabled_for_state = (
                f'disabled title="{reason}" data-geneva-action="{action}"' in page
            )
            assert re.search(rf'data-geneva-action="{action}"', page), action
            assert disabled_for_state == (state not in allowed_from(action)), (
                state,
                action,
            )
        offered = 'data-geneva-action="resume_at"' in page
        assert offered == (state in allowed_from("resume_at")), state


def test_a_state_filter_offers_the_bulk_actions_allowed_from_that_state(client):
    """With a state filter the list offers, for all matching and for checked rows,
    the bulk actions the table allows from that state (R-ADM-52)."""
    _one_workflow_per_state()
    for state in WorkflowState:
        page = client.get(LIST, query_string={"state": state.value})
        text = page.get_data(as_text=True)
        expected = [action for action in BULK_ACTIONS if state in allowed_from(action)]
        assert re.findall(r'data-geneva-bulk-all="([a-z_]+)"', text) == expected
        assert re.findall(r'data-geneva-bulk="([a-z_]+)"', text) == expected
        if not expected:
            assert f"No bulk action applies to {state.value} workflows." in text
