"""Step ordering and the step collection API (SPEC §5.2, R-INH-02)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.dsl.decorators import step
from flask_geneva.dsl.ordering import StepCollection
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import Action
from tests.dsl.base import Workflow as BaseWorkflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class Workflow(BaseWorkflow):
    """The stand-in base with a shared method body."""

    def work(self):
        """Shared body for method-name steps."""


class Sym:
    """A non-str name, like a Ruby symbol: only str() gives the name."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


def steps_of(cls):
    """Return the collected steps of a workflow class."""
    return cls.__geneva_definitions__.steps


class ABC(Workflow):
    """Three unpositioned steps a, b, c."""

    _a = step.anonymous("work", name="a")
    _b = step.anonymous("work", name="b")
    _c = step.anonymous("work", name="c")


def test_unpositioned_steps_keep_registration_order():
    """Steps without before/after run in registration order (R-ORD-01)."""
    assert steps_of(ABC).names == ["a", "b", "c"]


@pytest.mark.parametrize("target", ["b", Sym("b")])
def test_insert_before_by_name_or_symbol(target):
    """before inserts directly before its target, given as str or str()-able
    (R-ORD-01, R-DEF-02)."""

    class Before(ABC):
        _x = step.anonymous("work", name="x", before=target)

    assert steps_of(Before).names == ["a", "x", "b", "c"]


@pytest.mark.parametrize("target", ["b", Sym("b")])
def test_insert_after_by_name_or_symbol(target):
    """after inserts directly after its target (R-ORD-01)."""

    class After(ABC):
        _x = step.anonymous("work", name="x", after=target)

    assert steps_of(After).names == ["a", "b", "x", "c"]


def test_insert_before_the_first_step():
    """A step placed before the first one becomes first (R-ORD-01)."""

    class First(ABC):
        _x = step.anonymous("work", name="x", before="a")

    assert steps_of(First).names == ["x", "a", "b", "c"]
    assert steps_of(First).first.name == "x"


def test_insert_after_the_last_step():
    """A step placed after the last one becomes last (R-ORD-01)."""

    class Last(ABC):
        _x = step.anonymous("work", name="x", after="c")

    assert steps_of(Last).names == ["a", "b", "c", "x"]
    assert steps_of(Last).last.name == "x"


def test_multiple_insertions_of_anonymous_steps():
    """Positioned anonymous steps land around their targets (R-ORD-01, R-DEF-03)."""

    class Many(Workflow):
        _one = step.anonymous("work")
        _two = step.anonymous("work")
        _three = step.anonymous("work", before="step_2")
        _four = step.anonymous("work", after="step_2")

    assert steps_of(Many).names == ["step_1", "step_3", "step_2", "step_4"]


def test_waits_and_options_survive_reordering():
    """Reordering keeps each step's own options (R-ORD-01)."""

    class Options(Workflow):
        @step(wait=10)
        def first(self):
            pass

        @step(wait=timedelta(days=2), skip_if=True, on_exception="skip", before="first")
        def zeroth(self):
            pass

    steps = steps_of(Options)
    assert steps.names == ["zeroth", "first"]
    assert steps[0].wait == timedelta(days=2)
    assert steps[0].skip_if is True
    assert steps[0].on_exception is Action.SKIP
    assert steps[1].wait == timedelta(seconds=10)


def test_method_bodies_anonymous_names_and_options_mix():
    """Method steps, anonymous steps and positioned steps combine (R-ORD-01)."""

    class Mixed(Workflow):
        @step
        def start(self):
            pass

        _middle = step.anonymous("work", wait=5)

        @step(after="start", skip_if="start")
        def early(self):
            pass

        @step
        def end(self):
            pass

    assert steps_of(Mixed).names == ["start", "early", "step_2", "end"]
    assert steps_of(Mixed).named("step_2").wait == timedelta(seconds=5)


def test_subclass_steps_can_be_positioned_relative_to_parent_steps():
    """A subclass step may go before or after an inherited step (R-INH-02)."""

    class Child(ABC):
        _x = step.anonymous("work", name="x", before="a")
        _y = step.anonymous("work", name="y", after="b")

    assert steps_of(Child).names == ["x", "a", "b", "y", "c"]
    assert steps_of(ABC).names == ["a", "b", "c"]


def test_two_steps_after_the_same_target_end_up_in_reverse_order():
    """Steps both placed after x appear in reverse registration order (R-ORD-02)."""

    class Reverse(Workflow):
        _x = step.anonymous("work", name="x")
        _first = step.anonymous("work", name="first", after="x")
        _second = step.anonymous("work", name="second", after="x")
        _z = step.anonymous("work", name="z")

    assert steps_of(Reverse).names == ["x", "second", "first", "z"]


