"""The documented typing pattern also holds at runtime (docs: Typing, issue 15).

mypy checks ``tests/typing_checks/check_workflow_types.py`` statically; this test
imports it to show that the ``TYPE_CHECKING`` pattern gives Python the model
class built on ``db.Model``.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import StepExecutionMixin
from flask_geneva import WorkflowMixin
from tests.typing_checks import check_workflow_types as sample

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent


def test_the_typing_pattern_declares_a_mapped_workflow():
    """Signup subclasses the runtime geneva.Workflow, which is a WorkflowMixin."""
    assert issubclass(sample.Signup, sample.geneva.Workflow)
    assert issubclass(sample.geneva.Workflow, WorkflowMixin)
    assert issubclass(sample.geneva.Workflow, sample.db.Model)
    assert issubclass(sample.geneva.StepExecution, StepExecutionMixin)
    assert sample.geneva.workflow_class("Signup") is sample.Signup
    assert [s.name for s in sample.Signup.step_collection()] == [
        "send_welcome",
        "send_reminder",
    ]
    assert sa.inspect(sample.Signup).polymorphic_identity == "Signup"
