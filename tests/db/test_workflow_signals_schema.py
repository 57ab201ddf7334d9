"""The add_workflow_signals install unit and life without it (R-WSIG-02..04)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from flask_geneva import GenevaError
from flask_geneva import StepConfigurationError
from flask_geneva import step
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.common_workflows import WaitsForGo
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer
from tests.support.workflow import workflow_row


class SigSchemaPlain(geneva.Workflow):
    @step
    def first(self):
        self.hero.counter += 1


@pytest.fixture
def without_signals(without_unit):
    without_unit("add_workflow_signals")


def test_the_unit_is_detected_when_installed(app):
    """The table and the three columns are detected together (R-WSIG-04, R-DM-30)."""
    assert optional_columns(db.session).workflow_signals
    db.session.rollback()
    inspector = sa.inspect(db.engine)
    assert "geneva_drive_signals" in inspector.get_table_names()
    columns = {c["name"] for c in inspector.get_columns("geneva_drive_step_executions")}
    assert {"signal_id", "waiting_since", "wait_deadline"} <= columns


def test_the_schema_refuses_a_second_execution_beside_a_waiting_one(user):
    """The suite's schema (every install unit on a server, ``db.create_all()``
    on SQLite) has the wide one-active index: PostgreSQL and SQLite refuse a
    scheduled execution beside a waiting one; MySQL/MariaDB keep the narrow
    generated-column index (R-DM-17, R-WSIG-16)."""
    workflow_id = SigSchemaPlain.create(hero=user).id
    db.session.commit()
    table = executions_table()
    with external_writer() as connection:
        connection.execute(
            sa.update(table)
            .where(table.c.workflow_id == workflow_id)
            .values(state="waiting")
        )
        row = connection.execute(
            sa.select(table).where(table.c.workflow_id == workflow_id)
        ).one()
    copy = {
        key: value
        for key, value in row._mapping.items()
        if key != "id" and key in table.c
    }
    copy["state"] = "scheduled"
    refused = False
    try:
        with external_writer() as connection:
            connection.execute(sa.insert(table).values(**copy))
    except sa.exc.IntegrityError:
        refused = True
    assert refused is (db.engine.dialect.name in ("postgresql", "sqlite"))


def test_without_the_unit_other_workflows_run(user, without_signals):
    """Without the unit nothing else changes (R-WSIG-04)."""
    assert not optional_columns(db.session).workflow_signals
    db.session.rollback()
    workflow = speedrun_workflow(SigSchemaPlain.create(hero=user))
    assert workflow.state == "finished"


def test_without_the_unit_a_wait_for_step_fails_naming_install(user, without_signals):
    """A wait_for step fails loudly, workflow paused (R-WSIG-04, R-EXE-15)."""
    workflow = WaitsForGo.create(hero=user)
    with pytest.raises(StepConfigurationError, match="flask geneva install"):
        speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "paused"
    table = sa.table(
        "geneva_drive_step_executions",
        sa.column("workflow_id"),
        sa.column("state"),
        sa.column("error_message"),
    )
    with db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        row = connection.execute(
            sa.select(table.c.state, table.c.error_message).where(
                table.c.workflow_id == workflow.id
            )
        ).one()
    assert row.state == "failed"
    assert "add_workflow_signals" in row.error_message


def test_without_the_unit_signal_raises_naming_install(user, without_signals):
    """workflow.signal() raises before writing anything (R-WSIG-04)."""
    workflow = SigSchemaPlain.create(hero=user)
    with pytest.raises(GenevaError, match="flask geneva install"):
        workflow.signal("go")
