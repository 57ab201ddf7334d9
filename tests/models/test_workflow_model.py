"""The workflow model: creation, uniqueness, navigation, scopes, metadata, STI (SPEC
§3).
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta
from datetime import timezone

import pytest
import sqlalchemy as sa

from flask_geneva import DuplicateWorkflowError
from flask_geneva import InvalidStateError
from flask_geneva import StepConfigurationError
from flask_geneva import cancel_if
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.engine import workflow_creation
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import count_workflows
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import make_user
from tests.support.workflow import workflow_row

T0 = datetime(2030, 1, 6, 12, 0, tzinfo=UTC)


class ModelThreeSteps(geneva.Workflow):
    seen = []

    @step
    def first(self):
        ModelThreeSteps.seen.append((self.current_step_name, self.next_step_name))

    @step
    def second(self):
        ModelThreeSteps.seen.append((self.current_step_name, self.next_step_name))

    @step
    def third(self):
        ModelThreeSteps.seen.append((self.current_step_name, self.next_step_name))


class ModelDelayed(geneva.Workflow):
    @step
    def start(self):
        pass

    @step(wait=timedelta(days=2))
    def later(self):
        pass


class ModelNoSteps(geneva.Workflow):
    # A concrete class without steps is refused at init_app (R-CFG-05); the
    # engine still finishes such a workflow at creation (R-WF-12).
    __geneva_abstract__ = True


class ModelParent(geneva.Workflow):
    default_job_options = {"queue": "parent", "priority": 1}

    @cancel_if
    def parent_condition(self):
        return False

    @step
    def inherited(self):
        pass


class ModelChild(ModelParent):
    default_job_options = {"priority": 7}
    may_proceed_without_hero = True

    @cancel_if
    def child_condition(self):
        return False

    @step
    def added(self):
        pass


class ModelOther(geneva.Workflow):
    @step
    def only(self):
        pass


class ModelExplicitType(geneva.Workflow):
    __geneva_type__ = "model.explicit-type"

    @step
    def only(self):
        pass


# -- creation (R-WF-01, R-WF-10..15) ---------------------------------------------------


def test_create_schedules_the_first_step(user, geneva_jobs):
    """A new workflow is ready with one scheduled execution of its first step (R-WF-01,
    R-WF-13).
    """
    workflow = ModelThreeSteps.create(hero=user)
    row = workflow_row(workflow.id)
    assert row["state"] == "ready"
    assert row["type"] == "ModelThreeSteps"
    assert (row["hero_type"], row["hero_id"]) == ("User", user.id)
    assert row["current_step_name"] is None
    assert row["next_step_name"] == "first"
    assert row["transitioned_at"] is None
    executions = execution_rows(workflow.id)
    assert [(e["step_name"], e["state"], e["outcome"]) for e in executions] == [
        ("first", "scheduled", None)
    ]
    assert [p.step_execution_id for p in geneva_jobs.enqueued] == [executions[0]["id"]]


def test_create_without_a_hero_is_refused_unless_the_class_may_proceed(
    app, geneva_jobs
):
    """create(hero=None) on a class that needs its hero raises TypeError and stores
    nothing; a class with may_proceed_without_hero creates it (R-HERO-06).
    """
    for call in (
        lambda: ModelOther.create(hero=None),
        ModelOther.create,
        lambda: ModelOther.create_unless_ongoing(hero=None),
    ):
        with pytest.raises(TypeError) as raised:
            call()
        message = str(raised.value)
        assert "a ModelOther workflow needs a hero" in message
        assert "may_proceed_without_hero = True" in message
    assert count_workflows() == 0
    assert geneva_jobs.enqueued == []
    assert ModelChild.create(hero=None).state == "ready"
    assert count_workflows() == 1


def test_create_without_steps_finishes_at_once(user, geneva_jobs):
    """A workflow class with no steps is finished at creation, without executions
    (R-WF-12).
    """
    with clock.frozen(T0):
        workflow = ModelNoSteps.create(hero=user)
    row = workflow_row(workflow.id)
    assert row["state"] == "finished"
    assert row["transitioned_at"] == T0
    assert row["current_step_name"] is None
    assert row["next_step_name"] is None
    assert execution_rows(workflow.id) == []
    assert geneva_jobs.enqueued == []


def test_delayed_second_step_is_scheduled_two_days_ahead(user):
    """The next step's own wait sets its scheduled_for (R-SCH-01, R-SCH-06)."""
    with clock.frozen(T0):
        workflow = ModelDelayed.create(hero=user)
        perform_next_step(workflow)
    later = execution_rows(workflow.id)[-1]
    assert later["step_name"] == "later"
    assert later["state"] == "scheduled"
    assert later["scheduled_for"] == T0 + timedelta(days=2)


