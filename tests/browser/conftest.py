"""Browser fixtures: the admin app on a real server thread and headless Chromium.

Debian's Chromium (``/usr/bin/chromium``) is driven by the ``playwright`` package;
``playwright install`` is never used. Locally the suite is skipped when either is
missing; with ``CI=true`` a missing browser is an error (STYLE §8).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jinja2 import StrictUndefined
from werkzeug.serving import make_server

from tests.admin import workflows  # noqa: F401 - registers the workflow classes
from tests.admin.conftest import ADMIN_CONFIG
from tests.conftest import IN_CI
from tests.engine.schedules.support import declare  # noqa: F401 - fixture (R-SCHED-36)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / ".ci" / "artifacts"


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install playwright)"
    return None


@pytest.fixture
def app_config() -> dict[str, Any]:
    """The standalone admin at /geneva (R-ADM-01)."""
    return dict(ADMIN_CONFIG)


def body_closed_before_sending(wsgi_app: Any) -> Any:
    """Wrap ``wsgi_app`` so each response body is read and closed before it is sent.

    Werkzeug's development server skips ``close()`` on the response iterable when
    the browser drops the connection mid-request (the read after the response raises
    ``ConnectionResetError`` in its ``finally``). A static file served by
    ``send_file`` then stays open until the garbage collector finds it, and its
    ``ResourceWarning`` fails whichever test is running (CI, stop 27). Reading the
    body first closes the file on every path; the admin sends no streamed response.
    """

    def application(environ: Any, start_response: Any) -> list[bytes]:
        body_chunks = wsgi_app(environ, start_response)
        try:
            return [b"".join(body_chunks)]
        finally:
            close = getattr(body_chunks, "close", None)
            if close is not None:
                close()

    return application


@pytest.fixture
def live_url(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 from a server thread; yield its base URL."""
    app.jinja_env.undefined = StrictUndefined
    server = make_server("127.0.0.1", 0, body_closed_before_sending(app), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=30)
        server.server_close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Chromium, launched once per test module (each test gets a context
    of its own; parallel runs keep a module in one worker, see
    ``tests/support/parallel_runs.py``); skip or fail if missing.

    Module-scoped, not session-scoped: while Playwright's sync API runs, its event
    loop is the thread's running loop, and tests elsewhere call ``asyncio.run``.
    """
    reason = _missing()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"browser tests must run in CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


def _pages(browser: Any, *, bypass_csp: bool) -> Iterator[Any]:
    """Yield a page of a new browser context that records dialogs."""
    context = browser.new_context(bypass_csp=bypass_csp)
    try:
        tab = context.new_page()
        dialogs: list[str] = []
        tab.on(
            "dialog",
            lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()),
        )
        tab.geneva_dialogs = dialogs
        yield tab
    finally:
        context.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A headless Chromium page; records dialogs (an injected script would open one).

    Skipped locally when Chromium or playwright is missing; an error under CI=true.
    """
    yield from _pages(chromium, bypass_csp=False)


@pytest.fixture
def page_without_csp(chromium: Any) -> Iterator[Any]:
    """Like ``page``, but the browser ignores the Content-Security-Policy header.

    Our CSP already blocks inline scripts and handlers (R-ADM-06), so an unescaped
    ``<script>`` would not open a dialog on ``page``; here it would. Escaping tests
    use this page so that "no dialog fired" checks the escaping, not the CSP.
    """
    yield from _pages(chromium, bypass_csp=True)
