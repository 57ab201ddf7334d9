"""Policy decision records in every branch of the resolution (SPEC §19, R-PDR-01..06)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import ExceptionPolicy
from flask_geneva import Executor
from flask_geneva import HeroTypeNotFoundError
from flask_geneva import cancel_if
from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

MODULE = __name__


class Transient(Exception):
    """A retryable failure."""


class Fatal(Exception):
    """A non-retryable failure."""


class Plan:
    """Errors the next runs raise, in order; empty → success."""

    errors: list[BaseException] = []

    @classmethod
    def run(cls):
        if cls.errors:
            raise cls.errors.pop(0)


def skip_it(workflow, error):
    """A step-level imperative handler."""
    workflow.skip()


class DecisionStep(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("cancel", matching=Fatal))
    def work(self):
        Plan.run()


class DecisionList(geneva.Workflow):
    @step(
        on_exception=[
            ExceptionPolicy("reattempt", matching=Transient, max_reattempts=5),
            ExceptionPolicy(
                "reattempt",
                matching=Fatal,
                wait=7,
                max_reattempts=1,
                terminal_action="skip",
            ),
            ExceptionPolicy("pause", report="never"),
        ]
    )
    def work(self):
        Plan.run()

    @step
    def tail(self):
        pass


class DecisionClass(geneva.Workflow):
    exception_policies = [
        on_exception("cancel", report="terminal_only"),
        on_exception(Fatal, action="skip"),
        on_exception(
            "tests.engine.executor.test_policy_decisions.Transient", action="pause"
        ),
    ]

    @step
    def work(self):
        Plan.run()

    @step
    def tail(self):
        pass


class DecisionDefault(geneva.Workflow):
    @step(on_exception=ExceptionPolicy("cancel", matching=KeyError))
    def work(self):
        Plan.run()


class DecisionHandlers(geneva.Workflow):
    @on_exception(Transient, report="never")
    def retry(self, error):
        self.reattempt(wait=12)

    @on_exception(Fatal)
    def crash(self, error):
        self.hero.email = "written-by-a-crashing-handler@example.com"
        raise RuntimeError("handler bug")

    @step
    def work(self):
        Plan.run()


class DecisionStepHandler(geneva.Workflow):
    @step(on_exception=skip_it)
    def work(self):
        Plan.run()

    @step
    def tail(self):
        pass


class DecisionPrepare(geneva.Workflow):
    @step(on_exception="reattempt", max_reattempts=2, terminal_action="cancel")
    def work(self):
        pass


class DecisionCondition(geneva.Workflow):
    @cancel_if
    def exploding(self):
        Plan.run()
        return False

    @step(on_exception=ExceptionPolicy("reattempt", matching=Transient, wait=3))
    def work(self):
        pass


class DecisionPreconditionOutcomes(geneva.Workflow):
    @cancel_if
    def hero_blocked(self):
        return self.hero.blocked

    @step(skip_if="hero_archived")
    def work(self):
        pass

    @step
    def tail(self):
        pass

    def hero_archived(self):
        return self.hero.archived


class DecisionFlowControl(geneva.Workflow):
    @step
    def work(self):
        self.reattempt(wait=4)


@pytest.fixture
def reports(app):
    """Collect error reporter calls: (error, context)."""
    calls = []

    def reporter(error, *, handled, context, source):
        calls.append((error, context))

    app.config["GENEVA_ERROR_REPORTER"] = reporter
    geneva.reload_settings(app)
    return calls


def _decisions(workflow_id):
    return [
        (r["metadata"] or {}).get("policy_decision")
        for r in execution_rows(workflow_id)
    ]


def _run(workflow, error_type):
    with pytest.raises(error_type):
        perform_next_step(workflow)


def _failed_once(workflow_cls, user, error):
    """A new ``workflow_cls`` workflow whose step raised ``error`` once (the
    step re-raised it)."""
    Plan.errors = [error]
    workflow = workflow_cls.create(hero=user)
    _run(workflow, type(error))
    return workflow


def _record(**fields):
    base = {
        "source": "default",
        "index": None,
        "matched_by": None,
        "action": "pause",
        "wait_seconds": None,
        "terminal": False,
        "consecutive_reattempts": 0,
        "max_reattempts": None,
        "report": "always",
        "reported": True,
        "handler": None,
    }
    base.update(fields)
    return base


def test_step_policy_decision(user, reports):
    """A single step policy is recorded as source 'step' with its matcher (R-PDR-01, R-POL-41)."""
    workflow = _failed_once(DecisionStep, user, Fatal("stop"))
    assert _decisions(workflow.id) == [
        _record(source="step", matched_by=f"{MODULE}.Fatal", action="cancel")
    ]
    assert workflow_row(workflow.id)["state"] == "canceled"


def test_step_list_decisions_carry_index_and_list_cap(user, reports):
    """List entries are recorded with their index and the list cap; the cap makes the second Fatal terminal (R-PDR-01, R-POL-30/32)."""
    Plan.errors = [Transient("t"), Fatal("f1")]
    workflow = DecisionList.create(hero=user)
    _run(workflow, Transient)
    _run(workflow, Fatal)
    assert _decisions(workflow.id) == [
        _record(
            source="step_list",
            index=0,
            matched_by=f"{MODULE}.Transient",
            action="reattempt",
            max_reattempts=1,
        ),
        _record(
            source="step_list",
            index=1,
            matched_by=f"{MODULE}.Fatal",
            action="skip",
            terminal=True,
            consecutive_reattempts=1,
            max_reattempts=1,
        ),
        None,
    ]
    rows = execution_rows(workflow.id)
    assert [(r["step_name"], r["state"], r["outcome"]) for r in rows] == [
        ("work", "completed", "reattempted"),
        ("work", "skipped", "skipped"),
        ("tail", "scheduled", None),
    ]


def test_step_list_blanket_entry_and_report_never(user, reports):
    """A blanket list entry records index 2, no matcher and reported False (R-PDR-01/02, R-REP-01)."""
    workflow = _failed_once(DecisionList, user, OSError("unmatched"))
    assert _decisions(workflow.id) == [
        _record(
            source="step_list",
            index=2,
            report="never",
            reported=False,
            max_reattempts=1,
        )
    ]
    assert reports == []


def test_class_specific_decision_records_the_lazy_matcher(user, reports):
    """A class-level specific policy records its position and string matcher (R-PDR-01, R-POL-40)."""
    workflow = _failed_once(DecisionClass, user, Transient("lazy"))
    assert _decisions(workflow.id) == [
        _record(
            source="class_specific",
            index=2,
            matched_by="tests.engine.executor.test_policy_decisions.Transient",
        )
    ]


def test_class_specific_skip_decision(user, reports):
    """The class-level Fatal policy skips and is recorded with index 1 (R-PDR-01, R-EXE-45)."""
    workflow = _failed_once(DecisionClass, user, Fatal("skip me"))
    assert _decisions(workflow.id)[0] == _record(
        source="class_specific", index=1, matched_by=f"{MODULE}.Fatal", action="skip"
    )
    assert execution_rows(workflow.id)[0]["error_message"] == "skip me"


def test_class_blanket_decision(user, reports):
    """A class-level blanket policy is recorded with index 0 and terminal_only not reported (R-PDR-01/02)."""
    workflow = _failed_once(DecisionClass, user, OSError("blanket"))
    assert _decisions(workflow.id) == [
        _record(
            source="class_blanket",
            index=0,
            action="cancel",
            report="terminal_only",
            reported=False,
        )
    ]
    assert reports == []


def test_default_decision_when_nothing_captures(user, reports):
    """A specific step policy that misses falls to the default pause record (R-PDR-01, R-POL-40/41)."""
    workflow = _failed_once(DecisionDefault, user, Fatal("nobody"))
    assert _decisions(workflow.id) == [_record()]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_reported_is_false_without_a_reporter(user):
    """Without GENEVA_ERROR_REPORTER nothing is called, so reported is False (R-PDR-02)."""
    workflow = _failed_once(DecisionDefault, user, Fatal("nobody listens"))
    assert _decisions(workflow.id) == [_record(reported=False)]


def test_class_handler_decision(user, reports):
    """A class handler's reattempt records the handler name, its wait and report mode (R-PDR-01, R-POL-11)."""
    workflow = _failed_once(DecisionHandlers, user, Transient("later"))
    assert _decisions(workflow.id)[0] == _record(
        source="class_specific",
        index=0,
        matched_by=f"{MODULE}.Transient",
        action="reattempt",
        wait_seconds=12.0,
        report="never",
        reported=False,
        handler="retry",
    )
    assert execution_rows(workflow.id)[0]["metadata"]["reattempt_reason"] == (
        "exception_policy"
    )
    assert reports == []