def test_create_with_commit_false_leaves_the_commit_to_the_caller(user):
    """With commit=False the insert is part of the caller's transaction (R-WF-14)."""
    workflow = ModelThreeSteps.create(hero=user, commit=False)
    workflow_id = workflow.id
    db.session.rollback()
    assert workflow_row(workflow_id) is None


# -- uniqueness (R-UNQ-01..06) ---------------------------------------------------------


def test_duplicate_ongoing_workflow_is_rejected_by_validation(user, geneva_jobs):
    """A second ongoing workflow of the type for the hero raises DuplicateWorkflowError
    (R-UNQ-02/03).
    """
    first = ModelThreeSteps.create(hero=user)
    geneva_jobs.clear()
    with pytest.raises(
        DuplicateWorkflowError, match="An ongoing workflow of this type"
    ):
        ModelThreeSteps.create(hero=user)
    db.session.rollback()
    assert count_workflows() == 1
    assert len(execution_rows(first.id)) == 1
    assert geneva_jobs.enqueued == []


@pytest.mark.parametrize("app_config", [{}, {"GENEVA_ENQUEUE_AFTER_COMMIT": True}])
def test_duplicate_rejected_by_the_database_index_leaves_nothing(
    user, geneva_jobs, monkeypatch
):
    """The unique index violation also surfaces as DuplicateWorkflowError, leaving no
    row or job (R-UNQ-01/03).
    """
    ModelThreeSteps.create(hero=user)
    geneva_jobs.clear()
    monkeypatch.setattr(workflow_creation, "_ongoing_duplicate", lambda *a: None)
    other = make_user("bystander@example.com")
    other.counter = 5  # pending change of the caller, must survive the failed insert
    with pytest.raises(DuplicateWorkflowError, match="An ongoing workflow"):
        ModelThreeSteps.create(hero=user, commit=False)
    db.session.commit()
    assert count_workflows() == 1
    assert geneva_jobs.enqueued == []
    assert db.session.get(User, other.id).counter == 5


def test_duplicate_check_ignores_other_types_and_heroes(user):
    """Uniqueness is per (type, hero) (R-UNQ-01)."""
    ModelThreeSteps.create(hero=user)
    ModelOther.create(hero=user)
    ModelThreeSteps.create(hero=make_user())
    assert count_workflows() == 3


def test_allow_multiple_neither_blocks_nor_is_blocked(user):
    """allow_multiple rows are exempt from the uniqueness rule (R-UNQ-04)."""
    ModelThreeSteps.create(hero=user, allow_multiple=True)
    ModelThreeSteps.create(hero=user, allow_multiple=True)
    ModelThreeSteps.create(hero=user)
    ModelThreeSteps.create(hero=user, allow_multiple=True)
    with pytest.raises(DuplicateWorkflowError):
        ModelThreeSteps.create(hero=user)
    db.session.rollback()
    assert count_workflows() == 4


@pytest.mark.parametrize("state", ["finished", "canceled"])
def test_terminal_workflow_no_longer_blocks(user, state):
    """A finished or canceled workflow does not block a new one (R-UNQ-05)."""
    first = ModelThreeSteps.create(hero=user)
    first.transition_to(state)
    second = ModelThreeSteps.create(hero=user)
    assert workflow_row(second.id)["state"] == "ready"


def test_paused_workflow_still_blocks(user):
    """A paused workflow is ongoing and blocks a new one (R-UNQ-05)."""
    first = ModelThreeSteps.create(hero=user)
    first.pause()
    with pytest.raises(DuplicateWorkflowError):
        ModelThreeSteps.create(hero=user)


def test_heroless_duplicate_is_rejected_by_validation(app):
    """Hero-less ongoing workflows of one type collide in the model check (R-UNQ-06)."""
    ModelChild.create(hero=None)
    with pytest.raises(DuplicateWorkflowError):
        ModelChild.create(hero=None)
    db.session.rollback()
    assert count_workflows() == 1


