"""Cancel conditions and condition evaluation (SPEC §5.4, R-INH-04)."""

from __future__ import annotations

import pytest

from flask_geneva.dsl.conditions import cancel_if
from flask_geneva.dsl.conditions import describe_condition
from flask_geneva.dsl.conditions import evaluate_cancel_conditions
from flask_geneva.dsl.conditions import evaluate_condition
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def conditions_of(cls):
    """Return the collected cancel conditions of a workflow class."""
    return cls.__geneva_definitions__.cancel_conditions


def hero_archived(workflow):
    """A module-level condition callable."""
    return workflow.archived


class Newsletter(Workflow):
    """A workflow with both kinds of cancel-condition declaration."""

    archived = False
    blocked = False

    cancel_conditions = [hero_archived, "is_blocked"]

    @cancel_if
    def is_spam(self):
        return getattr(self, "spam", False)

    def is_blocked(self):
        return self.blocked


def test_cancel_if_returns_the_original_function():
    """@cancel_if marks the method and returns it unchanged (R-CND-01)."""

    def predicate(self):
        return "direct"

    assert cancel_if(predicate) is predicate
    assert predicate(None) == "direct"


def test_cancel_if_with_arguments_is_rejected():
    """@cancel_if takes no arguments (R-CND-01)."""
    with pytest.raises(StepConfigurationError, match="takes no arguments"):
        cancel_if("is_blocked")


def test_conditions_are_collected_in_class_body_order():
    """The attribute list and @cancel_if methods register in body order (R-CND-01)."""
    assert conditions_of(Newsletter) == (hero_archived, "is_blocked", "is_spam")


def test_conditions_accumulate_parent_first_without_mutating_parent():
    """Child conditions follow the parent's; the parent is unchanged (R-INH-04)."""
    parent_conditions = conditions_of(Newsletter)

    class Child(Newsletter):
        cancel_conditions = [True]

        @cancel_if
        def too_late(self):
            return False

    assert conditions_of(Child) == (
        hero_archived,
        "is_blocked",
        "is_spam",
        True,
        "too_late",
    )
    assert conditions_of(Newsletter) == parent_conditions


def test_first_truthy_condition_is_returned():
    """Evaluation returns the first condition that holds (R-CND-01)."""
    workflow = Newsletter()
    assert evaluate_cancel_conditions(workflow, conditions_of(Newsletter)) is None
    workflow.blocked = True
    assert (
        evaluate_cancel_conditions(workflow, conditions_of(Newsletter)) == "is_blocked"
    )
    workflow.archived = True
    assert (
        evaluate_cancel_conditions(workflow, conditions_of(Newsletter)) is hero_archived
    )


def test_evaluation_stops_at_the_first_truthy_condition():
    """Conditions after the first truthy one are not evaluated (R-CND-01)."""
    calls = []

    def first(workflow):
        calls.append("first")
        return 1

    def second(workflow):
        calls.append("second")
        return True

    assert evaluate_cancel_conditions(object(), [first, second]) is first
    assert calls == ["first"]


@pytest.mark.parametrize(
    ("constant", "holds"),
    [(True, True), (False, False), (None, False), (1, True), (0, False)],
)
def test_constants_count_by_truthiness(constant, holds):
    """A constant condition counts by its truthiness (R-CND-01)."""
    result = evaluate_cancel_conditions(object(), [constant])
    assert (result is not None) is holds


def test_method_name_conditions_use_subclass_overrides():
    """A method-name condition calls the instance's method (R-CND-01, R-INH-03)."""

    class Child(Newsletter):
        def is_blocked(self):
            return True

    assert evaluate_cancel_conditions(Child(), conditions_of(Child)) == "is_blocked"


def test_non_callable_attribute_counts_by_value():
    """A method name naming a plain attribute uses its truthiness (R-CND-02)."""
    workflow = Newsletter()
    assert evaluate_condition(workflow, "archived") is False
    workflow.archived = True
    assert evaluate_condition(workflow, "archived") is True


def test_condition_exceptions_propagate():
    """An exception raised by a condition reaches the caller (R-CND-03)."""

    def broken(workflow):
        raise LookupError("hero gone")

    with pytest.raises(LookupError, match="hero gone"):
        evaluate_cancel_conditions(object(), [broken])


def test_evaluate_condition_result_is_bool():
    """Single conditions evaluate to a bool (R-CND-02)."""
    assert evaluate_condition(object(), lambda wf: "yes") is True
    assert evaluate_condition(object(), lambda wf: "") is False
    assert evaluate_condition(object(), None) is False


def test_describe_condition():
    """Conditions are described by method name, qualified name or repr (R-PDR-04)."""
    assert describe_condition("is_blocked") == "is_blocked"
    assert describe_condition(hero_archived) == "hero_archived"
    assert describe_condition(Newsletter.is_spam) == "Newsletter.is_spam"
    assert describe_condition(lambda wf: True).endswith("<lambda>")
    assert describe_condition(True) == "True"


@pytest.mark.parametrize("value", ["is_blocked", None, 5])
def test_cancel_conditions_must_be_a_list(value):
    """cancel_conditions must be a list or tuple (SPEC §15.2)."""
    with pytest.raises(StepConfigurationError, match="must be a list"):

        class Broken(Workflow):
            cancel_conditions = value


def test_cancel_condition_strings_must_be_method_names():
    """A string cancel condition must be a method name (R-CND-01)."""
    with pytest.raises(
        StepConfigurationError, match=r"invalid method name 'hero\.gone'"
    ):

        class Broken(Workflow):
            cancel_conditions = ["hero.gone"]
