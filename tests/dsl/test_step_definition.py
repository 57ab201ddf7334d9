"""Step declarations and their validation (SPEC §5.1, §5.3, §15.2)."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta

import pytest

from flask_geneva.dsl.decorators import resumable_step
from flask_geneva.dsl.decorators import step
from flask_geneva.dsl.definitions import STEP_MARK
from flask_geneva.dsl.definitions import StepSpec
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.resolution import resolve_policy
from tests.dsl.base import Workflow as BaseWorkflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

RESERVED = frozenset({"pause", "cancel", "skip", "steps", "hero", "logger"})


class Workflow(BaseWorkflow):
    """The stand-in base with the real reserved names (R-DEF-18)."""

    reserved_names = RESERVED


def steps_of(cls):
    """Return the collected steps of a workflow class."""
    return cls.__geneva_definitions__.steps


def single_step(**options):
    """Define a one-step workflow with ``options`` and return its definition."""

    class Single(Workflow):
        @step(**options)
        def work(self):
            pass

    return steps_of(Single).named("work")


def test_step_without_body_is_rejected():
    """A step with neither body nor method name is rejected (R-DEF-01)."""
    with pytest.raises(
        StepConfigurationError, match="requires either a body or a method name"
    ):
        step.anonymous(None)


def test_inline_body_is_called_with_the_workflow():
    """An inline callable body receives the workflow (R-DEF-01)."""

    class Inline(Workflow):
        _only = step.anonymous(lambda self: ("ran", self))

    workflow = Inline()
    definition = steps_of(Inline).first
    assert definition.method_name is None
    assert definition.invoke(workflow) == ("ran", workflow)


def test_method_name_body_is_called_on_the_workflow():
    """A method-name body is looked up on the instance (R-DEF-01, R-INH-03)."""

    class Named(Workflow):
        _only = step.anonymous("poll")

        def poll(self):
            return "polled"

    definition = steps_of(Named).first
    assert definition.method_name == "poll"
    assert definition.body is None
    assert definition.invoke(Named()) == "polled"


def test_step_decorator_returns_the_original_marked_function():
    """@step returns the function itself, marked with a StepSpec (SPEC §15.2)."""

    def mark_sending(self):
        return "direct"

    decorated = step(mark_sending)
    assert decorated is mark_sending
    assert isinstance(getattr(mark_sending, STEP_MARK), StepSpec)
    assert decorated(None) == "direct"


def test_called_step_decorator_also_returns_the_original_function():
    """@step(...) returns the function itself as well (SPEC §15.2)."""

    def deliver(self):
        return "direct"

    assert step(wait=5)(deliver) is deliver
    assert getattr(deliver, STEP_MARK).wait == timedelta(seconds=5)


def test_decorated_method_stays_callable_on_instances():
    """A decorated step method remains a normal method (SPEC §15.2)."""

    class Plain(Workflow):
        @step
        def mark_sending(self):
            return "called"

    assert Plain().mark_sending() == "called"


def test_anonymous_returns_a_step_spec():
    """step.anonymous returns a StepSpec without a name (SPEC §15.2)."""
    spec = step.anonymous("poll", wait=3)
    assert isinstance(spec, StepSpec)
    assert spec.name is None
    assert spec.wait == timedelta(seconds=3)


def test_anonymous_steps_are_numbered_after_a_named_step():
    """A named step then two anonymous ones gives step_2 and step_3 (R-DEF-03)."""

    class Numbered(Workflow):
        @step
        def first(self):
            pass

        _a = step.anonymous("first")
        _b = step.anonymous("first")

    assert steps_of(Numbered).names == ["first", "step_2", "step_3"]


def test_anonymous_steps_are_numbered_after_inherited_ones():
    """Anonymous steps count inherited steps too (R-DEF-03)."""

    class Parent(Workflow):
        _a = step.anonymous("work")
        _b = step.anonymous("work")

        def work(self):
            pass

    class Child(Parent):
        _c = step.anonymous("work")

    assert steps_of(Child).names == ["step_1", "step_2", "step_3"]


def test_duplicate_step_names_are_rejected():
    """Two steps with one name are rejected naming the class (R-DEF-02)."""
    with pytest.raises(
        StepConfigurationError, match="'work' is already defined in Dup"
    ):

        class Dup(Workflow):
            @step
            def work(self):
                pass

            @step(name="work")
            def other(self):
                pass


def test_a_second_decorated_method_of_the_same_name_is_rejected():
    """Two ``@step def work`` in one class body: Python keeps only the second
    function, so without a check the class would silently have one step 'work'
    running the second body; it is refused, naming both lines (R-DEF-02)."""
    with pytest.raises(StepConfigurationError) as refused:

        class Twice(Workflow):
            @step
            def work(self):
                pass

            @step
            def work(self):  # noqa: F811 - the mistake under test
                pass

    message = str(refused.value)
    assert "'work' is already defined in Twice" in message
    assert message.count("test_step_definition.py:") == 2


def test_a_plain_method_replacing_a_decorated_step_is_rejected():
    """A later undecorated ``def work`` would make the step vanish (R-DEF-02)."""
    with pytest.raises(StepConfigurationError, match="'work' is already defined"):

        class Replaced(Workflow):
            @step(wait=timedelta(hours=1))
            def work(self):
                pass

            def work(self):  # noqa: F811 - the mistake under test
                pass


def test_a_wrapped_step_and_an_overridden_parent_body_are_accepted():
    """A decorator over ``@step`` that keeps the function's attributes
    (``functools.wraps``), and a subclass overriding the parent's body method
    without re-declaring it (R-INH-03), are not replacements."""
    import functools

    def logged(func):
        @functools.wraps(func)
        def wrapper(self):
            return func(self)

        return wrapper

    class Wrapped(Workflow):
        @logged
        @step
        def work(self):
            pass

    class Child(Wrapped):
        def work(self):
            pass

    assert steps_of(Wrapped).names == ["work"]
    assert steps_of(Child).names == ["work"]


def test_names_are_converted_with_str_before_the_duplicate_check():
    """Non-str names are str()-converted, so 1 and '1' collide (R-DEF-02)."""

    class Converted(Workflow):
        @step(name=1)
        def one(self):
            pass

    assert steps_of(Converted).names == ["1"]
    with pytest.raises(StepConfigurationError, match="already defined"):

        class Collide(Workflow):
            @step(name=1)
            def one(self):
                pass

            @step(name="1")
            def uno(self):
                pass


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("", "invalid step name ''"),
        ("x" * 256, "(256 characters)"),
        ("bad\x00name", "invalid step name 'bad\\x00name'"),
    ],
)
def test_step_names_the_columns_cannot_hold_are_rejected_at_definition(name, shown):
    """An empty name, one over 255 characters or with a NUL is refused (R-DEF-02).

    Before, the class was accepted and the name failed only when a row was written
    (a DataError on PostgreSQL/MariaDB), or never could be given back to
    ``flask geneva resume --at``.
    """
    with pytest.raises(StepConfigurationError) as raised:
        single_step(name=name)
    message = str(raised.value)
    assert shown in message
    assert "non-empty str of at most 255 characters and no NUL character" in message
    with pytest.raises(StepConfigurationError, match="invalid step name"):
        step.anonymous(lambda self: None, name=name)


def test_a_step_name_of_255_characters_is_accepted():
    """The longest name the columns hold is accepted (R-DEF-02)."""

    class Longest(Workflow):
        @step(name="x" * 255)
        def work(self):
            pass

    assert steps_of(Longest).names == ["x" * 255]


def test_redefining_an_inherited_step_name_is_rejected():
    """A subclass cannot re-register a parent step name (R-INH-03)."""

    class Parent(Workflow):
        @step
        def work(self):
            pass

    with pytest.raises(
        StepConfigurationError, match="'work' is already defined in Child"
    ):

        class Child(Parent):
            @step
            def work(self):
                pass


def test_overriding_the_body_method_without_reregistering_takes_effect():
    """A subclass method override runs for the inherited step (R-INH-03)."""

    class Parent(Workflow):
        @step
        def work(self):
            return "parent"

    class Child(Parent):
        def work(self):
            return "child"

    definition = steps_of(Child).named("work")
    assert definition.invoke(Child()) == "child"
    assert definition.invoke(Parent()) == "parent"


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        (timedelta(hours=1), timedelta(hours=1)),
        (30, timedelta(seconds=30)),
        (1.5, timedelta(seconds=1.5)),
        (0, timedelta(0)),
        (None, None),
    ],
)
def test_wait_accepts_durations_and_zero(wait, expected):
    """wait takes a timedelta or seconds; 0 is a valid wait (R-DEF-04)."""
    assert single_step(wait=wait).wait == expected


@pytest.mark.parametrize(
    ("wait", "reason"),
    [
        (-1, "wait must be non-negative, got -1"),
        (timedelta(seconds=-1), "wait must be non-negative"),
        (
            "2 days",
            "wait must be a timedelta or a number of seconds, got '2 days' (str)",
        ),
        (True, "got True (bool)"),
        (10**12, "wait must be at most 36500 days (100 years)"),
        (timedelta(days=36501), "wait must be at most 36500 days (100 years)"),
    ],
)
def test_wait_rejects_negative_and_non_durations(wait, reason):
    """Negative, non-duration or date-overflowing (> 100 years) waits are rejected,
    the message saying which of these the value is and what is allowed (R-DEF-04)."""
    with pytest.raises(StepConfigurationError, match="invalid wait value") as excinfo:
        single_step(wait=wait)
    message = str(excinfo.value)
    assert reason in message
    assert "allowed: a timedelta or a number of seconds from 0 to 100 years" in message


@pytest.mark.parametrize("action", ["pause", "cancel", "reattempt", "skip"])
def test_on_exception_accepts_the_four_actions(action):
    """on_exception takes each action and stores it as a policy (R-DEF-08, R-DEF-12)."""
    definition = single_step(on_exception=action)
    assert isinstance(definition.exception_policy, ExceptionPolicy)
    assert definition.exception_policy.action == action
    assert definition.on_exception == action


def test_on_exception_accepts_enum_and_bang():
    """Action members and a trailing '!' are accepted (R-DEF-08)."""
    assert single_step(on_exception=Action.SKIP).on_exception is Action.SKIP
    assert single_step(on_exception="cancel!").on_exception is Action.CANCEL


def test_unset_on_exception_falls_back_to_the_default_pause_policy():
    """Without on_exception the default pause policy applies (R-DEF-12, R-POL-40)."""
    definition = single_step()
    assert definition.exception_policy is None
    assert definition.on_exception is None
    resolution = resolve_policy(definition.exception_policy, (), RuntimeError())
    assert resolution.source == "default"
    assert resolution.policy.action is Action.PAUSE


def test_unknown_on_exception_action_lists_the_valid_ones():
    """An unknown action string is rejected with the four actions (R-DEF-08)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        single_step(on_exception="explode")
    message = str(excinfo.value)
    assert "'explode'" in message
    assert "'pause', 'cancel', 'reattempt', 'skip'" in message