def test_step_handler_decision(user, reports):
    """A step-level callable records source 'step' and its qualified name (R-PDR-01, R-POL-11)."""
    workflow = _failed_once(DecisionStepHandler, user, Fatal("skip via handler"))
    assert _decisions(workflow.id)[0] == _record(
        source="step", action="skip", handler=f"{MODULE}.skip_it"
    )
    assert workflow_row(workflow.id)["next_step_name"] == "tail"


def test_crashing_handler_pauses_reports_and_discards_its_writes(user, reports):
    """A raising handler pauses, records handler_error, reports both errors and rolls back its writes (R-POL-12, R-PDR-01)."""
    Plan.errors = [Fatal("step error")]
    workflow = DecisionHandlers.create(hero=user)
    with pytest.raises(Fatal, match="step error"):
        perform_next_step(workflow)
    assert _decisions(workflow.id) == [
        _record(
            source="class_specific",
            index=1,
            matched_by=f"{MODULE}.Fatal",
            handler="crash",
        )
        | {"handler_error": "RuntimeError: handler bug"}
    ]
    row = execution_rows(workflow.id)[0]
    assert (row["state"], row["outcome"], row["error_message"]) == (
        "failed",
        "failed",
        "step error",
    )
    assert workflow_row(workflow.id)["state"] == "paused"
    reported = [(type(error), context) for error, context in reports]
    assert [kind for kind, _ in reported] == [RuntimeError, Fatal]
    handler_context = reported[0][1]
    assert handler_context["handler"] == "crash"
    assert handler_context["step_error"] == "Fatal('step error')"
    assert handler_context["geneva_drive"]["workflow_id"] == workflow.id
    db.session.expire_all()
    assert db.session.get(type(user), user.id).email == "hero@example.com"


