"""Mistakes in workflow classes caught at class definition or init_app (R-DEF-19..21, R-CFG-03).

Each test builds its own ``Geneva`` on its own ``SQLAlchemy``, so the broken classes
it declares never reach the shared test app's registry.
"""

from __future__ import annotations

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from flask_geneva import Geneva
from flask_geneva import GenevaConfigurationError
from flask_geneva import StepConfigurationError
from flask_geneva import cancel_if
from flask_geneva import resumable_step
from flask_geneva import step

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


@pytest.fixture
def geneva():
    return Geneva(SQLAlchemy())


def _init(geneva, tmp_path, **config):
    app = Flask(__name__)
    # No broker here: the recording backend needs no Celery app (issue 14).
    app.config.update(
        SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'checks.sqlite3'}",
        GENEVA_TASK_BACKEND="recording",
        **config,
    )
    geneva.db.init_app(app)
    geneva.init_app(app)
    return app


def test_async_step_body_is_refused_at_class_definition(geneva):
    """`@step async def` raises StepConfigurationError naming the body, not 'success' unrun (R-DEF-19)."""
    with pytest.raises(StepConfigurationError, match=r"'welcome'.*async function"):

        class AsyncBody(geneva.Workflow):
            @step
            async def welcome(self):
                return None


def test_async_inline_body_and_async_condition_are_refused(geneva):
    """An async inline body and an async skip_if callable are refused at definition (R-DEF-19)."""

    async def body(workflow):
        return None

    async def condition(workflow):
        return True

    with pytest.raises(StepConfigurationError, match="async function"):
        step.anonymous(body)
    with pytest.raises(StepConfigurationError, match=r"skip_if .*async function"):

        class AsyncCondition(geneva.Workflow):
            @step(skip_if=condition)
            def welcome(self):
                return None


@pytest.mark.parametrize(
    "condition",
    [lambda: True, lambda workflow, extra: True],
    ids=["no-argument", "two-arguments"],
)
def test_skip_if_callable_with_wrong_arity_is_refused(geneva, condition):
    """A skip_if/run_if callable that cannot take (workflow) is refused at definition (R-DEF-20)."""
    with pytest.raises(StepConfigurationError, match=r"skip_if .*\(R-DEF-20\)"):
        step.anonymous(lambda workflow: None, skip_if=condition)
    with pytest.raises(StepConfigurationError, match=r"run_if .*\(R-DEF-20\)"):
        step.anonymous(lambda workflow: None, run_if=condition)


def test_cancel_condition_with_wrong_arity_is_refused(geneva):
    """@cancel_if on a (self, extra) method and a zero-argument cancel_conditions entry are refused (R-DEF-20)."""
    with pytest.raises(StepConfigurationError, match=r"@cancel_if .*\(R-DEF-20\)"):

        class DecoratedCondition(geneva.Workflow):
            @cancel_if
            def unsubscribed(self, reason):
                return True

    with pytest.raises(
        StepConfigurationError, match=r"cancel_conditions: .*\(R-DEF-20\)"
    ):

        class ListedCondition(geneva.Workflow):
            cancel_conditions = [lambda: True]


def test_step_body_with_wrong_arity_is_refused(geneva):
    """A @step method that needs an argument besides self is refused at definition (R-DEF-20)."""
    with pytest.raises(StepConfigurationError, match=r"'welcome'.*\(R-DEF-20\)"):

        class NeedsArgument(geneva.Workflow):
            @step
            def welcome(self, recipient):
                return None


def test_resumable_step_without_iterator_parameter_is_refused(geneva):
    """@resumable_step on a method without the `it` parameter is refused at definition (R-DEF-21)."""
    with pytest.raises(StepConfigurationError, match=r"'export'.*iterator.*R-DEF-21"):

        class NoIterator(geneva.Workflow):
            @resumable_step
            def export(self):
                return None

    with pytest.raises(StepConfigurationError, match="R-DEF-21"):
        resumable_step.anonymous(lambda workflow: None)


