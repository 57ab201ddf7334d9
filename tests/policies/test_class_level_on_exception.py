"""Class-level exception policies: declaration, inheritance, resolution (SPEC §9.4)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import HANDLER_MARK
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionHandlerDecorator
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import on_exception
from flask_geneva.policies.resolution import resolve_policy
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class RateLimited(Exception):
    """A pretend vendor rate-limit error."""


class SlowDown(RateLimited):
    """A subclass of RateLimited."""


def policies_of(cls):
    """Return the collected class-level policies of a workflow class."""
    return cls.__geneva_definitions__.exception_policies


def resolve(cls, error):
    """Resolve ``error`` against the class-level policies only."""
    return resolve_policy(None, policies_of(cls), error)


def test_blanket_declaration():
    """on_exception('cancel') registers a blanket declarative policy (R-POL-43)."""

    class Blanket(Workflow):
        exception_policies = [on_exception("cancel")]

    (policy,) = policies_of(Blanket)
    assert policy.action is Action.CANCEL
    assert policy.is_blanket


def test_specific_declaration_with_action_keyword():
    """Matchers with action= register a specific policy (R-POL-43)."""

    class Specific(Workflow):
        exception_policies = [
            on_exception(TimeoutError, action="reattempt", wait=10, max_reattempts=3)
        ]

    (policy,) = policies_of(Specific)
    assert policy.action is Action.REATTEMPT
    assert policy.matchers == (TimeoutError,)
    assert policy.wait == timedelta(seconds=10)
    assert policy.max_reattempts == 3


def test_action_first_with_classes():
    """A first positional action is the action, the rest are matchers (SPEC §15.2)."""
    policy = on_exception("skip", KeyError, ValueError, report="never")
    assert isinstance(policy, ExceptionPolicy)
    assert policy.action is Action.SKIP
    assert policy.matchers == (KeyError, ValueError)
    assert policy.report == "never"
    assert on_exception(Action.PAUSE, KeyError).action is Action.PAUSE
    assert on_exception("reattempt!", KeyError).action is Action.REATTEMPT


def test_class_level_reattempt_defaults_to_100():
    """A class-level reattempt policy is capped at 100 unless told (R-POL-04)."""
    assert on_exception("reattempt").max_reattempts == 100
    assert on_exception("reattempt", max_reattempts=None).max_reattempts is None


def test_handler_declaration():
    """@on_exception(...) marks a method as an imperative handler (R-POL-43)."""

    class Handled(Workflow):
        @on_exception(RateLimited, report="never")
        def on_rate_limit(self, error):
            return ("handled", error)

    (policy,) = policies_of(Handled)
    assert not policy.is_declarative
    assert policy.handler == "on_rate_limit"
    assert policy.matchers == (RateLimited,)
    assert policy.report == "never"
    error = RateLimited()
    assert policy.invoke_handler(Handled(), error) == ("handled", error)


def test_handler_decorator_returns_the_original_method():
    """The handler decorator returns the function itself, marked (SPEC §15.2)."""

    def on_error(self, error):
        return "direct"

    decorated = on_exception(KeyError)(on_error)
    assert decorated is on_error
    assert isinstance(getattr(on_error, HANDLER_MARK), ExceptionPolicy)
    assert on_error(None, KeyError()) == "direct"


def test_handler_override_in_subclass_takes_effect():
    """A handler is resolved by name, so a subclass override runs (R-POL-11)."""

    class Parent(Workflow):
        @on_exception()
        def on_error(self, error):
            return "parent"

    class Child(Parent):
        def on_error(self, error):
            return "child"

    (policy,) = policies_of(Child)
    assert policy.is_blanket
    assert policy.invoke_handler(Child(), KeyError()) == "child"


def test_without_action_on_exception_returns_a_decorator():
    """Without an action on_exception is a decorator, not a policy (SPEC §15.2)."""
    assert isinstance(on_exception(KeyError), ExceptionHandlerDecorator)
    assert isinstance(on_exception(), ExceptionHandlerDecorator)


def test_non_exception_classes_are_rejected():
    """A matcher class that is not an Exception subclass is rejected (R-POL-05)."""
    with pytest.raises(StepConfigurationError, match="Exception subclass"):
        on_exception(int, action="pause")
    with pytest.raises(StepConfigurationError, match="Exception subclass"):
        on_exception(KeyboardInterrupt)


def test_strings_are_wrapped_lazily():
    """A non-action string is a lazy matcher, not imported at declaration (R-POL-05)."""
    policy = on_exception("vendor_pkg_not_installed.errors.Busy", action="pause")
    assert policy.matchers == ("vendor_pkg_not_installed.errors.Busy",)
    assert not policy.captures(RuntimeError())


def test_custom_matchers_are_accepted():
    """A predicate is accepted as a matcher (R-POL-05)."""
    policy = on_exception(
        lambda error: getattr(error, "retryable", False), action="skip"
    )
    error = RuntimeError()
    assert not policy.captures(error)
    error.retryable = True
    assert policy.captures(error)


def test_action_given_twice_is_rejected():
    """An action both positionally and by keyword is rejected (R-POL-43)."""
    with pytest.raises(StepConfigurationError, match="action given twice"):
        on_exception("cancel", KeyError, action="pause")


def test_action_after_matchers_is_rejected():
    """An action name after a matcher is rejected, not taken as a matcher (R-POL-43)."""
    with pytest.raises(StepConfigurationError, match="must be the first positional"):
        on_exception(KeyError, "cancel")


@pytest.mark.parametrize(
    "options", [{"wait": 3}, {"max_reattempts": 2}, {"terminal_action": "cancel"}]
)
def test_action_options_without_action_are_rejected(options):
    """wait, max_reattempts and terminal_action need an action (R-POL-43)."""
    with pytest.raises(StepConfigurationError, match="requires an action"):
        on_exception(KeyError, **options)


def test_undecorated_handler_decorator_in_list_is_rejected():
    """A bare decorator in exception_policies is rejected (R-POL-43)."""
    with pytest.raises(
        StepConfigurationError, match=r"exception_policies\[0\].*no action"
    ):

        class Broken(Workflow):
            exception_policies = [on_exception(KeyError)]


def test_stray_handler_decorator_attribute_is_rejected():
    """An unapplied handler decorator as a class attribute is rejected (R-POL-43)."""
    with pytest.raises(StepConfigurationError, match="was not applied to a method"):

        class Broken(Workflow):
            @on_exception  # missing parentheses: the method becomes a matcher
            def on_error(self, error):
                pass


@pytest.mark.parametrize("value", [on_exception("pause"), "pause", None])
def test_exception_policies_must_be_a_list(value):
    """exception_policies must be a list or tuple (SPEC §15.2)."""
    with pytest.raises(StepConfigurationError, match="must be a list"):

        class Broken(Workflow):
            exception_policies = value


def test_exception_policy_list_elements_must_be_policies():
    """Each exception_policies element must be an ExceptionPolicy (SPEC §15.2)."""
    with pytest.raises(
        StepConfigurationError, match=r"\[1\].*is not an ExceptionPolicy"
    ):

        class Broken(Workflow):
            exception_policies = [on_exception("pause"), "cancel"]


def test_registration_follows_class_body_order():
    """The list and decorated handlers register where they stand (SPEC §15.2)."""

    class Ordered(Workflow):
        @on_exception(KeyError)
        def first_handler(self, error):
            pass

        exception_policies = [on_exception("cancel", ValueError), on_exception("skip")]

        @on_exception(TimeoutError)
        def last_handler(self, error):
            pass

    described = [p.handler or p.action for p in policies_of(Ordered)]
    assert described == ["first_handler", "cancel", "skip", "last_handler"]


def test_subclass_inherits_without_mutating_the_parent():
    """Child policies follow the parent's; the parent is unchanged (R-INH-04)."""

    class Parent(Workflow):
        exception_policies = [on_exception("cancel")]

    parent_policies = policies_of(Parent)

    class Child(Parent):
        exception_policies = [on_exception("skip", KeyError)]

    assert policies_of(Child)[0] is parent_policies[0]
    assert [p.action for p in policies_of(Child)] == [Action.CANCEL, Action.SKIP]
    assert policies_of(Parent) == parent_policies
    assert len(policies_of(Parent)) == 1