@pytest.mark.parametrize("condition", [lambda self: True, "is_done", True, False, None])
def test_skip_if_accepts_callable_method_name_bool_and_none(condition):
    """skip_if takes a callable, a method name, a bool or None (R-DEF-05)."""
    assert single_step(skip_if=condition).skip_if is condition


@pytest.mark.parametrize("condition", ["hero.archived?", "not done", 42, KeyError])
def test_skip_if_rejects_other_values(condition):
    """Other skip_if values are rejected with the accepted kinds (R-DEF-05)."""
    with pytest.raises(StepConfigurationError, match="invalid skip_if") as excinfo:
        single_step(skip_if=condition)
    assert "must be a callable, method name, boolean, or None" in str(excinfo.value)


def test_run_if_is_accepted():
    """run_if takes the same kinds of values as skip_if (R-DEF-06)."""
    assert single_step(run_if="is_ready").run_if == "is_ready"


def test_skip_if_and_run_if_together_are_rejected():
    """Specifying both skip_if and run_if is rejected (R-DEF-06)."""
    with pytest.raises(
        StepConfigurationError, match="cannot specify both skip_if and run_if"
    ):
        single_step(skip_if=True, run_if=False)


class Conditions:
    """A fake workflow with condition methods."""

    def __init__(self, done):
        self.done = done

    def is_done(self):
        return self.done


