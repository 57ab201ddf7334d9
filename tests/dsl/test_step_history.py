"""``step.removed`` gravestones and ``step.renamed`` in the DSL (issue 19, R-EVO-01..05)."""

from __future__ import annotations

import pytest

from flask_geneva.dsl.decorators import step
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class Evolved(Workflow):
    @step
    def first(self):
        pass

    step.removed("charge_card")

    @step
    def send_receipt(self):
        pass

    step.renamed("email_receipt", to="send_receipt")
    step.removed("old_last")


def _steps(cls):
    return cls.__geneva_definitions__.steps


def test_gravestones_keep_their_class_body_position():
    """The step after a gravestone is the next defined step after its position;
    navigation lists only defined steps (R-EVO-01, R-EVO-02).
    """
    steps = _steps(Evolved)
    assert steps.names == ["first", "send_receipt"]
    assert steps.removed_names == ("charge_card", "old_last")
    assert steps.next_after("charge_card").name == "send_receipt"
    assert steps.next_after("old_last") is None
    assert steps.previous_before("charge_card").name == "first"
    assert steps.named("charge_card") is None
    assert "charge_card" not in steps
    assert steps.is_known("charge_card")
    assert not steps.is_known("never_existed")


def test_a_renamed_name_resolves_to_its_new_step():
    """named/next_after/contains follow a rename; the display shows both names
    (R-EVO-04).
    """
    steps = _steps(Evolved)
    assert steps.named("email_receipt").name == "send_receipt"
    assert "email_receipt" in steps
    assert steps.next_after("email_receipt") is None
    assert steps.previous_before("email_receipt").name == "first"
    assert steps.display_name("email_receipt") == "send_receipt (was email_receipt)"
    assert steps.display_name("first") == "first"
    assert steps.renames == {"email_receipt": "send_receipt"}


def test_a_gravestone_at_the_start_leads_to_the_first_step():
    """A gravestone before every step: the next step is the first (R-EVO-02)."""

    class StartRemoved(Workflow):
        step.removed("welcome")

        @step
        def only(self):
            pass

    assert _steps(StartRemoved).next_after("welcome").name == "only"


def test_an_assigned_marker_is_registered_once():
    """``x = step.removed(...)`` works like the bare statement (R-EVO-01)."""

    class Assigned(Workflow):
        @step
        def only(self):
            pass

        gone = step.removed("gone")

    assert _steps(Assigned).removed_names == ("gone",)


def test_subclasses_inherit_the_history():
    """A subclass inherits its parent's gravestones and renames (R-INH-01, R-EVO-01)."""

    class Child(Evolved):
        @step
        def extra(self):
            pass

    steps = _steps(Child)
    assert steps.next_after("charge_card").name == "send_receipt"
    assert steps.named("email_receipt").name == "send_receipt"
    assert steps.next_after("old_last").name == "extra"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            "@step\n    def gone(self): pass\n    step.removed('gone')",
            "step.removed('gone'), but a step 'gone' is still defined",
        ),
        (
            "step.removed('gone')\n    @step\n    def gone(self): pass",
            "step.removed('gone'), but a step 'gone' is still defined",
        ),
        (
            "step.renamed('old', to='missing')",
            "no step 'missing' is defined (defined: 'first')",
        ),
        (
            "step.renamed('first', to='first2')",
            "but a step 'first' is still defined; a renamed step keeps only its "
            "new name",
        ),
        (
            "step.removed('gone')\n    step.renamed('old', to='gone')",
            "'gone' is a removed step",
        ),
        (
            "step.renamed('a', to='b')\n    step.renamed('b', to='first')",
            "the renames form a chain 'a' -> 'b' -> 'first'; rename 'a' directly "
            "to 'first'",
        ),
        (
            "step.renamed('a', to='b')\n    step.renamed('b', to='a')",
            "the renames form a cycle 'a' -> 'b' -> 'a'",
        ),
        (
            "step.removed('gone')\n    step.removed('gone')",
            "step.removed('gone') is declared twice",
        ),
        (
            "step.renamed('old', to='first')\n    step.renamed('old', to='first')",
            "step 'old' is renamed twice",
        ),
        (
            "step.removed('old')\n    step.renamed('old', to='first')",
            "step 'old' is both removed and renamed",
        ),
        ("step.removed('')", "the step name must be a non-empty str"),
        ("step.renamed('x', to='x')", "the old and the new name are the same"),
    ],
)
def test_invalid_history_is_refused_at_class_definition(body, fragment):
    """Contradictory declarations raise StepConfigurationError naming the values
    (R-EVO-05).
    """
    source = f"class Bad(Workflow):\n    @step\n    def first(self): pass\n    {body}\n"
    with pytest.raises(StepConfigurationError) as raised:
        exec(source, {"Workflow": Workflow, "step": step})  # noqa: S102
    assert fragment in str(raised.value)


def test_a_declaration_outside_a_class_body_is_refused():
    """step.removed in a function is refused with a hint (R-EVO-05)."""
    with pytest.raises(StepConfigurationError, match="must be written in a workflow"):
        step.removed("gone")


def test_a_subclass_reusing_a_removed_name_is_told_the_gravestone_is_inherited():
    """A subclass step named like its parent's gravestone is refused; the message
    says the gravestone is inherited from a parent class (R-EVO-05, R-INH-01).
    """
    with pytest.raises(StepConfigurationError) as raised:

        class Reuses(Evolved):
            @step
            def charge_card(self):
                pass

    text = str(raised.value)
    assert "Reuses: defines a step 'charge_card'" in text
    assert "a parent class removed that name" in text
    assert "inherited" in text
    assert "give the new step another name" in text
    assert "test_step_history.py" in text  # where the gravestone was declared
