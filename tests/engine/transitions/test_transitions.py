"""The transition table: checked against the spec's state tables, applied by all.

These tests need no database: the table is data, and :func:`transitions.apply`
works on any object with the row attributes.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from flask_geneva.cli.reference import transitions_reference
from flask_geneva.engine.transitions import table as transitions
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import InvalidStateTransition
from flask_geneva.models import Outcome
from flask_geneva.models import StepExecutionState
from flask_geneva.models import WorkflowState

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "flask_geneva"
SPEC = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

# The module allowed to assign a row's state: apply() and the two setters it
# writes through, all in engine/transitions/apply.py.
_WRITERS = {"engine/transitions/apply.py"}
_STATE_SETTERS = {"set_workflow_state", "set_execution_state"}


def _rule(rule_id: str) -> str:
    match = re.search(rf"^- {rule_id}[^:]*: (.*)$", SPEC, re.M)
    assert match, rule_id
    return match.group(1)


def _names(text: str) -> set[str]:
    return {name.strip(" `") for name in text.split(",") if name.strip(" `")}


def _r_se_01() -> dict[str, set[str]]:
    """R-SE-01's allowed execution transitions, read from the spec."""
    text = _rule("R-SE-01")
    allowed = {
        source: _names(targets)
        for source, targets in re.findall(r"from `(\w+)` → \{([^}]*)\}", text)
    }
    assert set(allowed) == {"scheduled", "in_progress", "waiting"}, text
    assert "from a terminal state → nothing" in text
    return allowed


def _r_wf_02() -> tuple[set[str], set[str]]:
    """R-WF-02's (from-states, target states) for executor-driven transitions."""
    text = _rule("R-WF-02")
    match = re.search(r"from `(\w+)` or `(\w+)` → any of \{([^}]*)\}", text)
    assert match, text
    return {match.group(1), match.group(2)}, _names(match.group(3))


def _r_se_11() -> set[tuple[str, str]]:
    """R-SE-11's valid (state, outcome) pairs."""
    text = _rule("R-SE-11").split(": ", 1)[1]
    pairs = set()
    for state, outcomes in re.findall(r"(\w+)/(\{[^}]*\}|\w+)", text):
        for outcome in _names(outcomes.strip("{}")):
            pairs.add((state, outcome))
    assert ("completed", "recovered") in pairs
    return pairs


#: Execution states that are not terminal: no finished_at (R-SE-02, R-WSIG-10/11).
_NOT_FINISHED = (
    StepExecutionState.IN_PROGRESS,
    StepExecutionState.WAITING,
    StepExecutionState.SCHEDULED,
)


def _entries(actor: transitions.Actor | None = None) -> list[transitions.Transition]:
    return [e for e in transitions.TABLE if actor is None or e.actor == actor]


def _execution(state: str | None) -> SimpleNamespace:
    return SimpleNamespace(
        id=7,
        state=state,
        outcome=None,
        started_at=None,
        finished_at=None,
        completed_at=None,
        failed_at=None,
        skipped_at=None,
        canceled_at=None,
    )


def _workflow(state: str | None) -> SimpleNamespace:
    return SimpleNamespace(
        id=3,
        state=state,
        transitioned_at=None,
        started_at=None,
        current_step_name="a",
        next_step_name="b",
    )


# -- the table against the spec -------------------------------------------------


def test_table_names_are_unique_and_every_entry_is_exported():
    """Each transition is defined once, under its own name."""
    names = [entry.name for entry in transitions.TABLE]
    assert len(names) == len(set(names))
    assert len(names) >= 40
    for entry in transitions.TABLE:
        assert getattr(transitions, entry.name.upper()) is entry


def test_validated_execution_writes_follow_r_se_01():
    """Every entry but the unvalidated row API moves executions as R-SE-01 allows."""
    allowed = _r_se_01()
    for entry in transitions.TABLE:
        write = entry.execution
        if write is None or entry.actor == transitions.Actor.ROW_API:
            continue
        assert write.from_states, entry.name
        for source in write.from_states:
            assert write.to in allowed.get(source, set()), (entry.name, source)


