"""Bulk resumes in the admin spread their releases over GENEVA_RELEASE_SPREAD (R-SCH-20)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from datetime import timedelta

from flask_geneva.core import clock
from flask_geneva.policies.release_spread import release_offset
from tests.admin.conftest import csrf_token
from tests.admin.support import failed_workflow
from tests.admin.support import paused_workflow
from tests.admin.test_bulk_all import post_all
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution

LIST = "/geneva/workflows/"
BULK = "/geneva/workflows/bulk"
SPREAD = timedelta(seconds=5)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def as_utc(value):
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def due(workflow):
    return as_utc(execution_rows(workflow.id)[-1]["scheduled_for"])


def overdue_paused():
    workflow = paused_workflow()
    update_execution(
        workflow.current_execution.id, scheduled_for=NOW - timedelta(hours=1)
    )
    return workflow


def test_bulk_resume_of_checked_rows_spreads_each_at_its_offset(client):
    """Preserved and new executions are due at now + offset (R-SCH-20, R-EXT-21/23)."""
    with clock.frozen(NOW):
        workflows = [overdue_paused(), overdue_paused(), failed_workflow()]
        token = csrf_token(client, LIST)
        ids = [w.id for w in workflows]
        page = client.post(
            BULK, data={"csrf_token": token, "action": "resume", "ids": ids}
        )
    assert "Resume: 3 succeeded, 0 refused" in page.get_data(as_text=True)
    for workflow in workflows:
        assert execution_rows(workflow.id)[-1]["state"] == "scheduled"
        assert due(workflow) == NOW + release_offset(workflow.id, SPREAD)
    assert len({due(w) for w in workflows}) == 3


def test_bulk_resume_of_one_checked_row_is_not_spread(client):
    """One workflow is released at once; its overdue time is kept (R-SCH-20, R-SCH-09)."""
    with clock.frozen(NOW):
        workflow = overdue_paused()
        token = csrf_token(client, LIST)
        client.post(
            BULK, data={"csrf_token": token, "action": "resume", "ids": [workflow.id]}
        )
    assert due(workflow) == NOW - timedelta(hours=1)


def test_resume_all_matching_spreads_them(client):
    """'Resume all matching' spreads too (R-SCH-20, R-ADM-23)."""
    with clock.frozen(NOW):
        workflows = [overdue_paused() for _ in range(4)]
        token = csrf_token(client, LIST)
        post_all(client, token, "resume", confirm=True, state="paused")
    for workflow in workflows:
        assert due(workflow) == NOW + release_offset(workflow.id, SPREAD)
