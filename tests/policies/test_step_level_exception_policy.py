"""Step-level exception policies: normalization and resolution (SPEC §5.1, §9.3)."""

from __future__ import annotations

import pytest

from flask_geneva.dsl.decorators import step
from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import PolicyList
from flask_geneva.policies.exception_policy import on_exception
from flask_geneva.policies.resolution import decide
from flask_geneva.policies.resolution import resolve_policy
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class ErrorA(Exception):
    """First kind of error."""


class ErrorB(Exception):
    """Second kind of error."""


TRANSIENT = ExceptionPolicy(
    "reattempt",
    matching=TimeoutError,
    wait=30,
    max_reattempts=5,
    terminal_action="cancel",
)


def single_step(**options):
    """Define a one-step workflow with ``options`` and return its definition."""

    class Single(Workflow):
        @step(**options)
        def work(self):
            pass

    return Single.__geneva_definitions__.steps.named("work")


def test_step_accepts_a_policy_object():
    """A policy object is stored as is and can be shared (R-DEF-08, R-POL-08)."""
    first = single_step(on_exception=TRANSIENT)
    second = single_step(on_exception=TRANSIENT)
    assert first.exception_policy is TRANSIENT
    assert second.exception_policy is TRANSIENT
    assert first.on_exception is Action.REATTEMPT


def test_step_accepts_a_callable_handler():
    """A callable becomes an imperative policy (R-DEF-08, R-DEF-12)."""

    def handler(workflow, error):
        return ("handled", workflow, error)

    definition = single_step(on_exception=handler)
    policy = definition.exception_policy
    assert isinstance(policy, ExceptionPolicy)
    assert policy.handler is handler
    assert policy.is_blanket
    assert definition.on_exception is None
    error = KeyError()
    assert policy.invoke_handler("wf", error) == ("handled", "wf", error)


def test_step_accepts_an_action():
    """An action is converted to a blanket declarative policy (R-DEF-12)."""
    policy = single_step(on_exception="skip").exception_policy
    assert isinstance(policy, ExceptionPolicy)
    assert policy.action is Action.SKIP
    assert policy.is_blanket


def test_step_action_reattempt_carries_max_and_terminal():
    """The reattempt form carries max_reattempts and terminal_action (R-DEF-12)."""
    policy = single_step(
        on_exception="reattempt", max_reattempts=2, terminal_action="skip"
    ).exception_policy
    assert policy.max_reattempts == 2
    assert policy.terminal_action is Action.SKIP


@pytest.mark.parametrize("container", [list, tuple])
def test_step_accepts_a_list_of_policies(container):
    """A list or tuple of policies becomes a PolicyList (R-DEF-08, R-DEF-12)."""
    policies = container([TRANSIENT, ExceptionPolicy("skip")])
    definition = single_step(on_exception=policies)
    assert isinstance(definition.exception_policy, PolicyList)
    assert definition.exception_policy.policies == tuple(policies)
    assert definition.on_exception is None


def test_unset_policy_is_not_explicit():
    """A step without on_exception has no step-level policy (R-DEF-12, R-DEF-13)."""
    definition = single_step()
    assert definition.exception_policy is None
    assert definition.on_exception is None


def test_on_exception_reports_declarative_action_only():
    """on_exception is a single declarative policy's action, else None (R-DEF-13)."""
    assert single_step(on_exception="cancel").on_exception is Action.CANCEL
    assert single_step(on_exception=lambda wf, error: None).on_exception is None
    assert single_step(on_exception=[ExceptionPolicy("cancel")]).on_exception is None


@pytest.mark.parametrize(
    "policy",
    [TRANSIENT, lambda workflow, error: None, [ExceptionPolicy("skip")]],
)
def test_max_reattempts_is_rejected_with_policy_callable_or_list(policy):
    """max_reattempts must be set on the policy itself (R-DEF-09)."""
    with pytest.raises(
        StepConfigurationError, match="set max_reattempts on the policy instead"
    ):
        single_step(on_exception=policy, max_reattempts=3)


@pytest.mark.parametrize("terminal", ["cancel", "skip"])
def test_terminal_action_is_accepted_with_reattempt(terminal):
    """terminal_action is accepted with the action reattempt (R-DEF-11)."""
    policy = single_step(
        on_exception="reattempt", terminal_action=terminal
    ).exception_policy
    assert policy.terminal_action == terminal


@pytest.mark.parametrize("action", ["pause", "cancel", "skip"])
def test_terminal_action_is_rejected_with_other_actions(action):
    """terminal_action with a non-reattempt action is rejected (R-DEF-11)."""
    with pytest.raises(StepConfigurationError, match="on_exception is not reattempt"):
        single_step(on_exception=action, terminal_action="cancel")