def test_init_app_lists_every_missing_or_misshapen_method_name(geneva, tmp_path):
    """init_app raises one GenevaConfigurationError listing every named method that is missing or misshapen (R-CFG-03)."""

    class Drip(geneva.Workflow):
        __geneva_type__ = "Drip"
        cancel_conditions = ["no_such_cancel_method"]

        @step(skip_if="no_such_method")
        def welcome(self):
            return None

        steps_by_name = [step.anonymous("no_such_body", name="missing_body")]

    class Export(geneva.Workflow):
        __geneva_type__ = "Export"
        chunks = [
            step.anonymous("send", name="send"),
            resumable_step.anonymous("copy_rows", name="copy"),
        ]

        async def send(self):
            return None

        def copy_rows(self):
            return None

    with pytest.raises(GenevaConfigurationError) as caught:
        _init(geneva, tmp_path)
    message = str(caught.value)
    assert message.startswith("5 problem(s) found when flask_geneva started:")
    assert (
        "Drip: step 'welcome': skip_if='no_such_method' names no attribute" in message
    )
    assert "Drip: cancel_if='no_such_cancel_method' names no attribute" in message
    assert (
        "Drip: step 'missing_body': its body method 'no_such_body' is not defined"
        in message
    )
    assert "Export: step 'send': body Export.send is an async function" in message
    assert "Export: step 'copy': resumable body Export.copy_rows(self)" in message


def test_subclass_override_that_drops_the_iterator_is_caught_at_init_app(
    geneva, tmp_path
):
    """A subclass overriding a resumable step method without `it` fails init_app, not the run (R-CFG-03, R-DEF-21)."""

    class Parent(geneva.Workflow):
        @resumable_step
        def export(self, it):
            return None

    class Child(Parent):
        __geneva_type__ = "Child"

        def export(self):
            return None

    with pytest.raises(GenevaConfigurationError, match=r"Child: step 'export'"):
        _init(geneva, tmp_path)


def test_a_body_replaced_after_a_passing_init_app_is_checked_again(geneva, tmp_path):
    """The shape of each body function is worked out once, but a method replaced
    on the class is a new function: the next init_app checks it (R-CFG-03)."""

    class Export(geneva.Workflow):
        __geneva_type__ = "Export"

        @resumable_step
        def copy(self, it):
            return None

        @step(skip_if="already_sent")
        def send(self):
            return None

        def already_sent(self):
            return False

    _init(geneva, tmp_path)
    _init(geneva, tmp_path)  # the same functions: still sound

    def copy_without_iterator(self):
        return None

    def already_sent_with_an_extra_argument(self, extra):
        return False

    Export.copy = copy_without_iterator
    Export.already_sent = already_sent_with_an_extra_argument
    with pytest.raises(GenevaConfigurationError) as caught:
        _init(geneva, tmp_path)
    message = str(caught.value)
    assert "Export: step 'copy': resumable body" in message
    assert "Export: step 'send': skip_if='already_sent':" in message


def _define_drip(geneva):
    """Define ``Drip`` on ``geneva``: its step's run_if names no method."""

    class Drip(geneva.Workflow):
        __geneva_type__ = "Drip"

        @step(run_if="no_such_method")
        def welcome(self):
            return None

    return Drip


def test_setting_and_workflow_problems_come_in_one_error(geneva, tmp_path):
    """An invalid setting and a workflow problem are listed together in one error (R-CFG-01, R-CFG-03)."""

    _define_drip(geneva)
    with pytest.raises(GenevaConfigurationError) as caught:
        _init(geneva, tmp_path, GENEVA_FIND_ATTEMPTS=0)
    message = str(caught.value)
    assert "2 problem(s)" in message
    assert "GENEVA_FIND_ATTEMPTS must be a positive int, got 0" in message
    assert "Drip: step 'welcome': run_if='no_such_method'" in message


def test_every_invalid_setting_is_listed_with_the_workflow_problems(geneva, tmp_path):
    """Several invalid settings and a workflow problem come in one error, each on its own line (R-CFG-01, R-CFG-03)."""

    _define_drip(geneva)
    with pytest.raises(GenevaConfigurationError) as caught:
        _init(
            geneva,
            tmp_path,
            GENEVA_FIND_ATTEMPTS=0,
            GENEVA_TASK_RERAISE="sometimes",
            GENEVA_DEFAULT_QUEUE="",
        )
    lines = str(caught.value).splitlines()
    assert lines[0] == "4 problem(s) found when flask_geneva started:"
    assert any("GENEVA_FIND_ATTEMPTS must be a positive int, got 0" in x for x in lines)
    assert any("GENEVA_TASK_RERAISE must be one of" in x for x in lines)
    assert any("'sometimes'" in x for x in lines)
    assert any("GENEVA_DEFAULT_QUEUE must be a non-empty str" in x for x in lines)
    assert any("run_if='no_such_method'" in x for x in lines)


