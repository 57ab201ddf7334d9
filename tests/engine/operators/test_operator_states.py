"""Each operator action is allowed from its transition table entries' states (issue 33).

One source per fact: the workflow states pause, resume, resume from the beginning,
resume at a step, cancel, skip, run now and recover are allowed from are the
workflow from-states of the table entries each applies
(:data:`flask_geneva.engine.operator_transaction.OPERATOR_ENTRIES`, read by
:func:`flask_geneva.engine.operator_transaction.allowed_from`). Here: those states are the spec's
(R-ADM-20, R-ADM-52, R-EVO-06, R-HK-28), and the engine refuses exactly the others,
with the spec's message naming the state found, changing nothing (R-EXT-01/03/04,
R-EXT-20, R-EVO-06, R-ADM-51). The admin's buttons
(tests/admin/test_button_states.py) and the CLI (tests/cli/test_cli_states.py) are
held to the same function, so a change of the table reaches all three.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flask_geneva import step
from flask_geneva.engine import operator_transaction
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.models import WorkflowState
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

SPEC = (Path(__file__).resolve().parents[3] / "docs" / "spec.md").read_text("utf-8")

#: The operator actions, named as the operator action record names them (R-PDR-05).
ACTIONS = (
    "pause",
    "resume",
    "resume_rewind",
    "resume_at",
    "cancel",
    "skip",
    "run_now",
    "recover",
)

#: How the engine refuses an action by state (R-EXT-01/03/04, R-EXT-20, R-EVO-06,
#: R-ADM-51): each message names the state found.
STATE_REFUSALS = {
    "pause": "Cannot pause a {state} workflow",
    "resume": "Cannot resume a {state} workflow",
    "resume_rewind": "Cannot resume a {state} workflow",
    "resume_at": "Cannot resume a {state} workflow at a step",
    "cancel": "Cannot cancel a {state} workflow",
    "skip": "Cannot skip on a {state} workflow",
    "run_now": "Cannot run a {state} workflow now",
    "recover": "Cannot recover a {state} workflow",
}


def refused_by_state(action: str, state: str, message: str) -> bool:
    """Whether ``message`` is the engine's refusal of ``action`` for ``state``."""
    refusal = STATE_REFUSALS[action].format(state=state)
    return message == refusal or message.startswith((refusal + ";", refusal + " ("))


def allowed(action: str) -> set[str]:
    """The states the table allows ``action`` from, as plain strings."""
    return {str(state) for state in operator_transaction.allowed_from(action)}


class OperatorStatesTwoStep(geneva.Workflow):
    """Two steps; each test moves it to the state under test."""

    @step
    def first(self):
        pass

    @step
    def second(self):
        pass


# -- the table and the spec -----------------------------------------------------------


def _rule(rule_id: str) -> str:
    match = re.search(rf"^- {rule_id}[^:]*: (.*)$", SPEC, re.M)
    assert match, rule_id
    return match.group(1)


def _spec_states(rule_id: str, pattern: str) -> dict[str, set[str]]:
    found = re.findall(pattern, _rule(rule_id))
    return {label.lower(): set(states.split("/")) for label, states in found}


def test_every_operator_action_has_table_entries():
    """Each action names entries of the table, whose states it is allowed from."""
    assert set(operator_transaction.OPERATOR_ENTRIES) == set(ACTIONS)
    for action, entries in operator_transaction.OPERATOR_ENTRIES.items():
        assert entries, action
        for entry in entries:
            assert entry in transitions.TABLE, (action, entry.name)
            assert entry.workflow is not None, (action, entry.name)
            assert entry.actor in (
                transitions.Actor.OPERATOR,
                transitions.Actor.HOUSEKEEPING,
            ), (action, entry.name)
        union = set().union(*(entry.workflow.from_states for entry in entries))
        assert set(operator_transaction.allowed_from(action)) == union, action


