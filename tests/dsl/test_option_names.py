"""A misspelt step option is named with the nearest one (SPEC §5.1, R-DEF-23)."""

from __future__ import annotations

import pytest

from flask_geneva.dsl.decorators import resumable_step
from flask_geneva.dsl.decorators import step
from flask_geneva.exceptions import StepConfigurationError
from tests.dsl.base import Workflow

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def test_a_misspelt_option_in_a_class_body_names_the_nearest_one():
    """@step(wiat=5) is a StepConfigurationError naming 'wiat', suggesting 'wait'
    and listing the allowed options, not a TypeError (R-DEF-23)."""
    with pytest.raises(StepConfigurationError) as raised:

        class Misspelt(Workflow):
            @step(wiat=5)  # type: ignore[call-overload]
            def later(self):
                pass

    message = str(raised.value)
    assert "@step: unknown option 'wiat' (did you mean 'wait'?)" in message
    assert "allowed: after, before, job_options, limit, max_reattempts" in message


@pytest.mark.parametrize(
    ("declare", "expected"),
    [
        (
            lambda: step(on_exeption="pause"),
            "@step: unknown option 'on_exeption' (did you mean 'on_exception'?)",
        ),
        (
            lambda: step.anonymous(lambda wf: None, skipif=True),
            "step.anonymous: unknown option 'skipif' (did you mean 'skip_if'?)",
        ),
        (
            lambda: step.repeat(2, "poll", waitt=3),
            "step.repeat: unknown option 'waitt' (did you mean 'wait'?)",
        ),
        (
            lambda: resumable_step(max_iteration=3),
            "@resumable_step: unknown option 'max_iteration' (did you mean "
            "'max_iterations'?)",
        ),
        (
            lambda: resumable_step.anonymous(lambda wf, it: None, max_runtim=3),
            "resumable_step.anonymous: unknown option 'max_runtim' (did you mean "
            "'max_runtime'?)",
        ),
        (
            lambda: step(wiat=5, on_exeption="pause"),
            "@step: unknown options 'on_exeption' (did you mean 'on_exception'?), "
            "'wiat' (did you mean 'wait'?)",
        ),
        (lambda: step(colour="red"), "@step: unknown option 'colour'; allowed: "),
    ],
)
def test_every_declaration_names_the_unknown_option(declare, expected):
    """step, step.anonymous, step.repeat and resumable_step name each unknown option
    and the nearest allowed one, if any (R-DEF-23)."""
    with pytest.raises(StepConfigurationError) as raised:
        declare()
    assert expected in str(raised.value)


def test_a_resumable_option_on_a_regular_step_points_at_resumable_step():
    """max_iterations/max_runtime on @step say they belong to @resumable_step (R-DEF-23, R-DEF-15)."""
    with pytest.raises(StepConfigurationError) as raised:
        step(max_iterations=3)  # type: ignore[call-overload]
    message = str(raised.value)
    assert "@step: unknown option 'max_iterations'" in message
    assert "max_iterations is an option of @resumable_step" in message
