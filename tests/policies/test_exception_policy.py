"""The ExceptionPolicy value object, policy lists and decisions (SPEC §9.1-9.3)."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest

from flask_geneva.exceptions import StepConfigurationError
from flask_geneva.policies.exception_policy import DEFAULT_POLICY
from flask_geneva.policies.exception_policy import Action
from flask_geneva.policies.exception_policy import ExceptionPolicy
from flask_geneva.policies.exception_policy import PolicyList
from flask_geneva.policies.exception_policy import coerce_action
from flask_geneva.policies.resolution import PolicyResolution
from flask_geneva.policies.resolution import PolicyResult
from flask_geneva.policies.resolution import decide
from flask_geneva.policies.resolution import should_report

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class VendorBusy(Exception):
    """Raised by a pretend vendor client."""


class VendorVeryBusy(VendorBusy):
    """A subclass of VendorBusy."""


def resolution(policy, cap="own"):
    """Wrap ``policy`` the way resolve_policy would for a single step policy."""
    return PolicyResolution(
        policy=policy,
        source="step",
        index=None,
        matched_by=None,
        cap=policy.max_reattempts if cap == "own" else cap,
    )


def test_declarative_policy_without_options_has_defaults():
    """A bare action gives a blanket policy with defaults (R-POL-01, R-POL-07)."""
    policy = ExceptionPolicy("pause")
    assert policy.action is Action.PAUSE
    assert policy.wait is None
    assert policy.max_reattempts is None
    assert policy.terminal_action is Action.PAUSE
    assert policy.report == "always"
    assert policy.matchers == ()
    assert policy.handler is None
    assert policy.handler_name is None
    assert policy.is_declarative
    assert policy.is_blanket
    assert not policy.is_specific
    assert policy.policies == [policy]


def test_declarative_policy_with_all_options():
    """All declarative options are stored, wait as a timedelta (R-POL-02, R-POL-07)."""
    policy = ExceptionPolicy(
        Action.REATTEMPT,
        matching=[TimeoutError, "json.JSONDecodeError"],
        wait=30,
        max_reattempts=5,
        terminal_action=Action.CANCEL,
        report="terminal_only",
    )
    assert policy.action is Action.REATTEMPT
    assert policy.wait == timedelta(seconds=30)
    assert policy.max_reattempts == 5
    assert policy.terminal_action is Action.CANCEL
    assert policy.report == "terminal_only"
    assert policy.matchers == (TimeoutError, "json.JSONDecodeError")
    assert policy.is_specific
    assert not policy.is_blanket


@pytest.mark.parametrize("action", ["pause", "cancel", "reattempt", "skip"])
def test_all_actions_are_accepted_as_strings_and_enum(action):
    """Each of the four actions is accepted as string or Action (R-POL-01)."""
    assert ExceptionPolicy(action).action == action
    assert ExceptionPolicy(Action(action)).action is Action(action)


def test_trailing_bang_is_tolerated():
    """The gem spelling 'reattempt!' is accepted (R-DEF-08)."""
    assert ExceptionPolicy("reattempt!").action is Action.REATTEMPT


def test_invalid_action_lists_the_four_actions():
    """An unknown action is rejected with the list of valid ones (R-POL-02)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        ExceptionPolicy("retry")
    message = str(excinfo.value)
    assert "'retry'" in message
    for action in ("pause", "cancel", "reattempt", "skip"):
        assert repr(action) in message


def test_configuration_error_is_a_value_error():
    """Policy validation errors are also ValueErrors (R-POL-02)."""
    with pytest.raises(ValueError, match="either an action or a handler"):
        ExceptionPolicy()


def test_reattempt_defaults_to_a_cap_of_100():
    """A reattempt policy without max_reattempts is capped at 100 (R-POL-04)."""
    assert ExceptionPolicy("reattempt").max_reattempts == 100


def test_explicit_none_means_unlimited_reattempts():
    """max_reattempts=None on a reattempt policy means unlimited (R-POL-04)."""
    assert ExceptionPolicy("reattempt", max_reattempts=None).max_reattempts is None