@pytest.mark.parametrize(
    ("options", "done", "skipped"),
    [
        ({}, True, False),
        ({"skip_if": None}, True, False),
        ({"skip_if": True}, False, True),
        ({"skip_if": False}, True, False),
        ({"skip_if": "is_done"}, True, True),
        ({"skip_if": "is_done"}, False, False),
        ({"skip_if": lambda wf: wf.done}, True, True),
        ({"skip_if": lambda wf: 0}, True, False),
        ({"run_if": "is_done"}, True, False),
        ({"run_if": "is_done"}, False, True),
        ({"run_if": lambda wf: wf.done}, False, True),
        ({"run_if": True}, False, False),
    ],
)
def test_should_skip_evaluates_skip_if_and_run_if(options, done, skipped):
    """skip_if skips when truthy, run_if when falsy (R-CND-02, R-DEF-06)."""
    assert single_step(**options).should_skip(Conditions(done)) is skipped


def test_skip_condition_is_called_on_the_instance():
    """A method-name condition runs the instance's (overridden) method (R-CND-02)."""

    class Parent(Workflow):
        @step(skip_if="is_done")
        def work(self):
            pass

        def is_done(self):
            return False

    class Child(Parent):
        def is_done(self):
            return True

    definition = steps_of(Child).named("work")
    assert definition.should_skip(Child())
    assert not definition.should_skip(Parent())