def test_create_unless_ongoing_returns_the_existing_workflow(user, geneva_jobs):
    """create_unless_ongoing creates once, then returns the ongoing one (SPEC §15.5)."""
    created, was_created = ModelThreeSteps.create_unless_ongoing(hero=user)
    assert was_created is True
    geneva_jobs.clear()
    existing, was_created = ModelThreeSteps.create_unless_ongoing(hero=user)
    assert was_created is False
    assert existing.id == created.id
    assert count_workflows() == 1
    assert geneva_jobs.enqueued == []


# -- inheritance and ordering (R-INH-01..04, R-ORD-03) ---------------------------------


def test_subclass_inherits_steps_conditions_and_options():
    """A subclass copies and extends its parent's definitions (R-INH-01, R-INH-04)."""
    assert ModelChild.step_collection().names == ["inherited", "added"]
    assert ModelParent.step_collection().names == ["inherited"]
    child = ModelChild.__geneva_definitions__
    parent = ModelParent.__geneva_definitions__
    assert len(child.cancel_conditions) == 2
    assert len(parent.cancel_conditions) == 1
    assert dict(child.default_job_options) == {"queue": "parent", "priority": 7}
    assert dict(parent.default_job_options) == {"queue": "parent", "priority": 1}
    assert ModelChild.may_proceed_without_hero is True
    assert ModelParent.may_proceed_without_hero is False


def test_step_collection_order_and_next_after():
    """Steps are ordered and navigable by name (R-WF-20, R-ORD-03)."""
    steps = ModelThreeSteps.step_collection()
    assert steps.names == ["first", "second", "third"]
    assert steps.next_after(None).name == "first"
    assert steps.next_after("first").name == "second"
    assert steps.next_after("third") is None
    assert steps.next_after("unknown") is None


def test_subclass_workflow_runs_inherited_and_own_steps(user):
    """A subclass workflow runs the parent's steps before its own (R-INH-01)."""
    workflow = ModelChild.create(hero=user)
    speedrun_workflow(workflow)
    rows = execution_rows(workflow.id)
    assert [(e["step_name"], e["outcome"]) for e in rows] == [
        ("inherited", "success"),
        ("added", "success"),
    ]


# -- state bookkeeping (R-WF-02..06, R-WF-25) ------------------------------------------


def test_step_names_are_tracked_through_execution_and_finish(user):
    """current_step_name is set during a step and cleared after; next_step_name advances
    (R-WF-25).
    """
    ModelThreeSteps.seen.clear()
    workflow = ModelThreeSteps.create(hero=user)
    perform_next_step(workflow)
    row = workflow_row(workflow.id)
    assert (row["current_step_name"], row["next_step_name"]) == (None, "second")
    speedrun_workflow(workflow)
    assert ModelThreeSteps.seen == [
        ("first", "first"),
        ("second", "second"),
        ("third", "third"),
    ]
    row = workflow_row(workflow.id)
    assert row["state"] == "finished"
    assert (row["current_step_name"], row["next_step_name"]) == (None, None)


@pytest.mark.parametrize("state", ["finished", "canceled", "paused"])
def test_transitioned_at_is_set_on_terminal_and_paused_states(user, state):
    """Entering finished/canceled/paused sets transitioned_at (R-WF-03, R-WF-05)."""
    workflow = ModelThreeSteps.create(hero=user)
    with clock.frozen(T0):
        workflow.transition_to(state)
    row = workflow_row(workflow.id)
    assert row["state"] == state
    assert row["transitioned_at"] == T0


def test_transition_to_applies_extra_attributes_without_validation(user):
    """transition_to persists state and attributes without validating (R-WF-05)."""
    workflow = ModelThreeSteps.create(hero=user)
    workflow.transition_to("finished")
    workflow.transition_to("ready", next_step_name="third")
    row = workflow_row(workflow.id)
    assert (row["state"], row["next_step_name"]) == ("ready", "third")


def test_transition_to_rejects_unknown_states(user):
    """transition_to names the allowed states for an unknown one (R-WF-05)."""
    workflow = ModelThreeSteps.create(hero=user)
    with pytest.raises(ValueError, match="allowed: ready, performing"):
        workflow.transition_to("sleeping")


def test_state_predicates(user):
    """Predicates mirror the state; ongoing means not finished/canceled (R-WF-06)."""
    workflow = ModelThreeSteps.create(hero=user)
    assert workflow.is_ready
    assert workflow.is_ongoing
    assert not workflow.is_paused
    workflow.pause()
    assert workflow.is_paused
    assert workflow.is_ongoing
    workflow.cancel()
    assert workflow.is_canceled
    assert not workflow.is_ongoing
    assert not workflow.is_finished
    assert not workflow.is_performing