def test_the_allowed_states_are_the_specs():
    """The table allows each action from the states the spec names: the buttons of
    R-ADM-20, the bulk actions of R-ADM-52, resume at a step from paused (R-EVO-06),
    resume from the beginning from paused (R-ADM-20), recover from any (R-HK-28)."""
    buttons = _spec_states(
        "R-ADM-20", r"(Pause|Resume|Cancel|Skip) (?:current step )?\(from ([a-z/]+)\)"
    )
    bulk = _spec_states("R-ADM-52", r"(pause|resume|cancel|run now) from ([a-z/]+)")
    assert set(buttons) == {"pause", "resume", "cancel", "skip"}
    assert set(bulk) == {"pause", "resume", "cancel", "run now"}
    expected = {
        **buttons,
        **{label.replace(" ", "_"): states for label, states in bulk.items()},
    }
    assert "continues a paused workflow" in _rule("R-EVO-06")
    assert "for a paused workflow whose next step is resumable" in _rule("R-ADM-20")
    expected["resume_at"] = expected["resume_rewind"] = {"paused"}
    expected["recover"] = {str(state) for state in WorkflowState}
    for action in ACTIONS:
        assert allowed(action) == expected[action], action
    for label, states in bulk.items():
        assert buttons.get(label, states) == states, label


@pytest.mark.parametrize("action", ACTIONS)
def test_refuse_unless_allowed_refuses_exactly_the_other_states(action):
    """The engine's check (transitions.can_apply on the action's entries) and
    allowed_from agree; the refusal names the state found (R-EXT-01..04)."""
    for state in WorkflowState:
        workflow = SimpleNamespace(id=1, state=state.value)
        if state in operator_transaction.allowed_from(action):
            operator_transaction.refuse_unless_allowed(workflow, action)
            continue
        with pytest.raises(InvalidStateError, match=f" a {state.value} workflow$"):
            operator_transaction.refuse_unless_allowed(workflow, action)
        with pytest.raises(InvalidStateError, match=f"^{state.value}$"):
            operator_transaction.refuse_unless_allowed(
                workflow, action, InvalidStateError
            )


# -- the engine -----------------------------------------------------------------------


def _act(workflow: Any, action: str) -> None:
    """Apply ``action`` through the workflow's own method (the API the admin and
    the CLI call, R-ADM-21, R-CLI-02)."""
    if action == "resume_rewind":
        workflow.resume(rewind=True, actor="ops")
    elif action == "resume_at":
        workflow.resume_at("second", actor="ops")
    elif action == "recover":
        workflow.recover(force=True, actor="ops")
    else:
        getattr(workflow, action)(actor="ops")


def _in_state(action: str, state: WorkflowState) -> Any:
    workflow = OperatorStatesTwoStep.create(
        hero=make_user(f"{action}-{state.value}@example.com")
    )
    update_workflow(workflow.id, state=state.value)
    db.session.expire_all()
    return db.session.get(OperatorStatesTwoStep, workflow.id)


@pytest.mark.parametrize("action", ACTIONS)
def test_the_engine_refuses_exactly_the_states_outside_the_table(app, action):
    """From a state outside the table's the action is refused with the message
    naming that state and changes nothing; from the table's states it is never
    refused for the state, and the record names the state it came from (R-EXT-01,
    R-EXT-03, R-EXT-04, R-EXT-20, R-EVO-06, R-ADM-51, R-HK-28, R-PDR-05)."""
    refused_states = set()
    for state in WorkflowState:
        workflow = _in_state(action, state)
        before = (workflow_row(workflow.id), execution_rows(workflow.id))
        try:
            _act(workflow, action)
        except GenevaError as error:
            db.session.rollback()
            if refused_by_state(action, state.value, str(error)):
                refused_states.add(state.value)
                assert (workflow_row(workflow.id), execution_rows(workflow.id)) == (
                    before
                )
            continue
        [record] = workflow_row(workflow.id)["metadata"]["operator_actions"]
        assert record["from_state"] == state.value, (action, state)
    expected = {str(state) for state in WorkflowState} - allowed(action)
    assert refused_states == expected