@pytest.mark.parametrize("policy", [TRANSIENT, lambda workflow, error: None])
def test_terminal_action_is_rejected_with_policy_objects(policy):
    """terminal_action belongs on the policy object (R-DEF-11)."""
    with pytest.raises(
        StepConfigurationError, match="set terminal_action on the policy"
    ):
        single_step(on_exception=policy, terminal_action="cancel")


@pytest.mark.parametrize("value", [42, 1.5, KeyError, {"action": "pause"}, object()])
def test_invalid_on_exception_types_are_rejected(value):
    """Other on_exception types are rejected listing what is accepted (R-DEF-08)."""
    with pytest.raises(StepConfigurationError, match="invalid on_exception") as excinfo:
        single_step(on_exception=value)
    assert "ExceptionPolicy" in str(excinfo.value)


def test_list_with_a_non_policy_is_rejected():
    """Every list element must be an ExceptionPolicy (R-DEF-08)."""
    with pytest.raises(StepConfigurationError, match="element #1: 'skip'"):
        single_step(on_exception=[TRANSIENT, "skip"])


def test_step_level_decorator_object_is_rejected():
    """An on_exception(...) handler decorator is not a step-level policy (R-DEF-08)."""
    with pytest.raises(StepConfigurationError, match="invalid on_exception"):
        single_step(on_exception=[on_exception(KeyError)])


def test_step_policy_overrides_class_policies():
    """A capturing step-level policy comes before class level (R-POL-40)."""
    resolution = resolve_policy(
        ExceptionPolicy("skip"), (on_exception("cancel", KeyError),), KeyError()
    )
    assert resolution.source == "step"
    assert resolution.policy.action is Action.SKIP
    assert resolution.index is None


def test_non_capturing_single_step_policy_falls_through():
    """A specific step policy that misses falls through to class level (R-POL-41)."""
    class_policies = (on_exception("cancel"),)
    resolution = resolve_policy(TRANSIENT, class_policies, KeyError())
    assert resolution.source == "class_blanket"
    assert resolution.policy.action is Action.CANCEL
    assert resolve_policy(TRANSIENT, class_policies, TimeoutError()).source == "step"


def test_single_step_policy_is_capped_by_its_own_max_only():
    """A single step policy's cap is its own max_reattempts (R-POL-42)."""
    class_policies = (on_exception("reattempt", max_reattempts=2),)
    resolution = resolve_policy(TRANSIENT, class_policies, TimeoutError())
    assert resolution.cap == 5
    assert resolution.matched_by == "TimeoutError"


def test_list_routes_errors_to_the_first_capturing_policy():
    """A list sends each error to its first capturing policy (R-POL-30)."""
    policies = PolicyList(
        [
            ExceptionPolicy("reattempt", matching=ErrorA),
            ExceptionPolicy("cancel", matching=ErrorB),
            ExceptionPolicy("skip"),
        ]
    )
    a = resolve_policy(policies, (), ErrorA())
    assert (a.source, a.index, a.policy.action) == ("step_list", 0, Action.REATTEMPT)
    assert a.matched_by == f"{__name__}.ErrorA"
    b = resolve_policy(policies, (), ErrorB())
    assert (b.index, b.policy.action) == (1, Action.CANCEL)
    other = resolve_policy(policies, (), RuntimeError())
    assert (other.index, other.policy.action) == (2, Action.SKIP)


def test_unmatched_list_errors_fall_through_to_class_level():
    """Errors no list entry captures go to class policies (R-POL-31)."""
    policies = PolicyList([ExceptionPolicy("reattempt", matching=ErrorA)])
    resolution = resolve_policy(policies, (on_exception("cancel"),), ErrorB())
    assert resolution.source == "class_blanket"
    assert resolve_policy(policies, (), ErrorB()).source == "default"


def test_list_cap_contract():
    """List [A max 10, B max 3 cancel]: both get 3 reattempts, then A pauses and B
    cancels (R-POL-32, R-POL-33)."""

    class Listed(Workflow):
        @step(
            on_exception=[
                ExceptionPolicy("reattempt", matching=ErrorA, max_reattempts=10),
                ExceptionPolicy(
                    "reattempt",
                    matching=ErrorB,
                    max_reattempts=3,
                    terminal_action="cancel",
                ),
            ]
        )
        def work(self):
            pass

    policy = Listed.__geneva_definitions__.steps.named("work").exception_policy
    assert policy.cap == 3
    for error, terminal_action in ((ErrorA(), "pause"), (ErrorB(), "cancel")):
        resolution = resolve_policy(policy, (), error)
        assert resolution.cap == 3
        actions = [decide(resolution, count).action for count in range(4)]
        assert actions == ["reattempt", "reattempt", "reattempt", terminal_action]
        assert decide(resolution, 3).terminal