def test_skip_condition_description():
    """The skip condition is described for records (R-PDR-04)."""
    assert single_step().skip_condition_description() is None
    assert single_step(skip_if="is_done").skip_condition_description() == "is_done"
    assert single_step(run_if="is_ready").skip_condition_description() == "not is_ready"
    assert single_step(skip_if=True).skip_condition_description() == "True"


def test_before_and_after_together_are_rejected():
    """Specifying both before and after is rejected (R-DEF-07)."""
    with pytest.raises(
        StepConfigurationError, match="cannot specify both before and after"
    ):
        step.anonymous("work", before="a", after="b")


def test_unknown_before_reference_is_rejected_descriptively():
    """An unknown before target names step, target, option and the rule (R-DEF-07)."""
    with pytest.raises(StepConfigurationError) as excinfo:

        class Unknown(Workflow):
            @step(before="missing")
            def work(self):
                pass

    message = str(excinfo.value)
    assert "'work'" in message
    assert "'missing'" in message
    assert "before=" in message
    assert "only already-defined steps can be referenced" in message


def test_forward_after_reference_is_rejected():
    """after may only name a step registered earlier (R-DEF-07)."""
    with pytest.raises(StepConfigurationError, match="after='later'"):

        class Forward(Workflow):
            @step(after="later")
            def work(self):
                pass

            @step
            def later(self):
                pass


def test_steps_are_inherited_and_child_additions_leave_the_parent_alone():
    """A subclass starts with the parent's steps; adding to it never mutates the parent
    (R-INH-01)."""

    class Parent(Workflow):
        @step
        def one(self):
            pass

    parent_definitions = Parent.__geneva_definitions__
    parent_steps = parent_definitions.steps

    class Child(Parent):
        @step
        def two(self):
            pass

    assert steps_of(Child).names == ["one", "two"]
    assert steps_of(Child).named("one") is parent_steps.named("one")
    assert Parent.__geneva_definitions__ is parent_definitions
    assert parent_steps.names == ["one"]
    assert "two" not in parent_steps


def test_extra_options_are_stored():
    """wait, skip_if and on_exception are kept on the definition (R-DEF-04..08)."""
    definition = single_step(wait=60, skip_if="is_done", on_exception="skip")
    assert definition.wait == timedelta(minutes=1)
    assert definition.skip_if == "is_done"
    assert definition.on_exception is Action.SKIP


def test_max_reattempts_defaults_to_100_with_reattempt():
    """The action form reattempt is capped at 100 by default (R-DEF-10)."""
    policy = single_step(on_exception="reattempt").exception_policy
    assert policy.max_reattempts == 100