def test_prepare_phase_decisions_are_counted(user, reports):
    """Prepare errors record reason 'prepare', count toward the cap and end terminal (R-EXE-30/32, R-CNT-06, R-PDR-01)."""
    workflow = DecisionPrepare.create(hero=user)
    update_workflow(workflow.id, hero_type="VanishedModel")
    for _ in range(3):
        with pytest.raises(HeroTypeNotFoundError):
            perform_next_step(workflow)
    rows = execution_rows(workflow.id)
    assert [(r["state"], r["outcome"]) for r in rows] == [("failed", "failed")] * 3
    assert [r["metadata"].get("reattempt_reason") for r in rows] == [
        "prepare",
        "prepare",
        None,
    ]
    decisions = [r["metadata"]["policy_decision"] for r in rows]
    assert [
        (d["source"], d["action"], d["terminal"], d["consecutive_reattempts"])
        for d in decisions
    ] == [
        ("step", "reattempt", False, 0),
        ("step", "reattempt", False, 1),
        ("step", "cancel", True, 2),
    ]
    assert all(d["max_reattempts"] == 2 for d in decisions)
    assert rows[0]["metadata"]["exception"]["class"] == (
        "flask_geneva.exceptions.HeroTypeNotFoundError"
    )
    assert workflow_row(workflow.id)["state"] == "canceled"
    assert len(reports) == 3


def test_prepare_error_without_step_records_the_default(user, reports):
    """A prepare error for a step that no longer exists records the default pause (R-EXE-30, R-PDR-01)."""
    workflow = DecisionPrepare.create(hero=user)
    execution_id = workflow.current_execution.id
    update_workflow(workflow.id, hero_type="VanishedModel")
    table = geneva.StepExecution.__table__
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(table).where(table.c.id == execution_id).values(step_name="gone")
        )
    db.session.commit()
    with pytest.raises(HeroTypeNotFoundError):
        Executor.execute(execution_id)
    assert _decisions(workflow.id) == [_record()]
    assert workflow_row(workflow.id)["state"] == "paused"


