"""``priority`` at class and step level is the ``priority`` job option (R-PRI-01).

Pure DSL: the spellings give the same collected job options, both spellings at
one level with different values are refused naming both, and the value is
checked as the job option's (an int, not a bool). The instance level
(``create(priority=...)``) and the publications are in
``tests/models/test_create_priority.py``.
"""

from __future__ import annotations

import pytest

from flask_geneva.dsl.decorators import resumable_step
from flask_geneva.dsl.decorators import step
from flask_geneva.dsl.job_options import fold_priority
from flask_geneva.dsl.job_options import priority_of
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def _definitions(cls):
    return cls.__geneva_definitions__


def _step_options(cls, name):
    return dict(_definitions(cls).steps.named(name).job_options)


# -- class level ---------------------------------------------------------------------


def test_the_class_attribute_is_the_class_job_option():
    """``priority = 5`` collects as ``default_job_options={"priority": 5}``, merged
    with the other class options (R-PRI-01)."""

    class ByAttribute(Workflow):
        priority = 5
        default_job_options = {"queue": "mail"}

    class ByOptions(Workflow):
        default_job_options = {"queue": "mail", "priority": 5}

    assert dict(_definitions(ByAttribute).default_job_options) == {
        "queue": "mail",
        "priority": 5,
    }
    assert dict(_definitions(ByAttribute).default_job_options) == dict(
        _definitions(ByOptions).default_job_options
    )


def test_the_class_attribute_after_the_options_in_the_body_is_folded_too():
    """The order of the two attributes in the class body does not matter (R-PRI-01)."""

    class OptionsFirst(Workflow):
        default_job_options = {"queue": "mail", "priority": 2}
        priority = 2

    assert dict(_definitions(OptionsFirst).default_job_options) == {
        "queue": "mail",
        "priority": 2,
    }


def test_a_subclass_attribute_overrides_the_parents_class_priority():
    """A subclass's ``priority`` is its own class level, merged over the parent's
    class options key by key (R-PRI-01, R-INH-04)."""

    class Parent(Workflow):
        default_job_options = {"queue": "mail", "priority": 1}

    class Child(Parent):
        priority = 8

    class Grandchild(Child):
        pass

    assert dict(_definitions(Child).default_job_options) == {
        "queue": "mail",
        "priority": 8,
    }
    assert dict(_definitions(Grandchild).default_job_options)["priority"] == 8
    assert dict(_definitions(Parent).default_job_options)["priority"] == 1


def test_a_priority_of_none_is_unset():
    """``priority = None`` sets nothing and overrides nothing (R-PRI-01, R-JOB-05)."""

    class Parent(Workflow):
        priority = 4

    class Child(Parent):
        priority = None

    assert dict(_definitions(Child).default_job_options) == {"priority": 4}


def test_both_class_spellings_with_different_values_are_refused():
    """``priority = 5`` with ``default_job_options={"priority": 3}`` is a
    StepConfigurationError naming both values (R-PRI-01)."""
    with pytest.raises(StepConfigurationError) as raised:

        class Twice(Workflow):
            priority = 5
            default_job_options = {"priority": 3}

    message = str(raised.value)
    assert message.startswith("Twice: two different priorities")
    assert "priority = 5" in message
    assert "default_job_options={'priority': 3}" in message


def test_both_class_spellings_with_the_same_value_are_accepted():
    """The same priority given both ways is one value (R-PRI-01)."""

    class Same(Workflow):
        priority = 3
        default_job_options = {"priority": 3}

    assert dict(_definitions(Same).default_job_options) == {"priority": 3}


@pytest.mark.parametrize(
    "value", [True, "high", 2.5, property(lambda self: 1), lambda self: 1]
)
def test_a_class_priority_that_is_not_an_int_is_refused(value):
    """The class attribute is checked as the job option: an int or None, bools
    refused; a method or property cannot give a per-instance priority (R-PRI-01,
    R-JOB-05)."""
    with pytest.raises(StepConfigurationError) as raised:
        type("BadPriority", (Workflow,), {"priority": value})
    message = str(raised.value)
    assert message.startswith("BadPriority.priority: must be an int or None")
    assert repr(value) in message
    assert "create(priority=...)" in message


def test_a_step_method_named_priority_stays_a_step():
    """A ``@step`` method called ``priority`` is a step, not the option (R-PRI-01)."""

    class Named(Workflow):
        @step
        def priority(self):
            pass

    assert _definitions(Named).steps.names == ["priority"]
    assert dict(_definitions(Named).default_job_options) == {}


# -- step level ----------------------------------------------------------------------


