"""Bad input to child workflows and results: refused clearly, nothing written
(SPEC §25, R-CHD-01, R-CHD-11..14, R-CHD-21/23, R-CHD-50).

Every call that refuses its input raises before the database is touched: no
child row, no counts row, no result. The checks run in a real step body (the
``Probe`` workflow runs what a test puts in ``PROBES`` and records what it
raised), so the body's transaction commits what it would have written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import step
from flask_geneva.exceptions import CursorSerializationError
from flask_geneva.exceptions import GenevaError
from flask_geneva.exceptions import InvalidStateError
from flask_geneva.exceptions import ResultTooLargeError
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.children.support import children_rows
from tests.engine.children.support import counts_row
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row

#: What the probe's step runs, each with the workflow; what each raised.
PROBES: list[Callable[[Any], Any]] = []
RAISED: list[BaseException | None] = []


class InputLeaf(geneva.Workflow):
    @step
    def work(self):
        pass


class HerolessLeaf(geneva.Workflow):
    may_proceed_without_hero = True

    @step
    def work(self):
        pass


class Probe(geneva.Workflow):
    @step
    def work(self):
        for probe in PROBES:
            try:
                probe(self)
            except Exception as error:  # noqa: BLE001 - recorded for the test
                RAISED.append(error)
            else:
                RAISED.append(None)


class WaitsWithoutUnit(geneva.Workflow):
    @step
    def fan_out(self):
        pass

    @step(wait_for_children=True)
    def collect(self):
        pass


@pytest.fixture(autouse=True)
def _probes():
    PROBES.clear()
    RAISED.clear()
    yield
    PROBES.clear()
    RAISED.clear()


def _run_probes(*probes: Callable[[Any], Any], hero: Any = None) -> Any:
    """Run ``probes`` in one step of a new Probe; return the workflow id."""
    PROBES[:] = probes
    RAISED.clear()
    workflow = Probe.create(hero=hero or make_user("probe@example.com"))
    workflow_id, execution_id = workflow.id, workflow.current_execution.id
    db.session.commit()
    perform_step_execution(execution_id, continue_inline=False)
    db.session.remove()
    assert len(RAISED) == len(probes)
    assert _state(workflow_id) == "finished"
    return workflow_id


def _state(workflow_id: Any) -> str:
    """The stored state (read alone: works without the unit's columns)."""
    table = geneva.Workflow.__table__
    with db.engine.connect() as connection:
        return str(
            connection.scalar(sa.select(table.c.state).where(table.c.id == workflow_id))
        )


def _assert_nothing_written(workflow_id: Any) -> None:
    assert children_rows(workflow_id) == []
    assert counts_row(workflow_id) is None
    assert workflow_row(workflow_id)["result"] is None


# -- where start_child may run (R-CHD-11) -------------------------------------------


def test_start_child_outside_a_step_is_refused(app, geneva_jobs):
    """R-CHD-11: outside a step body, InvalidStateError; nothing written."""
    hero = make_user("outside@example.com")
    parent = Probe.create(hero=hero)
    with pytest.raises(InvalidStateError, match="only in the body of a step"):
        parent.start_child(InputLeaf, hero=hero)
    with pytest.raises(InvalidStateError, match="only in the body of a step"):
        parent.start_children(InputLeaf, [hero])
    db.session.commit()
    _assert_nothing_written(parent.id)


def test_start_child_in_another_workflows_step_is_refused(app, geneva_jobs):
    """R-CHD-11: in the step of workflow A, B.start_child is refused (a child
    is linked to the step execution of its own parent)."""
    other = Probe.create(hero=make_user("other@example.com"))
    other_id = other.id
    db.session.commit()

    def start_on_other(workflow: Any) -> None:
        victim = Probe.get(other_id)
        victim.start_child(InputLeaf, hero=workflow.hero)

    _run_probes(start_on_other)
    assert isinstance(RAISED[0], InvalidStateError)
    _assert_nothing_written(other_id)


# -- keys, parent_close, classes, heroes (R-CHD-11..14) -----------------------------


@pytest.mark.parametrize(
    "key",
    ["", "a\x00b", "k" * 256],
    ids=["empty", "nul", "too_long"],
)
def test_invalid_keys_are_refused(app, geneva_jobs, key):
    """R-CHD-12: a key that is no non-empty str of <= 255 characters without NUL
    is a ValueError naming it; nothing is written."""
    workflow_id = _run_probes(
        lambda wf: wf.start_child(InputLeaf, hero=wf.hero, key=key),
        lambda wf: wf.start_children(InputLeaf, [wf.hero], key=lambda hero: key),
    )
    for error in RAISED:
        assert isinstance(error, ValueError), error
        assert "invalid child key" in str(error)
    _assert_nothing_written(workflow_id)


@pytest.mark.parametrize("value", [7, None, b"bytes", ("a",)], ids=repr)
def test_a_key_callable_returning_no_str_is_refused(app, geneva_jobs, value):
    """R-CHD-12: the callable's value must be a str: ValueError naming it."""
    workflow_id = _run_probes(
        lambda wf: wf.start_children(InputLeaf, [wf.hero], key=lambda hero: value)
    )
    assert isinstance(RAISED[0], ValueError), RAISED[0]
    assert repr(value) in str(RAISED[0])
    _assert_nothing_written(workflow_id)


def test_a_str_key_for_many_children_and_repeated_keys_are_refused(app, geneva_jobs):
    """R-CHD-12: start_children(key="x") and two heroes with one key are
    refused before anything is inserted; a key of 255 characters is fine."""
    second = make_user("second@example.com")
    second_id = second.id

    def repeated(wf: Any) -> None:
        heroes = [wf.hero, db.session.get(User, second_id)]
        wf.start_children(InputLeaf, heroes, key=lambda hero: "same")

    def same_hero_twice(wf: Any) -> None:
        wf.start_children(InputLeaf, [wf.hero, wf.hero])

    workflow_id = _run_probes(
        lambda wf: wf.start_children(InputLeaf, [wf.hero], key="x"),
        repeated,
        same_hero_twice,
    )
    for error in RAISED:
        assert isinstance(error, ValueError), error
    assert "'same'" in str(RAISED[1])
    _assert_nothing_written(workflow_id)
    workflow_id = _run_probes(
        lambda wf: wf.start_child(InputLeaf, hero=wf.hero, key="é" * 255)
    )
    assert RAISED[-1] is None
    assert [row["child_key"] for row in children_rows(workflow_id)] == ["é" * 255]
    assert counts_row(workflow_id)["started"] == 1


@pytest.mark.parametrize("value", ["Cancel", "", None, 1, "terminate"], ids=repr)
def test_an_invalid_parent_close_is_refused(app, geneva_jobs, value):
    """R-CHD-30: parent_close is "cancel" or "abandon": ValueError naming the
    value and the allowed ones."""
    workflow_id = _run_probes(
        lambda wf: wf.start_child(InputLeaf, hero=wf.hero, parent_close=value)
    )
    error = RAISED[0]
    assert isinstance(error, ValueError), error
    assert repr(value) in str(error)
    assert "'cancel'" in str(error)
    assert "'abandon'" in str(error)
    _assert_nothing_written(workflow_id)


@pytest.mark.parametrize(
    "child_cls",
    [User, object, "InputLeaf", geneva.Workflow, None],
    ids=["model", "object", "name", "base", "none"],
)
def test_a_non_workflow_class_is_refused(app, geneva_jobs, child_cls):
    """R-CHD-11: a child must be a declared workflow class: TypeError."""
    workflow_id = _run_probes(lambda wf: wf.start_child(child_cls, hero=wf.hero))
    assert isinstance(RAISED[0], TypeError), RAISED[0]
    _assert_nothing_written(workflow_id)


def test_bad_heroes_and_allow_multiple_are_refused(app, geneva_jobs):
    """R-HERO-06: no hero for a class needing one; a hero that is no saved
    model; allow_multiple not a bool: TypeError, nothing written. A class
    that may proceed without a hero starts one child (default key)."""
    workflow_id = _run_probes(
        lambda wf: wf.start_child(InputLeaf, hero=None),
        lambda wf: wf.start_children(InputLeaf, [wf.hero, None]),
        lambda wf: wf.start_child(InputLeaf, hero=wf.hero, allow_multiple="yes"),
        lambda wf: wf.start_child(InputLeaf, hero=User(email="unsaved@x.org")),
    )
    for error in RAISED:
        assert isinstance(error, TypeError | ValueError), error
    assert "needs a hero" in str(RAISED[0])
    _assert_nothing_written(workflow_id)
    workflow_id = _run_probes(lambda wf: wf.start_child(HerolessLeaf))
    assert RAISED[-1] is None
    assert [row["child_key"] for row in children_rows(workflow_id)] == [
        HerolessLeaf.__geneva_type__
    ]


# -- wait_for_children and on_child_failure at class definition (R-CHD-21/23) -------


@pytest.mark.parametrize("value", [0, -1, "some", "ALL", 1.5, [1], "1"], ids=repr)
def test_invalid_wait_for_children_fails_the_class_definition(value):
    """R-CHD-21: StepConfigurationError naming the value and the allowed ones."""
    with pytest.raises(StepConfigurationError) as raised:

        class BadWait(geneva.Workflow):
            @step(wait_for_children=value)
            def collect(self):
                pass

    message = str(raised.value)
    assert repr(value) in message
    for allowed in ('"all"', '"any"', "positive int"):
        assert allowed in message


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"on_child_failure": "ignore"}, "needs wait_for_children"),
        ({"on_child_failure": "fail", "wait_for_children": False}, "needs"),
        ({"wait_for_children": True, "on_child_failure": "skip"}, "'skip'"),
        ({"wait_for_children": "any", "on_child_failure": True}, "True"),
    ],
    ids=["ignore_alone", "fail_with_false", "unknown", "bool"],
)
def test_invalid_on_child_failure_fails_the_class_definition(options, named):
    """R-CHD-23: on_child_failure without wait_for_children, or not
    "fail"/"ignore": StepConfigurationError naming the value."""
    with pytest.raises(StepConfigurationError, match=named):

        class BadFailure(geneva.Workflow):
            @step(**options)
            def collect(self):
                pass