def test_several_invalid_settings_read_later_are_listed_together(geneva, tmp_path):
    """A reload after init_app names every invalid setting at once (R-CFG-01, R-CFG-02)."""
    app = _init(geneva, tmp_path)
    before = app.extensions["geneva"].config
    app.config.update(GENEVA_FIND_ATTEMPTS=0, GENEVA_ALLOW_EAGER="yes")
    with pytest.raises(GenevaConfigurationError) as caught:
        geneva.reload_settings(app)
    assert app.extensions["geneva"].config is before
    message = str(caught.value)
    assert message.startswith("2 invalid flask_geneva settings:")
    assert "GENEVA_FIND_ATTEMPTS must be a positive int, got 0" in message
    assert "GENEVA_ALLOW_EAGER must be True or False, got 'yes'" in message


def test_sound_classes_pass_init_app(geneva, tmp_path):
    """Named conditions that are methods, properties, staticmethods or columns pass the checks (R-CFG-03)."""

    class Sound(geneva.Workflow):
        cancel_conditions = ["is_blocked", "allow_multiple"]

        @property
        def is_blocked(self):
            return False

        @staticmethod
        def never():
            return False

        @step(skip_if="never")
        def welcome(self):
            return None

        @resumable_step(run_if="ready_to_export")
        def export(self, it, *rest):
            return None

        def ready_to_export(self):
            return True

        later = step.anonymous("welcome_again")

        def welcome_again(self):
            return None

    app = _init(geneva, tmp_path)
    assert app.extensions["geneva"].geneva is geneva


def test_same_default_type_name_from_two_modules_is_refused(geneva):
    """Two classes whose default type name (__qualname__) collides across modules are refused (R-STI-01)."""

    def declare(module):
        namespace = {
            "__module__": module,
            "__qualname__": "Onboarding",
            "welcome": step(lambda self: None),
        }
        return type("Onboarding", (geneva.Workflow,), namespace)

    first = declare("shop.workflows")
    assert first.__geneva_type__ == "Onboarding"
    with pytest.raises(
        StepConfigurationError,
        match=r"'Onboarding' of crm\.workflows\.Onboarding is already used by "
        r"shop\.workflows\.Onboarding; set a distinct __geneva_type__",
    ):
        declare("crm.workflows")


def test_a_concrete_class_without_steps_is_refused_at_init_app(geneva, tmp_path):
    """A workflow class that declares no step (a forgotten @step) is named at
    init_app; a base class marked __geneva_abstract__ is not, nor are its
    subclasses with steps (R-CFG-05)."""

    class MailingBase(geneva.Workflow):
        __geneva_abstract__ = True

        def send(self):
            return None

    class Forgotten(MailingBase):
        def welcome(self):  # @step forgotten
            return None

    class Reminder(MailingBase):
        @step
        def remind(self):
            return None

    with pytest.raises(GenevaConfigurationError) as caught:
        _init(geneva, tmp_path)
    message = str(caught.value)
    assert (
        "Forgotten: declares no steps; declare them with @step, or mark a base "
        "class with __geneva_abstract__ = True" in message
    )
    assert "MailingBase" not in message
    assert "Reminder" not in message


def test_abstract_is_not_inherited(geneva, tmp_path):
    """__geneva_abstract__ marks only the class that sets it; a subclass without
    steps of its own or inherited is refused (R-CFG-05)."""

    class Base(geneva.Workflow):
        __geneva_abstract__ = True

    class Child(Base):
        __geneva_type__ = "Child"

    with pytest.raises(GenevaConfigurationError, match="Child: declares no steps"):
        _init(geneva, tmp_path)
    del geneva.workflow_classes["Child"]
    _init(geneva, tmp_path)  # the abstract base alone is fine


def test_admin_startable_must_be_a_bool(geneva, tmp_path):
    """admin_startable is a class attribute checked at init_app: a value that is
    not True or False is a problem naming the class and the value; inherited
    booleans are fine (R-ADM-200, R-CFG-03)."""

    class Hidden(geneva.Workflow):
        admin_startable = False

        @step
        def only(self):
            return None

    class HiddenChild(Hidden):
        pass

    class Vague(geneva.Workflow):
        admin_startable = "no"

        @step
        def only(self):
            return None

    with pytest.raises(GenevaConfigurationError) as caught:
        _init(geneva, tmp_path)
    message = str(caught.value)
    assert "Vague: admin_startable must be True or False, got 'no' (str)" in message
    assert "Hidden" not in message
    assert HiddenChild.admin_startable is False