@pytest.mark.parametrize("action", ["pause", "cancel", "skip"])
def test_wait_is_only_allowed_with_reattempt(action):
    """wait (even 0) is rejected for non-reattempt actions (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match=r"wait.*only allowed with action"):
        ExceptionPolicy(action, wait=0)


@pytest.mark.parametrize("action", ["pause", "cancel", "skip"])
def test_max_reattempts_is_only_allowed_with_reattempt(action):
    """max_reattempts is rejected for non-reattempt actions (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match=r"max_reattempts.*only allowed"):
        ExceptionPolicy(action, max_reattempts=3)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "3"])
def test_max_reattempts_must_be_a_positive_int(value):
    """0, negatives, non-ints and bools are rejected for max_reattempts (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match="positive integer"):
        ExceptionPolicy("reattempt", max_reattempts=value)


def test_negative_wait_is_rejected():
    """A negative reattempt wait is rejected (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match="non-negative"):
        ExceptionPolicy("reattempt", wait=-1)


def test_zero_wait_is_kept_as_zero():
    """A wait of 0 is a zero timedelta, not absent (SPEC §0)."""
    assert ExceptionPolicy("reattempt", wait=0).wait == timedelta(0)


def test_action_or_handler_is_required():
    """A policy with neither action nor handler is rejected (R-POL-01)."""
    with pytest.raises(StepConfigurationError, match="either an action or a handler"):
        ExceptionPolicy(matching=TimeoutError)


def test_handler_mode():
    """A handler makes an imperative policy with no action (R-POL-01, R-POL-07)."""

    def handle(workflow, error):
        return (workflow, error)

    policy = ExceptionPolicy(handler=handle, matching=KeyError, report="never")
    assert policy.action is None
    assert not policy.is_declarative
    assert policy.handler is handle
    assert policy.report == "never"
    assert policy.matchers == (KeyError,)
    assert policy.max_reattempts is None
    assert policy.handler_name.endswith("test_handler_mode.<locals>.handle")


@pytest.mark.parametrize(
    "options",
    [
        {"action": "pause"},
        {"wait": 5},
        {"max_reattempts": 3},
        {"terminal_action": "cancel"},
    ],
)
def test_handler_rejects_action_wait_max_and_terminal(options):
    """A handler cannot be combined with action, wait, max or terminal (R-POL-03)."""
    with pytest.raises(StepConfigurationError, match="handler cannot be combined"):
        ExceptionPolicy(handler=lambda workflow, error: None, **options)


def test_handler_must_be_callable_or_method_name():
    """A handler that is neither callable nor a method name is rejected (R-POL-01)."""
    with pytest.raises(StepConfigurationError, match="invalid handler 42"):
        ExceptionPolicy(handler=42)


def test_invoke_handler_calls_callable_with_workflow_and_error():
    """A callable handler is called as handler(workflow, error) (R-POL-11)."""
    policy = ExceptionPolicy(handler=lambda workflow, error: (workflow, error))
    error = KeyError("k")
    assert policy.invoke_handler("wf", error) == ("wf", error)


def test_invoke_handler_looks_up_method_names_on_the_workflow():
    """A method-name handler is resolved on the instance at run time (R-POL-11)."""

    class Workflow:
        def on_error(self, error):
            return ("handled", error)

    error = KeyError("k")
    policy = ExceptionPolicy(handler="on_error")
    assert policy.invoke_handler(Workflow(), error) == ("handled", error)
    assert policy.handler_name == "on_error"


def test_invoke_handler_on_declarative_policy_is_a_type_error():
    """Declarative policies have no handler to invoke (R-POL-01)."""
    with pytest.raises(TypeError, match="declarative"):
        ExceptionPolicy("pause").invoke_handler(object(), KeyError())


@pytest.mark.parametrize(
    "error", [Exception(), KeyError(), VendorBusy(), json.JSONDecodeError("m", "d", 0)]
)
def test_blanket_policy_captures_everything(error):
    """A policy without matchers captures every exception (R-POL-06)."""
    policy = ExceptionPolicy("skip")
    assert policy.captures(error)
    assert policy.matched_by(error) is None


