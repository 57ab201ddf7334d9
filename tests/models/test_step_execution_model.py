"""StepExecution accessors: validation, metadata, chains, definition, execute and
queries (SPEC §4.1, §4.4, §4.5)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

import pytest
import sqlalchemy as sa

from flask_geneva import Outcome
from flask_geneva import on_exception
from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from flask_geneva.testing import run_iterations
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import EmptyTwoSteps
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import make_user
from tests.support.workflow import update_execution

T0 = datetime(2030, 5, 4, 10, 0, tzinfo=UTC)


class Flaky(Exception):
    """A step failure."""


class ModelFlaky(geneva.Workflow):
    exception_policies = [on_exception(Flaky, action="reattempt", max_reattempts=3)]

    @step
    def flaky(self):
        raise Flaky("flaked")


class ModelChunks(geneva.Workflow):
    @resumable_step(max_iterations=1)
    def walk(self, it):
        for _item in it.iterate_over([1, 2, 3]):
            pass

    @step
    def tail(self):
        pass


class ModelLater(geneva.Workflow):
    @step(wait=timedelta(hours=1))
    def later(self):
        pass


def _reload(execution_id):
    db.session.expire_all()
    return db.session.get(geneva.StepExecution, execution_id)


# -- validation (R-SE-04) --------------------------------------------------------------


@pytest.mark.parametrize("missing", ["step_name", "scheduled_for"])
def test_step_name_and_scheduled_for_are_required(user, missing):
    """An execution without step_name or scheduled_for is refused by the database
    and nothing is stored (R-SE-04)."""
    workflow_id = EmptyTwoSteps.create(hero=user).id
    values = {
        "workflow_id": workflow_id,
        "step_name": "second",
        "scheduled_for": clock.now(),
        "state": "canceled",
    }
    del values[missing]
    db.session.add(geneva.StepExecution(**values))
    with pytest.raises(sa.exc.IntegrityError, match=missing):
        db.session.commit()
    db.session.rollback()
    assert len(execution_rows(workflow_id)) == 1


def test_an_outcome_outside_the_list_is_refused(user):
    """Assigning an outcome that is not NULL nor one of §4.2 raises ValueError naming
    the allowed ones; nothing is stored (R-SE-04)."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    with pytest.raises(ValueError, match=r"outcome must be one of 'success'.*'bogus'"):
        execution.outcome = "bogus"
    with pytest.raises(ValueError, match="'sucess'"):
        geneva.StepExecution(
            workflow_id=workflow.id,
            step_name="second",
            scheduled_for=clock.now(),
            outcome="sucess",
        )
    db.session.commit()
    assert execution_row(execution.id)["outcome"] is None


def test_every_outcome_and_null_are_accepted(user):
    """NULL and each outcome of §4.2 are valid (R-SE-04, R-SE-10)."""
    execution = EmptyTwoSteps.create(hero=user).current_execution
    assert [o.value for o in Outcome] == [
        "success",
        "continued",
        "reattempted",
        "skipped",
        "canceled",
        "failed",
        "recovered",
        "workflow_paused",
    ]
    for outcome in [*Outcome, *(o.value for o in Outcome), None]:
        execution.outcome = outcome
        db.session.commit()
        stored = execution_row(execution.id)["outcome"]
        assert stored == (None if outcome is None else Outcome(outcome).value)


# -- metadata accessors (R-SE-31..33) --------------------------------------------------


def test_reattempt_reason_and_exception_info(user):
    """reattempt_reason and exception_info read the recorded keys; None where they
    are absent (R-SE-31, R-SE-30)."""
    workflow = ModelFlaky.create(hero=user)
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    reattempted, scheduled = workflow.execution_history
    assert reattempted.reattempt_reason == "exception_policy"
    info = reattempted.exception_info
    assert set(info) == {"class", "message", "backtrace"}
    assert info["class"] == f"{__name__}.Flaky"
    assert info["message"] == "flaked"
    assert info["backtrace"]
    assert all(isinstance(frame, str) for frame in info["backtrace"])
    assert (scheduled.reattempt_reason, scheduled.exception_info) == (None, None)


@pytest.mark.backends("sqlite", "mysql")
def test_unparsable_execution_metadata_reads_as_empty(user):
    """Stored metadata text that is not JSON reads as {} (R-SE-32)."""
    workflow = ModelFlaky.create(hero=user)
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    execution_id = workflow.execution_history[0].id
    with external_writer() as connection:
        connection.execute(
            sa.text(
                "UPDATE geneva_drive_step_executions SET metadata = 'not json{' "
                "WHERE id = :id"
            ),
            {"id": execution_id},
        )
    execution = _reload(execution_id)
    assert execution.metadata_dict == {}
    assert execution.read_metadata("reattempt_reason") is None
    assert (execution.reattempt_reason, execution.exception_info) == (None, None)