def test_specific_beats_blanket():
    """A capturing specific policy wins over a later blanket one (R-POL-40)."""

    class Mixed(Workflow):
        exception_policies = [on_exception("skip", KeyError), on_exception("cancel")]

    resolution = resolve(Mixed, KeyError())
    assert resolution.policy.action is Action.SKIP
    assert resolution.source == "class_specific"
    assert resolution.index == 0
    assert resolution.matched_by == "KeyError"
    other = resolve(Mixed, ValueError())
    assert other.policy.action is Action.CANCEL
    assert other.source == "class_blanket"
    assert other.index == 1
    assert other.matched_by is None


def test_most_recent_specific_wins():
    """Among capturing specific policies the last declared wins (R-POL-40)."""

    class Recent(Workflow):
        exception_policies = [
            on_exception("skip", RateLimited),
            on_exception("cancel", SlowDown),
        ]

    assert resolve(Recent, SlowDown()).policy.action is Action.CANCEL
    assert resolve(Recent, RateLimited()).policy.action is Action.SKIP


def test_subclass_blanket_beats_parent_blanket():
    """The subclass's blanket policy is consulted before the parent's (R-POL-40)."""

    class Parent(Workflow):
        exception_policies = [on_exception("cancel")]

    class Child(Parent):
        exception_policies = [on_exception("skip")]

    resolution = resolve(Child, RuntimeError())
    assert resolution.policy.action is Action.SKIP
    assert resolution.index == 1
    assert resolve(Parent, RuntimeError()).policy.action is Action.CANCEL