# -- set_result (R-CHD-01) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "error_type"),
    [
        (object(), CursorSerializationError),
        ({"nan": math.nan}, CursorSerializationError),
        ([math.inf], CursorSerializationError),
        ({1: "int key"}, CursorSerializationError),
        ({"s": "nul\x00"}, CursorSerializationError),
        ({"nul\x00key": 1}, CursorSerializationError),
        ({"set"}, CursorSerializationError),
        ("x" * 131073, ResultTooLargeError),
    ],
    ids=["object", "nan", "inf", "int_key", "nul", "nul_key", "set", "too_large"],
)
def test_set_result_refuses_what_it_cannot_store(app, geneva_jobs, value, error_type):
    """R-CHD-01: a value the codec refuses, a NaN, a NUL, or more than
    GENEVA_MAX_RESULT_SIZE bytes: refused, nothing written (an earlier result
    stays)."""
    workflow_id = _run_probes(
        lambda wf: wf.set_result("kept"), lambda wf: wf.set_result(value)
    )
    assert RAISED[0] is None
    assert isinstance(RAISED[1], error_type), RAISED[1]
    assert Probe.get(workflow_id).result == "kept"


def test_set_result_at_the_size_limit_and_without_a_limit(app, geneva_jobs):
    """R-CHD-01: exactly GENEVA_MAX_RESULT_SIZE bytes is stored; None
    disables the check, but a NaN is still refused."""
    at_limit = "x" * (131072 - 2)  # the JSON string's two quotes
    workflow_id = _run_probes(lambda wf: wf.set_result(at_limit))
    assert RAISED == [None]
    assert Probe.get(workflow_id).result == at_limit
    app.config["GENEVA_MAX_RESULT_SIZE"] = None
    geneva.reload_settings(app)
    RAISED.clear()
    workflow_id = _run_probes(
        lambda wf: wf.set_result("y" * 200_000), lambda wf: wf.set_result(math.nan)
    )
    assert RAISED[0] is None
    assert isinstance(RAISED[1], CursorSerializationError | ValueError), RAISED[1]
    assert Probe.get(workflow_id).result == "y" * 200_000


