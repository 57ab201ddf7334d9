"""Helpers of the step execution list/detail tests: workflows run through the engine."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.admin.support import new_user
from tests.admin.workflows import AdminResumable
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows

SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"


class ExecDetailTimeout(Exception):
    """Raised by :class:`ExecDetailFlaky` (a name the policy matches)."""


class ExecDetailFlaky(geneva.Workflow):
    """A step that always times out; reattempted twice, 30 s apart, then paused."""

    exception_policies = [
        on_exception(ExecDetailTimeout, action="reattempt", wait=30, max_reattempts=2)
    ]

    @step
    def call_api(self):
        raise ExecDetailTimeout(f"the API timed out {SCRIPT}")


def detail_url(execution_id: Any) -> str:
    """URL of an execution's detail page in the standalone admin (R-ADM-14)."""
    return f"/geneva/step-executions/{execution_id}"


def listed_ids(html: str) -> list[str]:
    """The execution ids of the rows of a list page, in page order."""
    return re.findall(r'<tr data-execution-id="([^"]+)"', html)


def flaky_workflow() -> Any:
    """An ExecDetailFlaky whose step raised once: reattempt 1 of 2 is scheduled."""
    workflow = ExecDetailFlaky.create(hero=new_user("flaky@example.com"))
    with pytest.raises(ExecDetailTimeout):
        perform_next_step(workflow)
    return workflow


def finished_resumable_chain() -> tuple[Any, list[Any]]:
    """An AdminResumable run to the end, one interruptible execution at a time.

    The walk over five items stops every two items, so ``walk`` runs as a chain
    of three executions (the first two ``continued`` with a cursor), then ``done``
    runs once.

    Returns:
        ``(workflow id, [the four stored execution rows, oldest first])``.
    """
    workflow = AdminResumable.create(hero=new_user("chain@example.com"))
    workflow_id = workflow.id
    for _ in range(4):
        perform_next_step(workflow)
    rows = execution_rows(workflow_id)
    assert [(row["step_name"], row["outcome"]) for row in rows] == [
        ("walk", "continued"),
        ("walk", "continued"),
        ("walk", "success"),
        ("done", "success"),
    ], rows
    return workflow_id, rows


def overdue_by(delta: timedelta) -> Any:
    """``now - delta`` as an aware UTC datetime."""
    from flask_geneva.core import clock

    return clock.now() - delta