def test_subclass_specific_beats_parent_blanket_and_specific():
    """Child specific policies come before parent ones of either kind (R-POL-40)."""

    class Parent(Workflow):
        exception_policies = [on_exception("pause", KeyError), on_exception("cancel")]

    class Child(Parent):
        exception_policies = [on_exception("skip", KeyError)]

    assert resolve(Child, KeyError()).policy.action is Action.SKIP
    assert resolve(Child, ValueError()).policy.action is Action.CANCEL


def test_parent_specific_beats_child_blanket():
    """Every specific policy is consulted before any blanket one (R-POL-40)."""

    class Parent(Workflow):
        exception_policies = [on_exception("pause", KeyError)]

    class Child(Parent):
        exception_policies = [on_exception("skip")]

    resolution = resolve(Child, KeyError())
    assert resolution.policy.action is Action.PAUSE
    assert resolution.source == "class_specific"


def test_default_when_nothing_matches():
    """Without a capturing policy the default pause applies (R-POL-40)."""

    class OnlySpecific(Workflow):
        exception_policies = [on_exception("skip", KeyError)]

    resolution = resolve(OnlySpecific, ValueError())
    assert resolution.source == "default"
    assert resolution.policy.action is Action.PAUSE
    assert resolution.index is None
    assert resolution.cap is None


def test_default_when_nothing_is_declared():
    """A class without policies resolves to the default pause (R-POL-40)."""

    class Nothing(Workflow):
        pass

    assert policies_of(Nothing) == ()
    assert resolve(Nothing, RuntimeError()).source == "default"


def test_class_resolution_cap_is_the_policy_max():
    """A class-level policy is capped by its own max_reattempts (R-POL-42)."""

    class Capped(Workflow):
        exception_policies = [on_exception("reattempt", KeyError, max_reattempts=4)]

    assert resolve(Capped, KeyError()).cap == 4


def test_handler_is_resolved_like_a_declarative_policy():
    """Imperative handlers take part in the same precedence (R-POL-40)."""

    class Handled(Workflow):
        exception_policies = [on_exception("cancel")]

        @on_exception(RateLimited)
        def on_rate_limit(self, error):
            pass

    resolution = resolve(Handled, SlowDown())
    assert resolution.policy.handler == "on_rate_limit"
    assert resolution.source == "class_specific"
    assert resolution.policy.handler_name == "on_rate_limit"