def test_max_reattempts_is_none_for_other_actions():
    """Non-reattempt actions have no reattempt cap (R-DEF-10)."""
    assert single_step(on_exception="pause").exception_policy.max_reattempts is None


def test_custom_max_reattempts_is_stored():
    """A custom max_reattempts goes into the step policy (R-DEF-09, R-DEF-12)."""
    policy = single_step(on_exception="reattempt", max_reattempts=7).exception_policy
    assert policy.max_reattempts == 7


def test_explicit_none_max_reattempts_means_unlimited():
    """max_reattempts=None with reattempt means unlimited (R-DEF-10)."""
    policy = single_step(on_exception="reattempt", max_reattempts=None).exception_policy
    assert policy.max_reattempts is None


@pytest.mark.parametrize("action", ["pause", "cancel", "skip"])
def test_max_reattempts_is_rejected_with_other_actions(action):
    """max_reattempts needs on_exception reattempt (R-DEF-09)."""
    with pytest.raises(StepConfigurationError, match="on_exception is not reattempt"):
        single_step(on_exception=action, max_reattempts=3)


def test_max_reattempts_is_rejected_without_on_exception():
    """max_reattempts without on_exception is rejected too (R-DEF-09)."""
    with pytest.raises(StepConfigurationError, match="on_exception is not reattempt"):
        single_step(max_reattempts=3)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
def test_max_reattempts_must_be_a_positive_integer(value):
    """0, negatives, non-integers and bools are rejected (R-DEF-09)."""
    with pytest.raises(StepConfigurationError, match="positive integer"):
        single_step(on_exception="reattempt", max_reattempts=value)


@pytest.mark.parametrize("terminal", ["cancel", "skip", "pause", Action.CANCEL])
def test_terminal_action_is_stored_with_reattempt(terminal):
    """terminal_action pause/cancel/skip goes into the policy (R-DEF-11)."""
    policy = single_step(
        on_exception="reattempt", terminal_action=terminal
    ).exception_policy
    assert policy.terminal_action == terminal


def test_terminal_action_defaults_to_pause():
    """Without terminal_action the reattempt policy ends in pause (R-DEF-11)."""
    policy = single_step(on_exception="reattempt").exception_policy
    assert policy.terminal_action is Action.PAUSE


def test_invalid_terminal_action_is_rejected():
    """terminal_action outside pause/cancel/skip is rejected (R-DEF-11)."""
    with pytest.raises(StepConfigurationError, match="'pause', 'cancel', 'skip'"):
        single_step(on_exception="reattempt", terminal_action="reattempt")


def test_terminal_action_is_rejected_without_reattempt():
    """terminal_action needs on_exception reattempt (R-DEF-11)."""
    with pytest.raises(StepConfigurationError, match="terminal_action is only allowed"):
        single_step(on_exception="pause", terminal_action="cancel")


def test_resumable_step_is_marked_resumable_and_receives_it():
    """A resumable step is flagged and its body gets the iteration object (SPEC §10)."""

    class Resumable(Workflow):
        @resumable_step(max_iterations=10, max_runtime=timedelta(minutes=2))
        def deliver(self, it):
            return ("delivered", it)

        @step
        def plain(self):
            return "plain"

    deliver = steps_of(Resumable).named("deliver")
    assert deliver.is_resumable
    assert deliver.max_iterations == 10
    assert deliver.max_runtime == timedelta(minutes=2)
    assert deliver.invoke(Resumable(), "IT") == ("delivered", "IT")
    plain = steps_of(Resumable).named("plain")
    assert not plain.is_resumable
    assert plain.max_iterations is None
    assert plain.invoke(Resumable(), "IT") == "plain"