def test_resume_of_paused_workflow_reuses_the_scheduled_execution(user):
    """resume() of an externally paused workflow keeps its execution, clears
    transitioned_at (R-WF-04, R-EXT-21).
    """
    workflow = ModelThreeSteps.create(hero=user)
    scheduled = execution_rows(workflow.id)[0]
    workflow.pause()
    assert workflow_row(workflow.id)["transitioned_at"] is not None
    resumed = workflow.resume()
    assert resumed.id == scheduled["id"]
    row = workflow_row(workflow.id)
    assert (row["state"], row["transitioned_at"]) == ("ready", None)
    assert len(execution_rows(workflow.id)) == 1


@pytest.mark.parametrize("state", ["ready", "finished", "canceled"])
def test_resume_of_non_paused_workflow_raises(user, state):
    """resume() is only allowed from paused (R-EXT-20)."""
    workflow = ModelThreeSteps.create(hero=user)
    if state != "ready":
        workflow.transition_to(state)
    with pytest.raises(InvalidStateError, match=f"Cannot resume a {state} workflow"):
        workflow.resume()
    assert workflow_row(workflow.id)["state"] == state


# -- navigation (R-WF-21..23) ----------------------------------------------------------


def test_previous_step_name_is_structural(user):
    """previous_step_name follows the step order, then the last step after finish
    (R-WF-23).
    """
    workflow = ModelThreeSteps.create(hero=user)
    assert workflow.previous_step_name is None
    perform_next_step(workflow)
    assert workflow.previous_step_name == "first"
    perform_next_step(workflow)
    assert workflow.previous_step_name == "second"
    perform_next_step(workflow)
    assert workflow.is_finished
    assert workflow.previous_step_name == "third"


def test_previous_step_name_of_empty_workflow_is_none(user):
    """A finished workflow without steps has no previous step (R-WF-23)."""
    workflow = ModelNoSteps.create(hero=user)
    assert workflow.is_finished
    assert workflow.previous_step_name is None


def test_current_execution_and_history(user):
    """current_execution is the active one; history lists all in creation order
    (R-WF-21/22).
    """
    workflow = ModelThreeSteps.create(hero=user)
    first = workflow.current_execution
    assert first.step_name == "first"
    assert first.state == "scheduled"
    perform_next_step(workflow)
    assert workflow.current_execution.step_name == "second"
    speedrun_workflow(workflow)
    assert workflow.current_execution is None
    assert [e.step_name for e in workflow.execution_history] == [
        "first",
        "second",
        "third",
    ]


# -- scopes and STI (R-WF-24, R-HERO-04, R-STI-01/04) ----------------------------------


def test_scopes_are_restricted_to_the_class(user):
    """ongoing/with_state/for_hero select only the calling class's rows (R-WF-24,
    R-STI-04).
    """
    other_hero = make_user()
    a = ModelThreeSteps.create(hero=user)
    b = ModelThreeSteps.create(hero=other_hero)
    c = ModelOther.create(hero=user)
    b.pause()
    finished = ModelThreeSteps.create(hero=user, allow_multiple=True)
    finished.transition_to("finished")

    def ids(query):
        return sorted(w.id for w in db.session.scalars(query))

    assert ids(ModelThreeSteps.ongoing()) == sorted([a.id, b.id])
    assert ids(ModelThreeSteps.with_state("paused")) == [b.id]
    assert ids(ModelThreeSteps.with_state("finished")) == [finished.id]
    assert ids(ModelThreeSteps.for_hero(user)) == sorted([a.id, finished.id])
    assert ids(ModelOther.for_hero(user)) == [c.id]
    assert ids(geneva.Workflow.for_hero(user)) == sorted([a.id, c.id, finished.id])


def test_with_state_rejects_unknown_state():
    """with_state lists the allowed states for an unknown one (R-WF-24)."""
    with pytest.raises(ValueError, match="unknown workflow state 'sleeping'"):
        ModelThreeSteps.with_state("sleeping")


def test_type_defaults_to_qualname_or_explicit_identity(user):
    """The stored type is __geneva_type__ or the class __qualname__ (R-STI-01)."""
    default = ModelThreeSteps.create(hero=user)
    explicit = ModelExplicitType.create(hero=user)
    assert workflow_row(default.id)["type"] == "ModelThreeSteps"
    assert workflow_row(explicit.id)["type"] == "model.explicit-type"
    explicit_id = explicit.id
    db.session.expunge_all()
    loaded = geneva.Workflow.get(explicit_id)
    assert type(loaded) is ModelExplicitType


