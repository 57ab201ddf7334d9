"""Empty states in Chromium (issue 21; R-ADM-53)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [1440, 1280, 390])
def test_an_empty_admin_explains_what_to_do(live_url, page, width):
    """An empty overview and lists say how a workflow starts and list the defined classes, without sideways scrolling (R-ADM-53, R-ADM-42)."""
    page.set_viewport_size({"width": width, "height": 900 if width == 1440 else 800})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, path in (
        ("overview", "/geneva/"),
        ("workflows", "/geneva/workflows/"),
        ("executions", "/geneva/step-executions/"),
    ):
        page.goto(f"{live_url}{path}")
        empty = page.locator(".geneva-empty-classes").first
        assert empty.is_visible()
        assert "AdminTwoStep" in empty.inner_text()
        assert "create(hero=record)" in page.inner_text(".geneva-empty >> nth=0")
        scroll, inner = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert scroll <= inner, (name, width)
        page.screenshot(
            path=str(ARTIFACTS / f"admin-empty-{name}-{width}.png"), full_page=True
        )
