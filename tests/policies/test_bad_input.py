"""Invalid policy combinations fail when the workflow class is defined (R-DEF-08..11, R-POL-02/03/43)."""

from __future__ import annotations

import pytest

from flask_geneva import ExceptionPolicy
from flask_geneva import StepConfigurationError
from flask_geneva import on_exception
from flask_geneva import step
from tests.apps.basic import geneva

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


class Fatal(Exception):
    """A failure."""


def test_unknown_step_action_lists_the_four_actions():
    """An unknown step on_exception action names the value and the four actions (R-DEF-08)."""
    with pytest.raises(StepConfigurationError) as caught:

        class BadInputAction(geneva.Workflow):
            @step(on_exception="explode")
            def work(self):
                pass

    message = str(caught.value)
    assert "'explode'" in message
    for action in ("pause", "cancel", "reattempt", "skip"):
        assert f"'{action}'" in message


def test_max_reattempts_with_a_non_reattempt_action():
    """max_reattempts with a non-reattempt step action names the option (R-DEF-09)."""
    with pytest.raises(StepConfigurationError, match="max_reattempts"):

        class BadInputMax(geneva.Workflow):
            @step(on_exception="pause", max_reattempts=3)
            def work(self):
                pass


def test_terminal_action_beside_a_policy_object():
    """terminal_action next to a policy object must go on the policy (R-DEF-11)."""
    with pytest.raises(StepConfigurationError, match="terminal_action"):

        class BadInputTerminal(geneva.Workflow):
            @step(on_exception=ExceptionPolicy("reattempt"), terminal_action="cancel")
            def work(self):
                pass


def test_invalid_terminal_action_lists_allowed_values():
    """A terminal action outside pause/cancel/skip is rejected listing them (R-DEF-11, R-POL-02)."""
    with pytest.raises(StepConfigurationError) as caught:

        class BadInputTerminalValue(geneva.Workflow):
            @step(on_exception="reattempt", terminal_action="reattempt")
            def work(self):
                pass

    message = str(caught.value)
    assert "terminal_action" in message
    assert "'pause', 'cancel', 'skip'" in message


def test_class_level_invalid_report_mode_lists_allowed_values():
    """A class-level policy with an unknown report mode lists always/never/terminal_only (R-POL-02, R-POL-43)."""
    with pytest.raises(
        StepConfigurationError,
        match="invalid report 'sometimes': must be one of 'always', 'never', 'terminal_only'",
    ):

        class BadInputReport(geneva.Workflow):
            exception_policies = [
                on_exception(Fatal, action="skip", report="sometimes")
            ]

            @step
            def work(self):
                pass


def test_class_level_wait_with_non_reattempt_action():
    """wait with a cancel policy is rejected naming wait and 'reattempt' (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match=r"wait=.*'reattempt'"):

        class BadInputWait(geneva.Workflow):
            exception_policies = [on_exception("cancel", wait=10)]

            @step
            def work(self):
                pass


def test_handler_with_action_options_is_rejected():
    """A handler combined with max_reattempts is rejected naming what a handler allows (R-POL-03)."""
    with pytest.raises(StepConfigurationError, match="only matching and report"):

        class BadInputHandler(geneva.Workflow):
            @step(
                on_exception=ExceptionPolicy(
                    handler=lambda wf, error: None, max_reattempts=2
                )
            )
            def work(self):
                pass


def test_non_policy_in_exception_policies_is_rejected():
    """A bare action string in exception_policies is not a policy (R-POL-43)."""
    with pytest.raises(StepConfigurationError, match="'cancel'"):

        class BadInputElement(geneva.Workflow):
            exception_policies = ["cancel"]

            @step
            def work(self):
                pass


def test_zero_max_reattempts_on_a_class_policy():
    """max_reattempts=0 is rejected as not a positive integer (R-POL-02)."""
    with pytest.raises(StepConfigurationError, match="positive integer or None"):

        class BadInputZero(geneva.Workflow):
            exception_policies = [on_exception("reattempt", max_reattempts=0)]

            @step
            def work(self):
                pass