def test_duplicate_identity_is_rejected_at_class_creation():
    """Two classes with one STI identity raise StepConfigurationError (R-STI-01)."""
    with pytest.raises(StepConfigurationError, match="already used by"):

        class ModelClash(geneva.Workflow):
            __geneva_type__ = "ModelThreeSteps"

    with pytest.raises(StepConfigurationError, match="already used by"):
        type("ModelOther", (geneva.Workflow,), {"__qualname__": "ModelOther"})


@pytest.mark.parametrize(
    ("identity", "shown"),
    [("", "''"), ("   ", "'   '"), ("\t\n", "'\\t\\n'"), ("x" * 256, "'xxxx")],
    ids=["empty", "spaces", "whitespace", "too-long"],
)
def test_a_blank_or_too_long_identity_is_refused(identity, shown):
    """__geneva_type__ = "" (or blank, or wider than the type column) is refused at
    class creation, naming the class, instead of falling back to its name (R-STI-05).
    """
    with pytest.raises(StepConfigurationError) as raised:

        class ModelBlankType(geneva.Workflow):
            __geneva_type__ = identity

            @step
            def only(self):
                pass

    message = str(raised.value)
    assert ".ModelBlankType " + shown in message
    assert "must be a non-empty str, not blank, of at most 255 characters" in message
    assert "ModelBlankType" not in geneva.workflow_classes


def test_get_is_polymorphic(user):
    """Workflow.get returns an instance of the stored subclass (R-STI-02/04)."""
    workflow_id = ModelOther.create(hero=user).id
    db.session.expunge_all()
    loaded = geneva.Workflow.get(workflow_id)
    assert type(loaded) is ModelOther
    assert ModelThreeSteps.get(workflow_id) is None


# -- hero (R-HERO-01, R-HERO-02) ---------------------------------------------------------------


def test_hero_resolves_and_deleted_hero_is_none(user):
    """hero loads the row; a deleted hero reads as None (R-HERO-01, R-HERO-02)."""
    workflow = ModelThreeSteps.create(hero=user)
    assert workflow.hero is user
    db.session.delete(user)
    db.session.commit()
    assert workflow.hero is None


def test_hero_is_none_when_its_columns_are_null(user):
    """A hero-less workflow, or one with only hero_type or only hero_id set, has no
    hero (R-HERO-02).
    """
    heroless = ModelChild.create(hero=None)
    assert (heroless.hero_type, heroless.hero_id) == (None, None)
    assert heroless.hero is None
    workflow_id, user_id = ModelThreeSteps.create(hero=user).id, user.id
    table = geneva.Workflow.__table__
    for values in ({"hero_id": None}, {"hero_type": None, "hero_id": user_id}):
        with external_writer() as connection:
            connection.execute(
                sa.update(table).where(table.c.id == workflow_id).values(**values)
            )
        db.session.expire_all()
        assert geneva.Workflow.get(workflow_id).hero is None


# -- metadata (R-WF-40..44) ------------------------------------------------------------


def test_the_metadata_column_is_mapped_as_meta(user):
    """The ``metadata`` column is the ``meta`` attribute of both models, so the
    declarative ``metadata`` stays SQLAlchemy's; accessors write the column
    (R-DM-14).
    """
    for model in (geneva.Workflow, geneva.StepExecution):
        column = model.__table__.c["metadata"]
        assert sa.inspect(model).get_property_by_column(column).key == "meta"
        assert isinstance(model.metadata, sa.MetaData)
    workflow = ModelThreeSteps.create(hero=user)
    execution = workflow.current_execution
    workflow.write_metadata("mapped", "workflow")
    execution.write_metadata("mapped", "execution")
    db.session.commit()
    assert workflow_row(workflow.id)["metadata"]["mapped"] == "workflow"
    assert execution_rows(workflow.id)[0]["metadata"]["mapped"] == "execution"


def test_metadata_round_trip_persists_only_on_commit(user):
    """write_metadata merges in memory and persists with the commit (R-WF-40/41)."""
    workflow = ModelThreeSteps.create(hero=user)
    assert workflow.read_metadata("absent") is None
    workflow.write_metadata("color", {"name": "blue"})
    workflow.write_metadata("size", 3)
    assert workflow.read_metadata("color") == {"name": "blue"}
    assert workflow_row(workflow.id)["metadata"] in (None, {})
    db.session.commit()
    stored = workflow_row(workflow.id)["metadata"]
    assert stored["color"] == {"name": "blue"}
    assert stored["size"] == 3