def test_row_api_entries_are_the_unvalidated_rules():
    """Only R-WF-05 and R-SE-47 (no validation) may start from a terminal state."""
    terminal = set(StepExecutionState) - {
        StepExecutionState.SCHEDULED,
        StepExecutionState.IN_PROGRESS,
        StepExecutionState.WAITING,
    }
    for entry in transitions.TABLE:
        starts_terminal = entry.execution is not None and bool(
            entry.execution.from_states & terminal
        )
        if starts_terminal or entry.actor == transitions.Actor.ROW_API:
            assert entry.actor == transitions.Actor.ROW_API, entry.name
            assert {"R-WF-05", "R-SE-47"} & set(entry.rules), entry.name


def test_executor_driven_workflow_writes_follow_r_wf_02():
    """Every entry citing R-WF-02 starts from ready/performing and targets its set."""
    sources, targets = _r_wf_02()
    cited = [entry for entry in transitions.TABLE if "R-WF-02" in entry.rules]
    assert len(cited) >= 15
    for entry in cited:
        write = entry.workflow
        assert write is not None, entry.name
        assert set(write.from_states) == sources, entry.name
        assert write.to, entry.name
        assert {str(state) for state in write.to} <= targets, entry.name


def test_engine_entries_changing_a_stopped_workflow_cite_their_exception():
    """An engine entry that moves a workflow not ready/performing cites the rule."""
    runnable = {WorkflowState.READY, WorkflowState.PERFORMING}
    for entry in _entries(transitions.Actor.ENGINE):
        write = entry.workflow
        if write is None or not write.to or set(write.from_states) <= runnable:
            continue
        exceptions = {"R-EXE-42", "R-SCH-06", "R-WF-10"}
        assert exceptions & set(entry.rules), entry.name


def test_outcomes_are_the_valid_pairs_of_r_se_11():
    """Each (state, outcome) an entry writes is one R-SE-11 lists."""
    pairs = _r_se_11()
    for entry in transitions.TABLE:
        write = entry.execution
        if write is None or entry.actor == transitions.Actor.ROW_API:
            continue
        if write.to in (
            StepExecutionState.IN_PROGRESS,
            StepExecutionState.WAITING,  # park (R-WSIG-10)
            StepExecutionState.SCHEDULED,  # wake (R-WSIG-11)
        ):
            assert write.outcomes == (), entry.name
            continue
        assert write.outcomes, entry.name
        for outcome in write.outcomes:
            assert (str(write.to), str(outcome)) in pairs, (entry.name, outcome)


def test_the_spec_examples_are_single_entries():
    """What pause, cancel, skip, resume and recover do is each one entry (R-EXT-*, R-HK-*)."""
    pause = transitions.OPERATOR_PAUSE
    assert pause.workflow is not None
    assert pause.workflow.to == (WorkflowState.PAUSED,)
    assert pause.execution is None
    assert transitions.PAUSE_SIGNAL.execution is not None
    assert transitions.PAUSE_SIGNAL.execution.outcomes == (Outcome.CANCELED,)
    skip = transitions.OPERATOR_SKIP
    assert skip.schedules is transitions.Schedules.NEXT_STEP
    assert transitions.REATTEMPT.schedules is transitions.Schedules.SAME_STEP
    assert transitions.RECOVER_REATTEMPT.schedules is transitions.Schedules.SAME_STEP
    assert transitions.RECOVER_ENDED.execution is not None
    assert transitions.RECOVER_ENDED.execution.outcomes == (
        Outcome.CANCELED,
        Outcome.RECOVERED,
    )


# -- applying ------------------------------------------------------------------