def test_precondition_exception_decision(user, reports):
    """A raising cancel condition records the step policy with reason 'precondition' (R-EXE-23, R-POL-13, R-PDR-01)."""
    workflow = _failed_once(DecisionCondition, user, Transient("condition broke"))
    first = execution_rows(workflow.id)[0]
    assert (first["state"], first["outcome"]) == ("completed", "reattempted")
    assert first["metadata"]["reattempt_reason"] == "precondition"
    assert first["metadata"]["exception"]["message"] == "condition broke"
    assert first["metadata"]["policy_decision"] == _record(
        source="step",
        matched_by=f"{MODULE}.Transient",
        action="reattempt",
        wait_seconds=3.0,
        max_reattempts=100,
    )
    assert first["error_message"] is None


@pytest.mark.parametrize(
    ("hero_flags", "record", "state"),
    [
        (
            {"blocked": True},
            {"outcome": "canceled", "condition": "hero_blocked"},
            "canceled",
        ),
        (
            {"archived": True},
            {"outcome": "skipped", "condition": "hero_archived"},
            "ready",
        ),
    ],
)
def test_precondition_outcome_records(user, reports, hero_flags, record, state):
    """Conditions that end an execution record outcome and condition name (R-PDR-04)."""
    for name, value in hero_flags.items():
        setattr(user, name, value)
    db.session.commit()
    workflow = DecisionPreconditionOutcomes.create(hero=user)
    perform_next_step(workflow)
    first = execution_rows(workflow.id)[0]
    assert first["metadata"]["precondition"] == record
    assert "policy_decision" not in first["metadata"]
    assert workflow_row(workflow.id)["state"] == state
    assert reports == []


def test_flow_control_record(user):
    """An in-step reattempt records the flow_control action, wait and rewind (R-PDR-03)."""
    workflow = DecisionFlowControl.create(hero=user)
    perform_next_step(workflow)
    first = execution_rows(workflow.id)[0]
    assert first["metadata"]["flow_control"] == {
        "action": "reattempt",
        "wait_seconds": 4.0,
        "rewind": False,
    }
    assert first["metadata"]["reattempt_reason"] == "flow_control"
    assert "policy_decision" not in first["metadata"]


def test_decision_is_committed_with_the_state_it_explains(app, user):
    """The reporter, called after commit, sees state and decision together from another connection (R-PDR-06, R-REP-02)."""
    seen = []
    table = geneva.StepExecution.__table__

    def reporter(error, *, handled, context, source):
        execution_id = context["geneva_drive"]["step_execution_id"]
        with db.engine.connect() as connection:
            row = (
                connection.execute(sa.select(table).where(table.c.id == execution_id))
                .mappings()
                .one()
            )
        seen.append((row["state"], row["metadata"].get("policy_decision")))

    app.config["GENEVA_ERROR_REPORTER"] = reporter
    geneva.reload_settings(app)
    _failed_once(DecisionStep, user, Fatal("stop"))
    assert seen == [
        (
            "failed",
            _record(source="step", matched_by=f"{MODULE}.Fatal", action="cancel"),
        )
    ]


class DecisionHandlerDatabaseError(geneva.Workflow):
    @on_exception(Fatal)
    def duplicate_hero(self, error):
        self.hero.email = "written-before-the-failure@example.com"
        db.session.flush()
        db.session.execute(
            sa.insert(type(self.hero).__table__).values(
                id=self.hero.id,
                email="dup@example.com",
                archived=False,
                blocked=False,
                counter=0,
            )
        )

    @step
    def work(self):
        Plan.run()


def test_handler_database_error_still_pauses(user, reports):
    """A handler whose statement fails is rolled back to its savepoint; the pause still commits (R-POL-12)."""
    Plan.errors = [Fatal("step error")]
    workflow = DecisionHandlerDatabaseError.create(hero=user)
    with pytest.raises(Fatal, match="step error"):
        perform_next_step(workflow)
    row = execution_rows(workflow.id)[0]
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert row["metadata"]["policy_decision"]["handler"] == "duplicate_hero"
    # MariaDB's strict mode reports the failing INSERT as OperationalError.
    assert row["metadata"]["policy_decision"]["handler_error"].startswith(
        ("IntegrityError: ", "OperationalError: ")
    )
    assert workflow_row(workflow.id)["state"] == "paused"
    db.session.expire_all()
    assert db.session.get(type(user), user.id).email == "hero@example.com"
