"""Without the optional metadata columns nothing is recorded and nothing fails (R-PDR-06, R-DM-34, R-DM-35)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import on_exception
from flask_geneva import reset_column_caches
from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.basic import geneva


class NoMetadataFlaky(Exception):
    """Raised by the test step."""


class NoMetadataWorkflow(geneva.Workflow):
    exception_policies = [
        on_exception(NoMetadataFlaky, action="reattempt", max_reattempts=2)
    ]

    @step
    def boom(self):
        raise NoMetadataFlaky("still handled")


def _drop(table: str, columns: tuple[str, ...]) -> None:
    db.session.remove()
    quote = db.engine.dialect.identifier_preparer.quote
    with db.engine.begin() as connection:
        if db.engine.dialect.name == "sqlite":
            # SQLite refuses to drop an indexed column (error_class_name,
            # R-DM-16, R-ADM-154).
            for index in ("recorded_errors", "on_error_class_name"):
                connection.execute(
                    sa.text(
                        "DROP INDEX IF EXISTS "
                        f"index_geneva_drive_step_executions_{index}"
                    )
                )
        for column in columns:
            connection.execute(
                sa.text(f"ALTER TABLE {quote(table)} DROP COLUMN {quote(column)}")
            )
    reset_column_caches()


def test_policies_and_operator_actions_work_without_metadata_columns(user, geneva_jobs):
    """Without metadata/error_class_name columns, policies, counting and operator actions still work (R-PDR-06, R-DM-34, R-DM-35, R-CNT-03)."""
    try:
        # Inside the try: a drop that fails after the first one still has the
        # shared server schema rebuilt for the next test (finally).
        _drop("geneva_drive_step_executions", ("metadata", "error_class_name"))
        _drop("geneva_drive_workflows", ("metadata",))
        workflow = NoMetadataWorkflow.create(hero=user)
        for _ in range(3):
            with pytest.raises(NoMetadataFlaky):
                perform_next_step(workflow)
        db.session.refresh(workflow)
        # Two reattempts, then the terminal pause: counting works from outcomes alone.
        assert workflow.state == "paused"
        rows = db.session.execute(
            sa.text(
                "SELECT state, outcome, error_message FROM geneva_drive_step_executions "
                "ORDER BY id"
            )
        ).all()
        assert [(r.state, r.outcome) for r in rows] == [
            ("completed", "reattempted"),
            ("completed", "reattempted"),
            ("failed", "failed"),
        ]
        assert rows[-1].error_message == "still handled"
        execution = workflow.execution_history[-1]
        assert execution.read_metadata("policy_decision") is None
        assert workflow.read_metadata("operator_actions") is None
        workflow.resume(actor="ops")
        db.session.refresh(workflow)
        assert workflow.state == "ready"
    finally:
        db.session.remove()
        from tests import conftest

        conftest._server_schema_ready = False
        reset_column_caches()