def _cases() -> list[tuple[str, str, str]]:
    """(entry, row kind, refused state) for every state outside the from-states."""
    cases = []
    for entry in transitions.TABLE:
        if entry.execution is not None:
            for state in StepExecutionState:
                if state not in entry.execution.from_states:
                    cases.append((entry.name, "execution", str(state)))
        if entry.workflow is not None:
            for state in WorkflowState:
                if entry.workflow.from_states and (
                    state not in entry.workflow.from_states
                ):
                    cases.append((entry.name, "workflow", str(state)))
    return cases


@pytest.mark.parametrize(("name", "kind", "state"), _cases())
def test_each_transition_refuses_a_state_outside_its_from_states(name, kind, state):
    """A row in any other state is refused and neither row changes (R-SE-01, R-WF-02)."""
    entry = getattr(transitions, name.upper())
    execution = _execution(
        state if kind == "execution" else _first(entry.execution, StepExecutionState)
    )
    workflow = _workflow(
        state if kind == "workflow" else _first(entry.workflow, WorkflowState)
    )
    before = (dict(vars(execution)), dict(vars(workflow)))
    with pytest.raises(InvalidStateTransition, match=f"it is '{state}'"):
        transitions.apply(entry, NOW, workflow=workflow, execution=execution)
    assert (vars(execution), vars(workflow)) == before


def _first(part, states):
    if part is None:
        return next(iter(states)).value
    if not part.from_states:
        return None
    return next(state for state in states if state in part.from_states).value


@pytest.mark.parametrize("entry", transitions.TABLE, ids=lambda e: e.name)
def test_each_transition_applies_from_each_of_its_from_states(entry):
    """From every from-state the entry writes what it declares (R-SE-02, R-WF-03)."""
    exec_states = entry.execution.from_states if entry.execution else {None}
    wf_states = (entry.workflow.from_states or {None}) if entry.workflow else {"ready"}
    for exec_state in exec_states:
        for wf_state in wf_states:
            execution = _execution(exec_state and str(exec_state))
            workflow = _workflow(wf_state and str(wf_state))
            schedules = transitions.apply(
                entry, NOW, workflow=workflow, execution=execution
            )
            assert schedules is entry.schedules
            if entry.execution is not None:
                write = entry.execution
                assert execution.state == write.to
                if write.outcomes:
                    assert execution.outcome == write.outcomes[0]
                if write.to not in _NOT_FINISHED:
                    assert execution.finished_at == NOW
            if entry.workflow is not None:
                write = entry.workflow
                if write.to:
                    assert workflow.state == write.to[0]
                else:
                    assert workflow.state == (wf_state and str(wf_state))
                for name in write.clears:
                    assert getattr(workflow, name) is None


def test_refuse_builds_the_callers_error():
    """Operator actions keep their own error and wording (R-EXT-01)."""
    workflow = _workflow("finished")
    with pytest.raises(InvalidStateError, match="Cannot pause a finished workflow"):
        transitions.apply(
            transitions.OPERATOR_PAUSE,
            NOW,
            workflow=workflow,
            refuse=lambda state: InvalidStateError(f"Cannot pause a {state} workflow"),
        )
    assert workflow.state == "finished"


def test_a_refused_execution_leaves_the_workflow_alone():
    """Both rows are checked before either is written."""
    workflow = _workflow("performing")
    execution = _execution("completed")
    with pytest.raises(InvalidStateTransition):
        transitions.apply(
            transitions.COMPLETE, NOW, workflow=workflow, execution=execution
        )
    assert workflow.state == "performing"
    assert workflow.current_step_name == "a"


def test_an_outcome_or_target_outside_the_entry_is_a_value_error():
    """Bad input names the wrong value and the allowed ones."""
    with pytest.raises(
        ValueError, match="'failed' is not one of complete's: 'success'"
    ):
        transitions.apply(
            transitions.COMPLETE,
            NOW,
            execution=_execution("in_progress"),
            outcome=Outcome.FAILED,
        )
    with pytest.raises(ValueError, match="'ready' is not one of operator_pause's"):
        transitions.apply(
            transitions.OPERATOR_PAUSE,
            NOW,
            workflow=_workflow("ready"),
            to=WorkflowState.READY,
        )