@pytest.mark.backends("sqlite", "mysql")
def test_unparsable_metadata_reads_as_none(user):
    """Stored metadata text that is not JSON reads as None (R-WF-40)."""
    workflow_id = ModelThreeSteps.create(hero=user).id
    with external_writer() as connection:
        connection.execute(
            sa.text(
                "UPDATE geneva_drive_workflows SET metadata = 'not json{' "
                "WHERE id = :id"
            ),
            {"id": workflow_id},
        )
    db.session.expunge_all()
    loaded = ModelThreeSteps.get(workflow_id)
    assert loaded.read_metadata("anything") is None
    assert loaded.step_job_options == {}


def test_step_job_options_are_validated_and_stored(user, geneva_jobs):
    """step_job_options validates, stores in metadata and applies to the first enqueue
    (R-WF-15, R-WF-42/43).
    """
    workflow = ModelThreeSteps.create(
        hero=user, step_job_options={"queue": "instance", "priority": 3}
    )
    assert workflow.step_job_options == {"queue": "instance", "priority": 3}
    stored = workflow_row(workflow.id)["metadata"]
    assert stored["step_job_options"] == {"queue": "instance", "priority": 3}
    assert geneva_jobs.enqueued[0].queue == "instance"
    assert geneva_jobs.enqueued[0].priority == 3


def test_step_job_options_assignment_validates_with_context(user):
    """Invalid instance job options raise with the '<Type>.step_job_options=' context
    (R-WF-43).
    """
    workflow = ModelThreeSteps.create(hero=user)
    with pytest.raises(
        StepConfigurationError, match=r"ModelThreeSteps\.step_job_options="
    ):
        workflow.step_job_options = {"colour": "red"}
    with pytest.raises(StepConfigurationError):
        ModelThreeSteps.create(hero=make_user(), step_job_options={"priority": "high"})


def test_step_job_options_none_stores_null(user):
    """Assigning None stores null under the key and reads back as {} (R-WF-43)."""
    workflow = ModelThreeSteps.create(hero=user, step_job_options={"queue": "q"})
    workflow.step_job_options = None
    db.session.commit()
    stored = workflow_row(workflow.id)["metadata"]
    assert "step_job_options" in stored
    assert stored["step_job_options"] is None
    assert workflow.step_job_options == {}


def test_metadata_is_not_part_of_uniqueness(user):
    """Different metadata does not make a duplicate acceptable (R-WF-44)."""
    ModelThreeSteps.create(hero=user, step_job_options={"queue": "a"})
    with pytest.raises(DuplicateWorkflowError):
        ModelThreeSteps.create(hero=user, step_job_options={"queue": "b"})


# -- timestamps (R-DM-23) ----------------------------------------------------------------


def _stored_datetime(value):
    """A datetime column's value as the driver returns it, without our type: SQLite
    hands back the stored text."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def test_datetimes_are_stored_as_naive_utc_with_microseconds(user):
    """A clock in UTC+5 with microseconds stores the UTC wall time, microseconds kept,
    on every database (R-DM-23).
    """
    plus_five = timezone(timedelta(hours=5))
    local = datetime(2030, 3, 1, 14, 30, 5, 123456, tzinfo=plus_five)
    stored = local.astimezone(UTC).replace(tzinfo=None)
    assert stored == datetime(2030, 3, 1, 9, 30, 5, 123456, tzinfo=UTC).replace(
        tzinfo=None
    )
    with clock.frozen(local):
        workflow = ModelThreeSteps.create(hero=user)
        perform_next_step(workflow)
    columns = {
        "geneva_drive_workflows": ("created_at", "updated_at"),
        "geneva_drive_step_executions": (
            "scheduled_for",
            "started_at",
            "completed_at",
            "finished_at",
            "created_at",
        ),
    }
    workflow_id = workflow.id
    db.session.commit()
    reader = db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    with reader as connection:
        for table, names in columns.items():
            key = "id" if table == "geneva_drive_workflows" else "workflow_id"
            row = connection.execute(
                sa.text(
                    f"SELECT {', '.join(names)} FROM {table} WHERE {key} = :id "
                    "ORDER BY created_at, id"
                ),
                {"id": workflow_id},
            ).first()
            found = {
                name: _stored_datetime(value)
                for name, value in zip(names, row, strict=True)
            }
            assert found == dict.fromkeys(names, stored), table