def test_without_the_metadata_column_writes_are_silent_no_ops(user, without_unit):
    """Without the executions' metadata column, writes do nothing and raise nothing,
    reads return None, and a policy reattempt still works (R-SE-33, R-SE-31)."""
    without_unit("add_step_execution_metadata")
    hero = make_user("no-metadata@example.com")
    workflow = ModelFlaky.create(hero=hero)
    execution = workflow.current_execution
    execution.write_metadata("note", {"kept": False})
    assert execution.read_metadata("note") is None
    db.session.commit()
    with pytest.raises(Flaky):
        perform_next_step(workflow)
    reattempted = _reload(execution.id)
    assert (reattempted.state, reattempted.outcome) == ("completed", "reattempted")
    assert (reattempted.reattempt_reason, reattempted.exception_info) == (None, None)
    assert reattempted.metadata_dict == {}


# -- chains and definitions (R-SE-40, R-SE-43, R-SE-44) -------------------------------


def test_continues_from_and_successor_link_a_chain(user, geneva_jobs):
    """continues_from is the predecessor and successor the execution continuing this
    one; None at the chain's ends and for regular steps (R-SE-40)."""
    workflow = ModelChunks.create(hero=user)
    first = run_iterations(workflow, 1)
    second = first.successor
    assert second is not None
    assert second.continues_from_id == first.id
    assert second.continues_from is first
    assert first.continues_from is None
    assert second.successor is None
    perform_next_step(workflow)
    third = second.successor
    assert third.continues_from is second
    regular = EmptyTwoSteps.create(hero=make_user()).current_execution
    assert (regular.continues_from, regular.successor) == (None, None)


def test_step_definition_is_the_class_step_or_none(user):
    """step_definition is the step of the workflow's class with that name, or None
    for a name the class does not define (R-SE-43)."""
    workflow = EmptyTwoSteps.create(hero=user)
    execution = workflow.current_execution
    assert execution.step_definition is EmptyTwoSteps.step_collection().named("first")
    update_execution(execution.id, step_name="vanished")
    assert _reload(execution.id).step_definition is None


def test_execute_runs_the_executor_with_its_options(user, geneva_jobs):
    """execution.execute() runs the step; max_iterations and interruptible reach the
    executor (R-SE-44)."""
    regular = EmptyTwoSteps.create(hero=user).current_execution
    regular.execute()
    row = execution_row(regular.id)
    assert (row["state"], row["outcome"]) == ("completed", "success")

    workflow = ModelChunks.create(hero=make_user())
    chunk = workflow.current_execution
    chunk.execute(max_iterations=2)  # the step's own max_iterations is 1
    assert (execution_row(chunk.id)["outcome"], execution_row(chunk.id)["cursor"]) == (
        "continued",
        2,
    )
    rest = _reload(chunk.id).successor
    rest.execute(interruptible=False)
    row = execution_row(rest.id)
    assert (row["outcome"], row["cursor"]) == ("success", 3)


# -- queries and predicates (R-SE-46) --------------------------------------------------


def test_ready_to_execute_selects_scheduled_and_due(user, geneva_jobs):
    """ready_to_execute() selects scheduled executions due now, the boundary
    included; not future, running or finished ones (R-SE-46)."""
    with clock.frozen(T0) as frozen:
        due = EmptyTwoSteps.create(hero=user).current_execution.id
        later = ModelLater.create(hero=make_user("later@example.com"))
        later_id = later.current_execution.id
        running = EmptyTwoSteps.create(hero=make_user("running@example.com"))
        running_id = running.current_execution.id
        update_execution(running_id, state="in_progress", started_at=T0)
        done = EmptyTwoSteps.create(hero=make_user("done@example.com"))
        done_id = done.current_execution.id
        update_execution(done_id, state="completed", outcome="success")
        db.session.expire_all()
        selected = set(db.session.scalars(geneva.StepExecution.ready_to_execute()))
        assert {e.id for e in selected} == {due}
        frozen.advance(timedelta(hours=1))
        selected = set(db.session.scalars(geneva.StepExecution.ready_to_execute()))
        assert {e.id for e in selected} == {due, later_id}
        assert {running_id, done_id}.isdisjoint({e.id for e in selected})


@pytest.mark.parametrize(
    ("state", "predicate"),
    [
        ("scheduled", "is_scheduled"),
        ("in_progress", "is_in_progress"),
        ("completed", "is_completed"),
        ("failed", "is_failed"),
        ("canceled", "is_canceled"),
        ("skipped", "is_skipped"),
    ],
)
def test_state_predicates(user, state, predicate):
    """Exactly the predicate of the execution's state is true (R-SE-46)."""
    predicates = [
        "is_scheduled",
        "is_in_progress",
        "is_completed",
        "is_failed",
        "is_canceled",
        "is_skipped",
    ]
    execution_id = EmptyTwoSteps.create(hero=user).current_execution.id
    update_execution(execution_id, state=state)
    execution = _reload(execution_id)
    assert [name for name in predicates if getattr(execution, name)] == [predicate]
