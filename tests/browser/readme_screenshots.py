"""Regenerate the admin screenshots of the README (issues 21, 39).

Fills a scratch SQLite database with :func:`tests.browser.admin_pages.seed_admin`
and :func:`~tests.browser.admin_pages.seed_throughput`, serves the standalone
admin on a local port and captures, with Debian's Chromium at 1280 px, the
overview at a glance, the step executions list and a workflow's page into
``docs/images/``::

    python -m tests.browser.readme_screenshots
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

from werkzeug.serving import WSGIRequestHandler
from werkzeug.serving import make_server

from tests.admin import workflows  # noqa: F401 - registers the workflow classes
from tests.admin.conftest import ADMIN_CONFIG
from tests.apps.basic import create_app
from tests.apps.basic import db
from tests.browser.admin_pages import seed_admin
from tests.browser.admin_pages import seed_throughput
from tests.browser.conftest import CHROMIUM
from tests.browser.conftest import CHROMIUM_ARGS

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
#: README image name -> the element its capture starts at (default: the top).
STARTS = {"admin-overview.png": "h3:has-text('At a glance')"}
#: README image name -> (page of seed_admin, height of the captured part, px),
#: in the order taken: the overview's day of executions is added last, so the
#: executions list shows seed_admin's own rows.
SHOTS = {
    "admin-executions.png": ("executions", 620),
    "admin-workflow.png": ("workflow_reattempted", 800),
    "admin-overview.png": ("overview", 500),
}
#: README image name -> what is seeded just before it is taken.
SEEDS_BEFORE = {"admin-overview.png": seed_throughput}


def main() -> None:
    """Write the README screenshots; print their paths and sizes."""
    from playwright.sync_api import sync_playwright

    folder = tempfile.mkdtemp(prefix="geneva-readme-")
    # A deployed admin has GENEVA_ADMIN_ACCESS set: no "open to everyone" banner.
    app = create_app(
        f"sqlite:///{folder}/admin.sqlite3",
        **ADMIN_CONFIG,
        GENEVA_ADMIN_ACCESS=lambda: True,
    )
    with app.app_context():
        db.create_all()
        with app.test_request_context():
            pages = seed_admin()

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, *args: object, **kwargs: object) -> None:
            pass

    server = make_server(
        "127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    IMAGES.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
            tab = browser.new_page(viewport={"width": 1280, "height": 800})
            for name, (page_name, height) in SHOTS.items():
                if name in SEEDS_BEFORE:
                    with app.app_context(), app.test_request_context():
                        SEEDS_BEFORE[name]()
                tab.goto(base + pages[page_name])
                target = IMAGES / name
                top = 0.0
                if name in STARTS:
                    box = tab.locator(STARTS[name]).bounding_box()
                    assert box is not None, STARTS[name]
                    top = max(box["y"] - 8, 0.0)
                tab.screenshot(
                    path=str(target),
                    clip={"x": 0, "y": top, "width": 1280, "height": height},
                    full_page=True,
                )
                sys.stdout.write(f"{target} ({target.stat().st_size // 1024} KiB)\n")
            browser.close()
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
