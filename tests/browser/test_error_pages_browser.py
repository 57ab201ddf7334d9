"""The admin's 400/403/404/500 pages in Chromium: in the layout, navigable (R-ADM-47).

Each page is reached the way an operator meets it (a mistyped URL, a form posted
without its token or without permission, a failing page), checked for the layout
and its links, measured for sideways scrolling at three sizes, and saved as a
screenshot.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.admin.conftest import ADMIN_CONFIG
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.browser

SIZES = [(1440, 900), (1280, 800), (390, 844)]

#: Post a form to the page's own action endpoint, with or without the CSRF token.
POST_ACTION = """([url, token]) => {
  const form = document.createElement("form");
  form.method = "post";
  form.action = url;
  if (token) {
    const field = document.createElement("input");
    field.type = "hidden"; field.name = "csrf_token"; field.value = token;
    form.appendChild(field);
  }
  const action = document.createElement("input");
  action.type = "hidden"; action.name = "action"; action.value = "pause";
  form.appendChild(action);
  document.body.appendChild(form);
  form.submit();
}"""


@pytest.fixture
def app_config() -> dict[str, Any]:
    """The standalone admin; a failing view answers 500 instead of raising."""
    return dict(ADMIN_CONFIG, PROPAGATE_EXCEPTIONS=False)


def _check(page: Any, status: int, title: str, name: str) -> None:
    section = page.locator(".geneva-error-page")
    assert section.get_attribute("data-geneva-status") == str(status)
    assert page.inner_text(".geneva-error-page h2") == f"{status} {title}"
    assert page.locator(".navbar .navbar-brand").count() == 1
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        scroll_width, inner_width = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert scroll_width <= inner_width, (name, width)
        page.screenshot(
            path=str(ARTIFACTS / f"admin-error-{name}-{width}x{height}.png"),
            full_page=True,
        )
    page.set_viewport_size({"width": 1280, "height": 800})


def test_each_error_page_is_styled_inside_the_admin(app, live_url, page):
    """400, 403, 404 and 500 under the admin show its layout and links; the links lead back into the admin (R-ADM-47)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def explode() -> str:
        raise RuntimeError("the database is gone")

    app.add_url_rule("/geneva/explode", "explode", explode)
    workflow_id = ready_workflow().id
    db.session.remove()

    response = page.goto(f"{live_url}/geneva/no-such-page")
    assert response.status == 404
    _check(page, 404, "Not found", "404")
    page.click(".geneva-error-nav >> text=Workflows")
    page.wait_for_url("**/geneva/workflows/")
    assert page.locator(f'tr[data-workflow-id="{workflow_id}"]').count() == 1

    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    token = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    with page.expect_navigation():
        page.evaluate(POST_ACTION, [f"/geneva/workflows/{workflow_id}/action", ""])
    _check(page, 400, "Bad request", "400")
    assert "missing or invalid CSRF token" in page.inner_text(".geneva-error-page")

    app.config["GENEVA_ADMIN_CAN_ACT"] = lambda: False
    page.goto(f"{live_url}/geneva/workflows/{workflow_id}")
    with page.expect_navigation():
        page.evaluate(POST_ACTION, [f"/geneva/workflows/{workflow_id}/action", token])
    _check(page, 403, "Forbidden", "403")

    response = page.goto(f"{live_url}/geneva/explode")
    assert response.status == 500
    _check(page, 500, "Server error", "500")
    assert "the database is gone" not in page.inner_text("body")
    page.click(".geneva-error-nav >> text=Overview")
    page.wait_for_url("**/geneva/")
    assert page.geneva_dialogs == []


def test_other_pages_of_the_host_keep_their_error_page(live_url, page):
    """A 404 outside the admin's URL is the host's own page, not the admin's (R-ADM-47)."""
    response = page.goto(f"{live_url}/shop/nothing")
    assert response.status == 404
    assert page.locator(".geneva-error-page").count() == 0
    assert page.locator(".navbar").count() == 0