def test_specific_policy_captures_listed_classes_and_subclasses():
    """Class matchers capture instances and subclasses only (R-POL-05, R-POL-06)."""
    policy = ExceptionPolicy("cancel", matching=[VendorBusy, KeyError])
    assert policy.captures(VendorBusy())
    assert policy.captures(VendorVeryBusy())
    assert policy.captures(KeyError())
    assert not policy.captures(ValueError())
    assert not policy.captures(LookupError())


def test_single_matcher_may_be_given_without_a_list():
    """``matching`` accepts one matcher as well as a sequence (R-POL-05)."""
    assert ExceptionPolicy("cancel", matching=KeyError).matchers == (KeyError,)


def test_matched_by_names_the_capturing_matcher():
    """matched_by describes the matcher that captured the error (R-PDR-01)."""
    policy = ExceptionPolicy("cancel", matching=[KeyError, VendorBusy])
    assert policy.matched_by(KeyError()) == "KeyError"
    assert policy.matched_by(VendorVeryBusy()) == f"{__name__}.VendorBusy"
    assert policy.matched_by(ValueError()) is None


def test_terminal_action_defaults_to_pause():
    """terminal_action is pause unless given (R-POL-02)."""
    assert ExceptionPolicy("reattempt").terminal_action is Action.PAUSE


@pytest.mark.parametrize("terminal", ["cancel", "skip", Action.CANCEL, "pause"])
def test_terminal_action_accepts_pause_cancel_skip(terminal):
    """terminal_action may be pause, cancel or skip with reattempt (R-POL-02)."""
    policy = ExceptionPolicy("reattempt", terminal_action=terminal)
    assert policy.terminal_action == terminal


@pytest.mark.parametrize("terminal", ["reattempt", "finish", 1])
def test_invalid_terminal_action_lists_allowed_ones(terminal):
    """Other terminal actions are rejected naming pause, cancel, skip (R-POL-02)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        ExceptionPolicy("reattempt", terminal_action=terminal)
    message = str(excinfo.value)
    assert "terminal_action" in message
    assert "'pause', 'cancel', 'skip'" in message


def test_non_default_terminal_action_only_with_reattempt():
    """A non-default terminal_action needs action reattempt (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match=r"terminal_action.*only allowed"):
        ExceptionPolicy("pause", terminal_action="cancel")


def test_lazy_string_matcher_matches_by_name():
    """A dotted-path string captures the class it names (R-POL-05)."""
    policy = ExceptionPolicy("pause", matching=f"{__name__}.VendorBusy")
    assert policy.captures(VendorBusy())
    assert not policy.captures(KeyError())
    assert policy.matched_by(VendorBusy()) == f"{__name__}.VendorBusy"


def test_lazy_string_matcher_matches_subclasses():
    """A dotted-path string also captures subclasses of the named class (R-POL-05)."""
    assert ExceptionPolicy("pause", matching=f"{__name__}.VendorBusy").captures(
        VendorVeryBusy()
    )
    assert ExceptionPolicy("pause", matching="LookupError").captures(KeyError())


def test_lazy_string_matcher_resolves_by_import():
    """A string naming a re-exported class resolves through import (R-POL-05)."""
    policy = ExceptionPolicy("pause", matching="json.JSONDecodeError")
    assert policy.captures(json.JSONDecodeError("msg", "doc", 0))
    assert not policy.captures(ValueError())


@pytest.mark.parametrize(
    "path", ["no_such_package_xyz.errors.Busy", "json.NoSuchError", "NoSuchBuiltin"]
)
def test_unresolvable_string_matcher_never_matches_and_never_raises(path):
    """An unresolvable name is accepted, never matches and never raises (R-POL-05)."""
    policy = ExceptionPolicy("pause", matching=path)
    assert not policy.captures(VendorBusy())
    assert policy.matched_by(VendorBusy()) is None