def test_resumable_step_accepts_every_regular_step_option():
    """@resumable_step takes each option of @step and stores it as @step does, plus
    max_iterations and max_runtime (R-RES-01).
    """
    options = {
        "wait": timedelta(minutes=3),
        "skip_if": "is_done",
        "on_exception": "reattempt",
        "max_reattempts": 4,
        "terminal_action": "skip",
        "after": "first",
        "job_options": {"queue": "bulk", "priority": 2},
        "wait_for": "go",
        "wait_timeout": timedelta(hours=1),
        "on_wait_timeout": "skip",
    }

    class Both(Workflow):
        @step
        def first(self):
            pass

        @step(name="plain_copy", **options)
        def plain(self):
            pass

        @resumable_step(
            name="resumable_copy",
            max_iterations=5,
            max_runtime=timedelta(seconds=30),
            **options,
        )
        def resumable(self, it):
            pass

    plain = steps_of(Both).named("plain_copy")
    resumable = steps_of(Both).named("resumable_copy")
    differing = {
        "name",
        "method_name",
        "body",
        "is_resumable",
        "max_iterations",
        "max_runtime",
        "definition_location",
        "body_location",
    }
    same = [f.name for f in dataclasses.fields(plain) if f.name not in differing]
    # Policies and wait_for have no __eq__: their reprs show every option.
    assert {name: repr(getattr(resumable, name)) for name in same} == {
        name: repr(getattr(plain, name)) for name in same
    }
    assert resumable.on_exception is Action.REATTEMPT
    assert resumable.wait == timedelta(minutes=3)
    assert (resumable.is_resumable, plain.is_resumable) == (True, False)
    assert (resumable.max_iterations, resumable.max_runtime) == (
        5,
        timedelta(seconds=30),
    )
    assert steps_of(Both).names[0] == "first"


def test_resumable_anonymous_inline_body_receives_it():
    """An inline resumable body is called with the workflow and it (SPEC §10)."""

    class Inline(Workflow):
        _walk = resumable_step.anonymous(lambda self, it: it, max_iterations=3)

    definition = steps_of(Inline).first
    assert definition.is_resumable
    assert definition.invoke(Inline(), "IT") == "IT"


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_iterations_must_be_positive_int(value):
    """max_iterations must be a positive int or None (R-DEF-15)."""
    with pytest.raises(StepConfigurationError, match="invalid max_iterations"):
        resumable_step(max_iterations=value)(lambda self, it: None)


@pytest.mark.parametrize("value", [0, -5, timedelta(0), "1m"])
def test_max_runtime_must_be_positive_duration(value):
    """max_runtime must be a positive duration or None (R-DEF-15)."""
    with pytest.raises(StepConfigurationError, match="invalid max_runtime"):
        resumable_step(max_runtime=value)(lambda self, it: None)


def test_regular_steps_do_not_take_resumable_options():
    """max_iterations is a resumable-only option (R-DEF-15, R-DEF-23)."""
    with pytest.raises(StepConfigurationError, match="option of @resumable_step"):
        step(max_iterations=3)  # type: ignore[call-overload]


def test_definition_location_points_at_the_declaration():
    """The declaration's file and line are recorded (R-DEF-16)."""
    line = inspect.currentframe().f_lineno + 1
    spec = step.anonymous("work")

    class Located(Workflow):
        _here = spec

        def work(self):
            pass

    assert spec.definition_location == (__file__, line)
    assert steps_of(Located).first.definition_location == (__file__, line)


def test_decorator_location_is_the_decorator_line():
    """@step(...) records the line of the decorator call (R-DEF-16)."""
    line = inspect.currentframe().f_lineno + 3

    class Located(Workflow):
        @step(wait=1)
        def work(self):
            pass

    assert steps_of(Located).first.definition_location == (__file__, line)


def test_body_location_of_inline_body_and_method():
    """Inline and method bodies record where the function is (R-DEF-16)."""

    def body(self):
        pass

    class Bodies(Workflow):
        _inline = step.anonymous(body)

        @step
        def method(self):
            pass

    inline = steps_of(Bodies).named("step_1")
    assert inline.body_location == (__file__, body.__code__.co_firstlineno)
    assert inline.body_location != inline.definition_location
    method = steps_of(Bodies).named("method")
    assert method.body_location[0] == __file__


def test_method_name_body_has_no_body_location():
    """A method-name string body has no body location (R-DEF-16)."""
    assert step.anonymous("work").body_location is None