# -- without the add_child_workflows unit (R-CHD-50) --------------------------------


def test_without_the_unit_start_child_and_set_result_name_it(app, without_unit):
    """R-CHD-50: start_child, start_children, set_result, children and
    child_results raise GenevaError naming the unit; result, parent and
    child_counts are None."""
    without_unit("add_child_workflows")
    workflow_id = _run_probes(
        lambda wf: wf.start_child(InputLeaf, hero=wf.hero),
        lambda wf: wf.start_children(InputLeaf, [wf.hero]),
        lambda wf: wf.set_result(1),
        lambda wf: wf.children(),
        lambda wf: wf.child_results(),
    )
    for error in RAISED:
        assert isinstance(error, GenevaError), error
        assert "add_child_workflows" in str(error)
    workflow = Probe.get(workflow_id)
    assert (workflow.result, workflow.parent, workflow.child_counts) == (
        None,
        None,
        None,
    )


def test_without_the_unit_a_wait_for_children_step_fails_and_pauses(
    app, without_unit, geneva_jobs
):
    """R-CHD-50: the wait is never skipped: the step fails with a
    StepConfigurationError naming the units, the workflow pauses."""
    without_unit("add_child_workflows")
    workflow = WaitsWithoutUnit.create(hero=make_user("nounit@example.com"))
    workflow_id = workflow.id
    db.session.commit()
    geneva_jobs.drain()
    assert _state(workflow_id) == "paused"
    last = execution_rows(workflow_id)[-1]
    assert last["step_name"] == "collect"
    assert last["state"] == "failed"
    assert "add_child_workflows" in last["error_message"]
    assert "add_workflow_signals" in last["error_message"]
    assert [type(error).__name__ for _, error in geneva_jobs.failures] == [
        "StepConfigurationError"
    ]
