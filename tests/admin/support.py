"""Helpers of the admin tests: create workflows in given states, read pages."""

from __future__ import annotations

import re
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva.testing import perform_next_step
from tests.admin.workflows import AdminFailing
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer

#: When :func:`store_executions` starts its executions (long before any test runs).
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


#: The filters of the workflow list's query string (R-ADM-11).
WORKFLOW_LIST_FILTERS = [
    "type",
    "state",
    "hero_type",
    "hero_id",
    "created_from",
    "created_to",
    "error_class",
    "overdue",
    "q",
    "parent",
]


def listed(client: Any, **params: Any) -> list[str]:
    """The workflow ids on the workflow list page for ``params``, in page order."""
    response = client.get("/geneva/workflows/", query_string=params)
    assert response.status_code == 200, params
    return re.findall(
        r'<tr data-workflow-id="([^"]+)"', response.get_data(as_text=True)
    )


def new_user(email: str = "hero@example.com") -> Any:
    """A committed hero row."""
    user = User(email=email)
    db.session.add(user)
    db.session.commit()
    return user


def ready_workflow() -> Any:
    """A committed ``ready`` AdminTwoStep with its first step scheduled."""
    return AdminTwoStep.create(hero=new_user())


def paused_workflow() -> Any:
    """A committed ``paused`` AdminTwoStep (paused from the API)."""
    workflow = ready_workflow()
    workflow.pause()
    return workflow


def failed_workflow() -> Any:
    """An AdminFailing whose step raised; the default policy paused it."""
    workflow = AdminFailing.create(hero=new_user("failing@example.com"))
    with pytest.raises(RuntimeError):
        perform_next_step(workflow)
    return workflow


def detail_url(workflow_id: Any) -> str:
    """URL of a workflow's detail page in the standalone admin."""
    return f"/geneva/workflows/{workflow_id}"


def action_url(workflow_id: Any) -> str:
    """URL the buttons post to."""
    return f"/geneva/workflows/{workflow_id}/action"


def paused_resumable_workflow() -> Any:
    """An AdminResumable whose walk ran one chunk (cursor stored), then paused."""
    from flask_geneva.testing import run_iterations
    from tests.admin.workflows import AdminResumable

    workflow = AdminResumable.create(hero=new_user("walker@example.com"))
    run_iterations(workflow, 2)
    workflow.pause()
    return workflow


def store_executions(
    workflow_id: Any, count: int, *, steps: tuple[str, ...] = ("first",)
) -> list[str]:
    """Add ``count`` completed executions, 5 min apart from T0 (older than the
    workflow's own scheduled one); ``steps[n * len(steps) // count]`` names
    execution n. Returns every execution id of the workflow, oldest first."""
    rows = []
    for n in range(count):
        start = T0 + timedelta(minutes=5 * n)
        rows.append(
            {
                "workflow_id": workflow_id,
                "step_name": steps[n * len(steps) // count],
                "state": "completed",
                "outcome": "success",
                "scheduled_for": start,
                "started_at": start + timedelta(milliseconds=3),
                "completed_at": start + timedelta(milliseconds=40),
                "finished_at": start + timedelta(milliseconds=40),
                "created_at": start,
                "updated_at": start,
            }
        )
    with external_writer() as connection:
        connection.execute(sa.insert(executions_table()), rows)
    return [str(row["id"]) for row in execution_rows(workflow_id)]


def store_finished(
    workflow_id: Any, finished: list[tuple[datetime, str, str]], step: str = "first"
) -> None:
    """Add executions of the workflow that finished at the given times, as
    ``(finished_at, state, outcome)``, each started 20 ms before it ended (the
    overview's throughput charts, R-ADM-130)."""
    rows = []
    for at, state, outcome in finished:
        started = at - timedelta(milliseconds=20)
        rows.append(
            {
                "workflow_id": workflow_id,
                "step_name": step,
                "state": state,
                "outcome": outcome,
                "scheduled_for": started,
                "started_at": started,
                **{
                    f"{name}_at": at if name == state else None
                    for name in ("completed", "failed", "canceled", "skipped")
                },
                "finished_at": at,
                "created_at": started,
                "updated_at": at,
            }
        )
    with external_writer() as connection:
        connection.execute(sa.insert(executions_table()), rows)