def test_step_definitions_are_immutable():
    """A step definition cannot be changed after creation (R-DEF-17)."""
    definition = single_step(wait=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        definition.wait = None  # type: ignore[misc]
    assert definition.wait == timedelta(seconds=5)


@pytest.mark.parametrize("name", ["pause", "steps", "hero"])
def test_reserved_step_names_are_rejected(name):
    """A step name that would shadow a Workflow attribute is rejected (R-DEF-18)."""
    with pytest.raises(StepConfigurationError, match=f"'{name}' is reserved"):

        class Shadow(Workflow):
            _s = step.anonymous("work", name=name)

            def work(self):
                pass


def test_reserved_body_method_names_are_rejected():
    """A body method name of the base Workflow is rejected (R-DEF-18)."""
    with pytest.raises(
        StepConfigurationError, match="body method name 'cancel' is reserved"
    ):

        class Shadow(Workflow):
            _s = step.anonymous("cancel")


def test_decorating_a_reserved_method_is_rejected():
    """Decorating a method named like a flow-control method is rejected (R-DEF-18)."""
    with pytest.raises(StepConfigurationError, match="'pause' is reserved"):

        class Shadow(Workflow):
            @step
            def pause(self):
                pass


def test_step_decorator_rejects_non_functions():
    """@step decorates plain functions only (SPEC §15.2)."""
    with pytest.raises(StepConfigurationError, match="decorates a function"):
        step(staticmethod(lambda: None))


def test_step_decorator_rejects_positional_options():
    """Options are keywords; @step('name') is rejected (SPEC §15.2)."""
    with pytest.raises(StepConfigurationError, match="options as keywords"):
        step("deliver")


def test_a_function_cannot_be_declared_twice():
    """Decorating one function twice is rejected (R-DEF-02)."""

    def work(self):
        pass

    step(work)
    with pytest.raises(StepConfigurationError, match="already declared as a step"):
        step(name="again")(work)


def test_repeat_makes_n_anonymous_steps():
    """step.repeat(n, body) makes n alike anonymous steps (SPEC §15.2)."""

    class Poll(Workflow):
        _now = step.anonymous("poll")
        _quick = step.repeat(3, "poll", wait=20)

        @step
        def give_up(self):
            pass

        def poll(self):
            pass

    steps = steps_of(Poll)
    assert steps.names == ["step_1", "step_2", "step_3", "step_4", "give_up"]
    assert [steps.named(f"step_{n}").wait for n in (2, 3, 4)] == [
        timedelta(seconds=20)
    ] * 3


def test_repeat_rejects_a_name_and_bad_counts():
    """step.repeat creates anonymous steps from a non-negative count (SPEC §15.2)."""
    with pytest.raises(StepConfigurationError, match="name='x' is not allowed"):
        step.repeat(2, "poll", name="x")
    with pytest.raises(StepConfigurationError, match="invalid count -1"):
        step.repeat(-1, "poll")
    with pytest.raises(StepConfigurationError, match="unknown option 'waitt'"):
        step.repeat(2, "poll", waitt=3)


def test_lists_of_specs_are_expanded_in_body_order():
    """A list of StepSpec attributes is expanded where it stands (SPEC §15.2)."""

    class Backoff(Workflow):
        @step
        def start(self):
            pass

        _back = [
            step.anonymous("poll", wait=timedelta(minutes=2**i)) for i in range(1, 4)
        ]

        @step
        def finish_up(self):
            pass

        def poll(self):
            pass

    steps = steps_of(Backoff)
    assert steps.names == ["start", "step_2", "step_3", "step_4", "finish_up"]
    assert steps.named("step_4").wait == timedelta(minutes=8)


def test_lists_mixing_specs_and_other_values_are_rejected():
    """A list holding StepSpec and other objects is rejected (SPEC §15.2)."""
    with pytest.raises(StepConfigurationError, match="must hold only StepSpec"):

        class Mixed(Workflow):
            _mixed = [step.anonymous("poll"), "poll"]


def test_invalid_anonymous_body_is_rejected():
    """A body that is neither callable nor a method name is rejected (R-DEF-01)."""
    with pytest.raises(StepConfigurationError, match="invalid body"):
        step.anonymous(42)
    with pytest.raises(StepConfigurationError, match="invalid body method name"):
        step.anonymous("not a name")