def test_the_current_state_again_is_a_no_op_for_the_engine():
    """R-WF-02: transitioned_at keeps its value; transition_to stamps again (R-WF-05)."""
    earlier = datetime(2025, 1, 1, tzinfo=UTC)
    workflow = _workflow("paused")
    workflow.transitioned_at = earlier
    transitions.apply(
        transitions.TRANSITION_TO, NOW, workflow=workflow, to=WorkflowState.PAUSED
    )
    assert workflow.transitioned_at == NOW
    workflow = _workflow("performing")
    transitions.apply(transitions.CLAIM, NOW, workflow=workflow, current_step_name="x")
    assert workflow.started_at is None  # unchanged: performing already
    assert workflow.current_step_name == "x"


# -- nobody else writes states ----------------------------------------------------


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in {
                "state",
                "outcome",
            }:
                found.append(f"{path.name}:{node.lineno} assigns .{target.attr}")
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            if name in _STATE_SETTERS:
                found.append(f"{path.name}:{node.lineno} calls {name}")
            if (
                name == "setattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in {"state", "outcome"}
            ):
                found.append(f"{path.name}:{node.lineno} setattr {node.args[1].value}")
    return found


def test_only_the_transitions_module_writes_states():
    """No module but engine/transitions/apply.py (apply() and its setters) assigns a state."""
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() in _WRITERS:
            continue
        violations += _violations(path)
    assert violations == []


def test_the_source_check_catches_each_kind_of_write(tmp_path):
    """The check above can fail: each way of writing a state is reported."""
    source = tmp_path / "bad.py"
    source.write_text(
        "workflow.state = 'ready'\n"
        "execution.outcome += 'x'\n"
        "transition_apply.set_workflow_state(w, s, now)\n"
        "set_execution_state(e, s, now)\n"
        "setattr(execution, 'state', 'failed')\n",
        encoding="utf-8",
    )
    assert len(_violations(source)) == 5


# -- the generated reference -----------------------------------------------------


def test_the_reference_page_shows_the_table():
    """docs/reference/transitions.md is generated from the table (like settings)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "geneva_docs_hooks", ROOT / "docs" / "hooks.py"
    )
    assert spec is not None
    assert spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    source = (ROOT / "docs" / "reference" / "transitions.md").read_text("utf-8")
    page = hooks.on_page_markdown(source, page=None, config=None, files=None)
    reference = transitions_reference()
    assert reference in page
    for entry in transitions.TABLE:
        assert f"### `{entry.name}`" in reference
        assert entry.summary in reference
        assert ", ".join(entry.rules) in reference


def test_read_state_is_checked_instead_of_a_half_applied_write():
    """The prepare phase fails the row it read ``scheduled`` (R-EXE-30)."""
    execution = _execution("skipped")  # a precondition skip that raised halfway
    transitions.apply(
        transitions.PREPARE_FAILED,
        NOW,
        execution=execution,
        read_state=StepExecutionState.SCHEDULED,
    )
    assert (execution.state, execution.outcome) == ("failed", "failed")
    with pytest.raises(InvalidStateTransition, match="it is 'completed'"):
        transitions.apply(
            transitions.PREPARE_FAILED,
            NOW,
            execution=_execution("scheduled"),
            read_state=StepExecutionState.COMPLETED,
        )


def test_the_refusal_names_the_state_and_the_allowed_ones_in_order():
    """Workflow and execution states share spellings; each lists in its own order."""
    with pytest.raises(InvalidStateTransition) as refused:
        transitions.apply(
            transitions.DROP_FOR_STOPPED_WORKFLOW, NOW, workflow=_workflow("ready")
        )
    assert str(refused.value) == (
        "cannot apply 'drop_for_stopped_workflow' to workflow 3: it is 'ready'; "
        "allowed only from 'paused' or 'finished' or 'canceled'"
    )