def test_positioned_step_may_reference_an_earlier_positioned_step():
    """A positioned step can target an earlier positioned step (R-ORD-02)."""

    class Chain(ABC):
        _x = step.anonymous("work", name="x", after="a")
        _y = step.anonymous("work", name="y", after="x")
        _w = step.anonymous("work", name="w", before="x")

    assert steps_of(Chain).names == ["a", "w", "x", "y", "b", "c"]


def test_several_positioned_steps_apply_in_definition_order():
    """Positioned steps are inserted one by one in registration order (R-ORD-01)."""

    class Several(ABC):
        _p = step.anonymous("work", name="p", before="c")
        _q = step.anonymous("work", name="q", before="c")

    assert steps_of(Several).names == ["a", "b", "p", "q", "c"]


def test_unpositioned_steps_registered_after_positioned_ones_come_first():
    """Unpositioned steps are laid out before any insertion (R-ORD-01)."""

    class Layout(Workflow):
        _a = step.anonymous("work", name="a")
        _b = step.anonymous("work", name="b", after="a")
        _c = step.anonymous("work", name="c")

    assert steps_of(Layout).names == ["a", "b", "c"]


def test_before_and_after_together_are_rejected():
    """A step cannot name both before and after (R-DEF-07)."""
    with pytest.raises(
        StepConfigurationError, match="cannot specify both before and after"
    ):

        class Both(ABC):
            _x = step.anonymous("work", before="a", after="b")


@pytest.mark.parametrize("option", ["before", "after"])
def test_unknown_reference_is_rejected(option):
    """A reference to an undefined step is rejected with context (R-DEF-07)."""
    with pytest.raises(StepConfigurationError) as excinfo:

        class Unknown(ABC):
            _x = step.anonymous("work", name="x", **{option: "nope"})

    message = str(excinfo.value)
    assert f"{option}='nope'" in message
    assert "'x'" in message
    assert "only already-defined steps can be referenced" in message


def test_next_after():
    """next_after walks the execution order (R-ORD-03)."""

    class Ordered(ABC):
        _x = step.anonymous("work", name="x", before="a")

    steps = steps_of(Ordered)
    assert steps.next_after(None).name == "x"
    assert steps.next_after("x").name == "a"
    assert steps.next_after(Sym("a")).name == "b"
    assert steps.next_after("c") is None
    assert steps.next_after("unknown") is None


def test_previous_before():
    """previous_before walks backwards; None at the start (R-ORD-04)."""

    class Ordered(ABC):
        _x = step.anonymous("work", name="x", after="c")

    steps = steps_of(Ordered)
    assert steps.previous_before("x").name == "c"
    assert steps.previous_before(Sym("b")).name == "a"
    assert steps.previous_before("a") is None
    assert steps.previous_before(None) is None
    assert steps.previous_before("unknown") is None


def test_named_and_membership():
    """named() and ``in`` look steps up by str()-converted name (R-ORD-05)."""
    steps = steps_of(ABC)
    assert steps.named("b") is steps[1]
    assert steps.named(Sym("c")) is steps[2]
    assert steps.named("unknown") is None
    assert steps.named(None) is None
    assert "a" in steps
    assert Sym("a") in steps
    assert "unknown" not in steps
    assert None not in steps


def test_sequence_protocol_follows_execution_order():
    """Indexing, len, iteration, first, last and names follow the order (R-ORD-05)."""

    class Ordered(ABC):
        _x = step.anonymous("work", name="x", before="b")

    steps = steps_of(Ordered)
    assert len(steps) == 4
    assert [definition.name for definition in steps] == ["a", "x", "b", "c"]
    assert steps[1].name == "x"
    assert steps[-1].name == "c"
    assert [definition.name for definition in steps[1:3]] == ["x", "b"]
    assert steps.first.name == "a"
    assert steps.last.name == "c"
    assert steps.names == ["a", "x", "b", "c"]
    assert [definition.name for definition in steps.registered] == ["a", "b", "c", "x"]


def test_empty_collection():
    """An empty collection has no first, last or next step (R-ORD-03, R-ORD-05)."""
    steps = StepCollection()
    assert len(steps) == 0
    assert steps.first is None
    assert steps.last is None
    assert steps.next_after(None) is None
    assert steps.names == []


def test_order_is_computed_once():
    """The ordered tuple is computed once and cached (R-DEF-17)."""
    steps = steps_of(ABC)
    assert steps.ordered is steps.ordered


def test_membership_does_not_compute_the_order():
    """``in`` and named() work without computing the order (R-ORD-05)."""
    broken = step.anonymous("work", name="b", after="missing").build()
    steps = StepCollection([broken])
    assert "b" in steps
    assert steps.named("b") is broken
    with pytest.raises(StepConfigurationError, match="after='missing'"):
        steps.names  # noqa: B018 - the property access computes the order


def test_collection_rejects_duplicate_names():
    """A collection cannot hold two steps with one name (R-DEF-02)."""
    definition = step.anonymous("work", name="a").build()
    with pytest.raises(StepConfigurationError, match="'a' is defined twice"):
        StepCollection([definition, definition])