def test_string_naming_a_non_exception_never_matches():
    """A path that resolves to something other than an exception class never matches
    (R-POL-05)."""
    assert not ExceptionPolicy("pause", matching="json.dumps").captures(ValueError())


def test_malformed_string_matcher_is_rejected():
    """A string that is not a dotted identifier path is rejected (R-POL-05)."""
    with pytest.raises(StepConfigurationError, match="dotted import path"):
        ExceptionPolicy("pause", matching="not a class!")


def test_callable_predicate_matcher():
    """A predicate (error) -> bool is a matcher (R-POL-05)."""
    policy = ExceptionPolicy("skip", matching=lambda error: "retry" in str(error))
    assert policy.captures(RuntimeError("please retry"))
    assert not policy.captures(RuntimeError("fatal"))


def test_raising_predicate_counts_as_no_match():
    """A predicate that raises does not match and does not propagate (R-POL-05)."""

    def broken(error):
        raise RuntimeError("bug in predicate")

    policy = ExceptionPolicy("skip", matching=[broken, KeyError])
    assert not policy.captures(ValueError())
    assert policy.captures(KeyError())


@pytest.mark.parametrize("matcher", [KeyboardInterrupt, BaseException, int, str])
def test_class_matcher_must_be_an_exception_subclass(matcher):
    """A class that is not an Exception subclass is rejected (R-POL-05)."""
    with pytest.raises(StepConfigurationError, match="Exception subclass"):
        ExceptionPolicy("pause", matching=matcher)


@pytest.mark.parametrize("matcher", [42, 3.5, b"KeyError"])
def test_other_matcher_objects_are_rejected(matcher):
    """Matchers that are neither class, string nor callable are rejected (R-POL-05)."""
    with pytest.raises(StepConfigurationError, match="invalid exception matcher"):
        ExceptionPolicy("pause", matching=[matcher])


def test_invalid_report_lists_the_modes():
    """report must be always, never or terminal_only (R-POL-02)."""
    with pytest.raises(StepConfigurationError) as excinfo:
        ExceptionPolicy("pause", report="sometimes")
    assert "'always', 'never', 'terminal_only'" in str(excinfo.value)


def test_policy_is_immutable():
    """Setting an attribute of a policy raises (R-POL-08)."""
    policy = ExceptionPolicy("pause")
    with pytest.raises(AttributeError):
        policy.action = Action.CANCEL  # type: ignore[misc]
    assert policy.action is Action.PAUSE


def test_policy_is_hashable_and_copyable():
    """Policies can be put in sets and copied without change (R-POL-08)."""
    policy = ExceptionPolicy("reattempt", matching=KeyError, wait=3)
    assert policy in {policy}
    clone = copy.deepcopy(policy)
    assert clone.action is Action.REATTEMPT
    assert clone.wait == timedelta(seconds=3)
    assert clone.matchers == (KeyError,)


def test_default_policy_pauses_and_reports():
    """The default policy is pause with report always (R-POL-40)."""
    assert DEFAULT_POLICY.action is Action.PAUSE
    assert DEFAULT_POLICY.report == "always"
    assert DEFAULT_POLICY.is_blanket


def test_coerce_action_honours_the_allowed_set():
    """coerce_action rejects actions outside ``allowed`` and names them (R-DEF-11)."""
    allowed = (Action.PAUSE, Action.SKIP)
    assert coerce_action("skip!", allowed=allowed) is Action.SKIP
    with pytest.raises(StepConfigurationError, match="must be one of 'pause', 'skip'"):
        coerce_action("cancel", allowed=allowed, name="terminal_action")


def test_policy_list_cap_is_the_minimum_finite_max():
    """The list cap is the smallest finite max_reattempts (R-POL-32)."""
    policies = PolicyList(
        [
            ExceptionPolicy("reattempt", matching=KeyError, max_reattempts=10),
            ExceptionPolicy("reattempt", matching=ValueError, max_reattempts=3),
            ExceptionPolicy("reattempt", max_reattempts=None),
            ExceptionPolicy("skip"),
        ]
    )
    assert policies.cap == 3
    assert len(policies) == 4


