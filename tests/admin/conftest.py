"""Fixtures of the admin tests: the basic app with the standalone admin mounted."""

from __future__ import annotations

import re
from typing import Any

import pytest
from jinja2 import StrictUndefined

from tests.admin import workflows  # noqa: F401 - registers the workflow classes
from tests.engine.schedules.support import declare  # noqa: F401 - fixture (R-SCHED-36)

ADMIN_CONFIG = {"SECRET_KEY": "admin-tests", "GENEVA_ADMIN_ENABLED": True}


@pytest.fixture
def app_config() -> dict[str, Any]:
    """Mount the standalone admin at /geneva (R-ADM-01)."""
    return dict(ADMIN_CONFIG)


@pytest.fixture(autouse=True)
def _strict_templates(app: Any) -> None:
    # A template that touches an undefined name fails the test instead of
    # rendering an empty string (STYLE §8).
    app.jinja_env.undefined = StrictUndefined


def csrf_token(client: Any, url: str) -> str:
    """GET ``url`` and return the CSRF token of its first form."""
    page = client.get(url)
    assert page.status_code == 200, page.data[:500]
    match = re.search(rb'name="csrf_token" type="hidden" value="([^"]+)"', page.data)
    if match is None:
        match = re.search(
            rb'id="csrf_token" name="csrf_token" type="hidden" value="([^"]+)"',
            page.data,
        )
    assert match is not None, "no CSRF token on the page"
    return match.group(1).decode()


#: The workflow list and the URL its bulk forms post to.
WORKFLOW_LIST = "/geneva/workflows/"
WORKFLOW_BULK = "/geneva/workflows/bulk"


def post_bulk(client: Any, action: str, ids: list[Any], **fields: Any) -> Any:
    """POST the bulk ``action`` for the checked ``ids`` with the list page's CSRF
    token (and ``fields``); return the response."""
    token = csrf_token(client, WORKFLOW_LIST)
    return client.post(
        WORKFLOW_BULK,
        data={"csrf_token": token, "action": action, "ids": ids, **fields},
    )


def post_action(
    client: Any,
    workflow_id: Any,
    action: str,
    *,
    follow_redirects: bool = False,
    **fields: Any,
) -> Any:
    """POST the button ``action`` (and ``fields``) for the workflow with the
    CSRF token of its page; return the response."""
    token = csrf_token(client, f"/geneva/workflows/{workflow_id}")
    return client.post(
        f"/geneva/workflows/{workflow_id}/action",
        data={"csrf_token": token, "action": action, **fields},
        follow_redirects=follow_redirects,
    )