def test_the_step_keyword_is_the_step_job_option():
    """``@step(priority=7)`` collects as ``job_options={"priority": 7}``, with the
    other job options kept (R-PRI-01)."""

    class Steps(Workflow):
        @step(priority=7, job_options={"queue": "fast"})
        def by_keyword(self):
            pass

        @step(job_options={"queue": "fast", "priority": 7})
        def by_options(self):
            pass

    assert _step_options(Steps, "by_keyword") == {"queue": "fast", "priority": 7}
    assert _step_options(Steps, "by_keyword") == _step_options(Steps, "by_options")


def test_every_step_declaration_takes_the_keyword():
    """``@resumable_step``, ``step.anonymous``, ``step.repeat`` and
    ``resumable_step.anonymous`` accept ``priority=`` too (R-PRI-01)."""

    class Everywhere(Workflow):
        @resumable_step(priority=1)
        def chunks(self, it):
            pass

        inline = step.anonymous(lambda wf: None, priority=2)
        repeated = step.repeat(2, lambda wf: None, priority=3)
        resumable_inline = resumable_step.anonymous(lambda wf, it: None, priority=4)

    priorities = [
        dict(definition.job_options).get("priority")
        for definition in _definitions(Everywhere).steps
    ]
    assert priorities == [1, 2, 3, 3, 4]


@pytest.mark.parametrize(
    "declare",
    [
        lambda body: step(priority=5, job_options={"priority": 3})(body),
        lambda body: resumable_step(priority=5, job_options={"priority": 3})(body),
        lambda body: step.anonymous(
            body, name="x", priority=5, job_options={"priority": 3}
        ),
        lambda body: step.anonymous(body, priority=5, job_options=[("priority", 3)]),
        lambda body: step.repeat(2, "poll", priority=5, job_options={"priority": 3}),
    ],
)
def test_both_step_spellings_with_different_values_are_refused(declare):
    """``priority=5`` with ``job_options={"priority": 3}`` on one step is a
    StepConfigurationError naming both values (R-PRI-01)."""

    def body(self, it=None):
        pass

    with pytest.raises(StepConfigurationError) as raised:
        declare(body)
    message = str(raised.value)
    assert "two different priorities" in message
    assert "priority=5" in message
    assert "job_options={'priority': 3}" in message


def test_both_step_spellings_with_the_same_value_are_accepted():
    """One value given both ways on a step is accepted (R-PRI-01)."""

    class Same(Workflow):
        @step(priority=3, job_options={"priority": 3, "queue": "q"})
        def work(self):
            pass

    assert _step_options(Same, "work") == {"priority": 3, "queue": "q"}


@pytest.mark.parametrize("value", [True, "9", 1.0])
def test_a_step_priority_that_is_not_an_int_is_refused(value):
    """The keyword is checked as the job option (int, not bool), naming the step,
    the value and its type (R-PRI-01, R-JOB-05)."""
    with pytest.raises(StepConfigurationError) as raised:

        class Bad(Workflow):
            @step(priority=value)
            def work(self):
                pass

    message = str(raised.value)
    assert message.startswith("Step 'work': job option 'priority' must be an int")
    assert f"{value!r} ({type(value).__name__})" in message


def test_a_misspelt_priority_keyword_names_priority():
    """``@step(priorty=1)`` suggests ``priority`` (R-DEF-23 knows it)."""
    with pytest.raises(StepConfigurationError) as raised:
        step(priorty=1)  # type: ignore[call-overload]
    assert "unknown option 'priorty' (did you mean 'priority'?)" in str(raised.value)
    assert "priority" in str(raised.value).split("allowed: ")[1].split(", ")


def test_the_merge_order_stays_class_instance_step():
    """The step's priority beats the class's, whichever spelling (R-JOB-02)."""

    class Merged(Workflow):
        priority = 1

        @step(priority=9)
        def urgent(self):
            pass

    definitions = _definitions(Merged)
    from flask_geneva.dsl.job_options import merge_job_options

    step_options = definitions.steps.named("urgent").job_options
    assert merge_job_options(definitions.default_job_options, {}, step_options) == {
        "priority": 9
    }
    assert merge_job_options(definitions.default_job_options, {"priority": 5}, {}) == {
        "priority": 5
    }


# -- helpers -------------------------------------------------------------------------


def test_fold_priority_leaves_options_alone_without_a_priority():
    """No priority given: the options are returned as they came (R-PRI-01)."""
    options = {"queue": "q"}
    assert (
        fold_priority(options, None, context="c", keyword="priority=", options_name="o")
        is options
    )


def test_priority_of_defaults_to_zero():
    """An unset priority means 0 inside geneva (R-PRI-02)."""
    assert priority_of({}) == 0
    assert priority_of({"priority": -3}) == -3