def test_policy_list_cap_is_none_when_all_unlimited():
    """Without finite max_reattempts the list has no cap (R-POL-32)."""
    policies = PolicyList([ExceptionPolicy("reattempt", max_reattempts=None)])
    assert policies.cap is None


def test_policy_list_first_capturing_walks_in_list_order():
    """The first capturing policy wins, like except clauses (R-POL-30)."""
    specific = ExceptionPolicy("cancel", matching=KeyError)
    blanket = ExceptionPolicy("skip")
    policies = PolicyList([specific, blanket])
    assert policies.first_capturing(KeyError()) == (0, specific)
    assert policies.first_capturing(ValueError()) == (1, blanket)
    assert PolicyList([specific]).first_capturing(ValueError()) is None


def test_policy_list_rejects_non_policies():
    """Every element of a policy list must be an ExceptionPolicy (R-DEF-08)."""
    with pytest.raises(StepConfigurationError, match="element #1"):
        PolicyList([ExceptionPolicy("pause"), "cancel"])


@pytest.mark.parametrize("action", ["pause", "cancel", "skip"])
def test_decide_non_reattempt_actions(action):
    """Non-reattempt policies yield their action, not terminal (R-POL-10)."""
    result = decide(resolution(ExceptionPolicy(action)), 0)
    assert result == PolicyResult(
        action=action, wait=None, terminal=False, report="always"
    )


def test_decide_reattempt_below_cap_keeps_wait():
    """Below the cap a reattempt policy reattempts with its wait (R-POL-10)."""
    policy = ExceptionPolicy("reattempt", wait=10, max_reattempts=3)
    result = decide(resolution(policy), 2)
    assert result == PolicyResult(
        action="reattempt", wait=timedelta(seconds=10), terminal=False, report="always"
    )


def test_decide_reattempt_at_cap_applies_terminal_action():
    """At count >= cap the terminal action applies, without wait (R-POL-10)."""
    policy = ExceptionPolicy(
        "reattempt", wait=10, max_reattempts=3, terminal_action="cancel", report="never"
    )
    for count in (3, 4):
        assert decide(resolution(policy), count) == PolicyResult(
            action="cancel", wait=None, terminal=True, report="never"
        )


def test_decide_unlimited_reattempt_is_never_terminal():
    """Without a cap a reattempt policy always reattempts (R-POL-04, R-POL-10)."""
    policy = ExceptionPolicy("reattempt", max_reattempts=None)
    assert decide(resolution(policy), 10_000).action == "reattempt"


def test_decide_uses_the_resolution_cap():
    """decide caps with the resolution's cap, e.g. a list minimum (R-POL-32)."""
    policy = ExceptionPolicy("reattempt", max_reattempts=10)
    assert decide(resolution(policy, cap=3), 3).terminal
    assert not decide(resolution(policy, cap=3), 2).terminal


def test_decide_result_action_is_a_plain_string():
    """Result actions are plain strings, ready for JSON records (R-PDR-01)."""
    result = decide(resolution(ExceptionPolicy(Action.SKIP)), 0)
    assert type(result.action) is str


def test_decide_rejects_imperative_policies():
    """Imperative policies are run by the executor, not decide() (R-POL-11)."""
    policy = ExceptionPolicy(handler=lambda workflow, error: None)
    with pytest.raises(TypeError, match="declarative"):
        decide(resolution(policy), 0)


@pytest.mark.parametrize(
    ("report", "terminal", "expected"),
    [
        ("always", False, True),
        ("always", True, True),
        ("never", False, False),
        ("never", True, False),
        ("terminal_only", False, False),
        ("terminal_only", True, True),
    ],
)
def test_should_report(report, terminal, expected):
    """The reporter runs for always, or terminal_only when terminal (R-REP-01)."""
    result = PolicyResult(action="pause", wait=None, terminal=terminal, report=report)
    assert should_report(result) is expected
