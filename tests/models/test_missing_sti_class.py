"""Rows whose type names no class load as the base Workflow (R-STI-02/03)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import StepNotDefinedError
from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_row
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row


class MissingStiKnown(geneva.Workflow):
    @step
    def work(self):
        pass


def _orphan(user):
    workflow = MissingStiKnown.create(hero=user)
    ids = workflow.id, workflow.current_execution.id
    db.session.rollback()  # end the read snapshot before the external update
    update_workflow(ids[0], type="RemovedWorkflowClass")
    db.session.expunge_all()
    return ids


def test_unknown_type_loads_as_the_base_class(user):
    """An unknown type instantiates geneva.Workflow (R-STI-02)."""
    workflow_id, _ = _orphan(user)
    loaded = geneva.Workflow.get(workflow_id)
    assert type(loaded) is geneva.Workflow
    assert loaded.type == "RemovedWorkflowClass"
    assert len(loaded.steps) == 0
    listed = db.session.scalars(sa.select(geneva.Workflow)).all()
    assert [type(w) for w in listed] == [geneva.Workflow]


def test_known_types_resolve_normally(user):
    """Known types load as their class, next to orphans (R-STI-02, R-STI-04)."""
    _orphan(user)
    known_id = MissingStiKnown.create(hero=user).id
    db.session.expunge_all()
    loaded = {w.id: type(w) for w in db.session.scalars(sa.select(geneva.Workflow))}
    assert loaded[known_id] is MissingStiKnown
    assert sorted(t.__name__ for t in loaded.values()) == [
        "MissingStiKnown",
        "Workflow",
    ]
    assert [w.id for w in db.session.scalars(sa.select(MissingStiKnown))] == [known_id]


def test_executing_an_orphan_fails_and_pauses(user):
    """Executing an orphan's execution fails it and pauses the workflow (R-STI-03,
    R-EXE-14).
    """
    workflow_id, execution_id = _orphan(user)
    with pytest.raises(
        StepNotDefinedError, match="'work' is not defined in RemovedWorkflowClass"
    ):
        Executor.execute(execution_id)
    row = execution_row(execution_id)
    assert (row["state"], row["outcome"]) == ("failed", "failed")
    assert workflow_row(workflow_id)["state"] == "paused"
