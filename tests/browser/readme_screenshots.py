"""Regenerate the admin screenshots of the README and the docs (issues 21, 39)
from the example app's demo, as a new user sees it.

Runs ``python -m example_app demo`` with its default data (1,000 users, a
campaign of 20,000 subscribers) on a new SQLite file, waits until every
workflow settled and the demo serves the admin with the workflows it leaves
to try (R-APP-04), logs in as its ``operator`` and captures, with Debian's
Chromium at 1280 px, into ``docs/images/``: the overview at a glance, the
step executions of the payments' flaky ``charge`` step, a payment's page
whose charge raised and was reattempted, and the start page with a hero
found. Then it stops the demo (Ctrl-C). About two and a half minutes on a
busy 2-core machine::

    python -m tests.browser.readme_screenshots
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.browser.conftest import CHROMIUM
from tests.browser.conftest import CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
WIDTH = 1280
#: Image name -> (what it shows, height of the captured part in px), in the
#: order taken; ``tests/test_readme_images.py`` checks the files against it.
SHOTS = {
    "admin-overview.png": ("the overview from 'At a glance'", 500),
    "admin-executions.png": ("the executions of Payment's charge step", 620),
    "admin-workflow.png": ("a payment whose charge was reattempted", 800),
    "admin-start.png": ("the start page, a hero found, a priority typed", 350),
}
#: The demo users' password for this run (the demo prints it too).
PASSWORD = secrets.token_urlsafe(12)
#: Seconds to wait for the demo to settle and serve (its own timeout is 600).
SETTLE_SECONDS = 660


def _wait_for(found: Callable[[], Any], process: Any, seconds: float) -> Any:
    """Poll ``found()`` until it is truthy; fail if the demo exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        if process.poll() is not None:
            raise RuntimeError(f"the demo exited with status {process.returncode}")
        time.sleep(0.5)
    raise TimeoutError(f"the demo did not get there in {seconds} s")


def start_demo() -> tuple[Any, list[str], str]:
    """Start the demo; return its process, its output lines so far (still
    growing) and the admin's URL once it serves the admin with the workflows
    left to try."""
    env = {**os.environ, "EXAMPLE_ADMIN_PASSWORD": PASSWORD, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "example_app", "demo", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        # Ctrl-C (SIGINT) must reach the demo even when this script runs in a
        # shell's background job, where SIGINT is ignored and children inherit it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    threading.Thread(
        target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True
    ).start()

    def serving() -> str | None:
        for line in list(lines):
            if found := re.match(r"serving the admin UI at (\S+) ", line):
                return found.group(1)
        return None

    url = _wait_for(serving, process, SETTLE_SECONDS)
    return process, lines, url


def _clip(tab: Any, name: str, selector: str | None = None) -> None:
    """Capture ``SHOTS[name]``'s height of the page from ``selector``'s top
    (the page's top without one) into ``docs/images/name``."""
    top = 0.0
    if selector is not None:
        box = tab.locator(selector).first.bounding_box()
        assert box is not None, selector
        top = max(box["y"] - 8, 0.0)
    target = IMAGES / name
    tab.screenshot(
        path=str(target),
        clip={"x": 0, "y": top, "width": WIDTH, "height": SHOTS[name][1]},
        full_page=True,
    )
    sys.stdout.write(f"{target} ({target.stat().st_size // 1024} KiB)\n")


def capture(tab: Any, admin: str) -> None:
    """Log in as the demo's operator and take every shot of :data:`SHOTS`."""
    tab.goto(admin)  # the demo's login page first
    tab.select_option('select[name="user"]', "operator")
    tab.fill('input[name="password"]', PASSWORD)
    tab.click("button[type=submit]")
    tab.wait_for_url(f"{admin}**")

    tab.goto(admin)
    _clip(tab, "admin-overview.png", "h3:has-text('At a glance')")

    tab.goto(f"{admin}step-executions/?type=Payment&step_name=charge")
    _clip(tab, "admin-executions.png")

    # A payment whose charge raised, was reattempted and then went through.
    links = tab.locator(
        "table.geneva-list tr:has(.geneva-badge--raised) a[href*='/workflows/']"
    ).evaluate_all("links => links.map(link => link.href)")
    for link in links:
        tab.goto(link)
        if tab.locator("h2 .geneva-badge--finished").count():
            break
    _clip(tab, "admin-workflow.png")

    tab.goto(f"{admin}workflows/")
    tab.click(".geneva-start-link")
    tab.select_option("#geneva-start-type", "Payment")
    tab.select_option("#geneva-start-hero-type", "User")
    tab.fill("#geneva-start-q", "user42")
    tab.click('button[data-geneva-action="find_hero"]')
    tab.click("tr[data-hero-id] a >> nth=0")
    tab.fill("#geneva-start-priority", "10")
    tab.fill("#geneva-start-at", "2030-01-01T09:00")
    tab.locator("#geneva-start-at").blur()
    _clip(tab, "admin-start.png")


def main() -> None:
    """Run the demo, write the screenshots, stop the demo; print the paths."""
    from playwright.sync_api import sync_playwright

    IMAGES.mkdir(parents=True, exist_ok=True)
    process, lines, admin = start_demo()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
            tab = browser.new_page(viewport={"width": WIDTH, "height": 800})
            capture(tab, admin)
            browser.close()
    finally:
        process.send_signal(signal.SIGINT)  # the demo's Ctrl-C: it cleans up
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    # What the demo left to try, as it printed it (R-APP-04).
    output = "".join(lines)
    left = output.find("left for you to try")
    sys.stdout.write(output[left : output.find("serving the admin UI", left)])


if __name__ == "__main__":
    main()
