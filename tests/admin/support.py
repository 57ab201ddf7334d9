"""Helpers of the admin tests: create workflows in given states, read pages."""

from __future__ import annotations

from typing import Any

import pytest

from flask_geneva.testing import perform_next_step
from tests.admin.workflows import AdminFailing
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import User
from tests.apps.basic import db


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
