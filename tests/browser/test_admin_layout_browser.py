"""Density and layout of the admin in Chromium (issue 21; R-ADM-40..48).

Every admin page is opened at 1440x900, 1280x800 and 390x844 (a phone): the page
never scrolls sideways (``scrollWidth <= innerWidth``, measured in the page) and a
full-page screenshot of each goes to the artifacts folder. The list rows are
measured one line high, times read relative with the exact time on hover, and the
UTC/local switch is remembered.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.admin_pages import seed_admin
from tests.browser.conftest import ARTIFACTS

pytestmark = pytest.mark.browser

SIZES = [(1440, 900), (1280, 800), (390, 844)]
RELATIVE = re.compile(r"^(now|in \d+ (s|min|h|d)|\d+ (s|min|h|d) ago)$")
EXACT_UTC = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")

#: Measured in the page: does it scroll sideways?
OVERFLOW = "() => [document.documentElement.scrollWidth, window.innerWidth]"
#: Heights of the list rows (px), in the page's own layout.
ROW_HEIGHTS = (
    "(selector) => Array.from(document.querySelectorAll(selector + ' tbody tr'))"
    ".map(row => row.getBoundingClientRect().height)"
)


def test_every_admin_page_fits_the_window_at_three_sizes(live_url, page):
    """No admin page (overview, class page, the three lists, limits, schedules, the start page, workflow, execution and 404 pages) scrolls sideways at 1440x900, 1280x800 or 390x844 and each has one heading; a screenshot of each is saved (R-ADM-42, R-ADM-46)."""
    pages = seed_admin()
    assert {"signals", "class_page", "workflow_waiting", "execution_waiting"} <= set(
        pages
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    too_wide: list[tuple[str, int, int]] = []
    headings: list[tuple[str, int, int]] = []
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        for name, path in pages.items():
            response = page.goto(f"{live_url}{path}")
            assert response.status == (404 if name.startswith("error") else 200)
            scroll_width, inner_width = page.evaluate(OVERFLOW)
            if scroll_width > inner_width:
                too_wide.append((name, width, scroll_width))
            # One heading per page: the layout's stacked view name is gone (R-ADM-46).
            headings.append(
                (name, page.locator("h2").count(), page.locator("h4").count())
            )
            page.screenshot(
                path=str(ARTIFACTS / f"admin-{name}-{width}x{height}.png"),
                full_page=True,
            )
    assert too_wide == []
    assert [h for h in headings if h[1:] != (1, 0)] == []
    assert page.geneva_dialogs == []


@pytest.mark.parametrize(
    ("path", "table", "rows"),
    [
        ("/geneva/workflows/", ".geneva-workflows", 20),
        ("/geneva/step-executions/", ".geneva-executions", 20),
        # A long idempotency key and payload are cut to their cells (R-WSIG-69).
        ("/geneva/signals/", ".geneva-signals", 2),
    ],
)
def test_list_rows_are_one_line_so_twenty_fit_the_screen(
    live_url, page, path, table, rows
):
    """At 1440x900 every list row is at most 40 px high (about 20 rows on a screen) and the page heading is not doubled (R-ADM-42, R-ADM-46)."""
    seed_admin()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_url}{path}")
    heights = page.evaluate(ROW_HEIGHTS, table)
    assert len(heights) >= rows
    assert max(heights) <= 40, heights
    # One heading: the layout's stacked view name is gone.
    assert page.locator("h4").count() == 0
    assert page.locator("h2").count() == 1


#: Per list table: the visible header cells and their right edges, and whether a
#: secondary column (class, hero, created, ...) is displayed.
PHONE_COLUMNS = """(selector) => {
  const table = document.querySelector(selector);
  const shown = (el) => getComputedStyle(el).display !== "none";
  return {
    headers: Array.from(table.querySelectorAll("thead th")).filter(shown)
      .map(th => [th.innerText.trim(), th.getBoundingClientRect().right]),
    secondary: Array.from(table.querySelectorAll(".geneva-wide, .geneva-hero"))
      .filter(shown).length,
    tallest: Math.max(...Array.from(table.querySelectorAll("tbody tr"))
      .map(row => row.getBoundingClientRect().height)),
  };
}"""


@pytest.mark.parametrize(
    ("page_name", "table", "essential"),
    [
        (
            "workflows",
            ".geneva-workflows",
            ["Id", "State", "Current/next step", "Next run"],
        ),
        ("executions", ".geneva-executions", ["Id", "Workflow", "Step", "State"]),
        ("signals", ".geneva-signals", ["Id", "Workflow", "Name", "State"]),
    ],
)
def test_a_phone_sees_the_essential_columns_of_each_list(
    live_url, page, page_name, table, essential
):
    """At 390x844 the lists hide their secondary columns (class, hero, created, transitioned, started, finished, key, ...), their essential columns lie inside the window without scrolling the table, and rows stay one line (R-ADM-42)."""
    pages = seed_admin()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_url}{pages[page_name]}")
    found = page.evaluate(PHONE_COLUMNS, table)
    inner_width = page.evaluate("() => window.innerWidth")
    assert found["secondary"] == 0
    assert "Class" not in [name for name, _ in found["headers"]]
    edges = dict(found["headers"])
    assert {name: edges[name] <= inner_width for name in essential} == dict.fromkeys(
        essential, True
    ), (edges, inner_width)
    assert found["tallest"] <= 40


def test_times_are_relative_with_the_exact_time_on_hover(live_url, page):
    """List times read "3 min ago" / "in 14 min" on one line, the exact UTC time in the title; detail pages show the exact time (R-ADM-40)."""
    pages = seed_admin()
    page.goto(f"{live_url}{pages['workflows']}")
    times = page.locator(".geneva-workflows time.geneva-time")
    assert times.count() >= 40
    for index in range(times.count()):
        element = times.nth(index)
        assert RELATIVE.match(element.inner_text()), element.inner_text()
        assert EXACT_UTC.match(element.get_attribute("title"))
        assert element.get_attribute("datetime").endswith("Z")
        assert element.bounding_box()["height"] <= 24  # one line
    next_runs = page.locator(".geneva-workflows td.geneva-next-run time")
    texts = [next_runs.nth(i).inner_text() for i in range(next_runs.count())]
    assert {"in 13 min", "in 14 min"} & set(texts)  # due in 14 min at seeding
    assert "7 min ago" in texts

    page.goto(f"{live_url}{pages['workflow_reattempted']}")
    exact = page.locator("time.geneva-time--exact").first
    assert EXACT_UTC.match(exact.inner_text())
    assert RELATIVE.match(exact.get_attribute("title"))


def test_the_utc_local_switch_rewrites_exact_times_and_is_remembered(live_url, page):
    """The UTC/local button shows exact times in the browser's zone and the choice survives a reload; the relative text never changes (R-ADM-41)."""
    pages = seed_admin()
    context = page.context.browser.new_context(timezone_id="Asia/Tokyo")
    tab = context.new_page()
    try:
        tab.goto(f"{live_url}{pages['workflow_reattempted']}")
        exact = tab.locator("time.geneva-time--exact").first
        utc_text = exact.inner_text()
        assert utc_text.endswith(" UTC")
        toggle = tab.locator("[data-geneva-tz]")
        assert toggle.inner_text() == "UTC"
        toggle.click()
        assert toggle.inner_text() == "Local time"
        assert exact.inner_text().endswith(" UTC+09:00")
        assert exact.inner_text()[11:13] == f"{(int(utc_text[11:13]) + 9) % 24:02d}"
        tab.goto(f"{live_url}{pages['workflows']}")
        listed = tab.locator(".geneva-workflows time.geneva-time").first
        assert listed.get_attribute("title").endswith(" UTC+09:00")
        assert RELATIVE.match(listed.inner_text())
        tab.locator("[data-geneva-tz]").click()
        assert listed.get_attribute("title").endswith(" UTC")
    finally:
        context.close()


def test_relative_times_need_no_javascript(live_url, page):
    """With JavaScript off the relative times and exact titles are there (computed by the server); the switch stays hidden (R-ADM-40)."""
    pages = seed_admin()
    context = page.context.browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    try:
        tab.goto(f"{live_url}{pages['executions']}")
        first = tab.locator(".geneva-executions time.geneva-time").first
        assert RELATIVE.match(first.inner_text())
        assert EXACT_UTC.match(first.get_attribute("title"))
        assert not tab.locator("[data-geneva-tz]").is_visible()
    finally:
        context.close()


def _texts(page: Any, selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_inner_texts()]


def test_executions_list_shows_next_run_and_the_error(live_url, page):
    """The executions list has a Next run column, one badge when state and outcome agree, and the error class with the message cut short (whole on hover) (R-ADM-44, R-ADM-46)."""
    pages = seed_admin()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_url}{pages['executions_failed']}")
    assert "Next run" in _texts(page, ".geneva-executions thead th")
    row = page.locator(".geneva-executions tbody tr").first
    assert row.locator(".geneva-badge").count() == 1  # not "failed failed"
    error = row.locator(".geneva-error-cell .geneva-clip")
    assert "GatewayTimeout" in error.inner_text()
    assert "POST https://gateway.example.com/v2/charges" in error.inner_text()
    title = error.get_attribute("title")
    assert title.endswith("reports degraded service")
    # Cut to the cell: the text is wider than the box that shows it.
    assert page.evaluate(
        "(el) => el.scrollWidth > el.clientWidth", error.element_handle()
    )


def test_workflow_page_reads_in_words(live_url, page):
    """The step plan's policy is a sentence, each disabled button's reason is said once, times of operator actions read like the others, waiting is not drawn red (R-ADM-43, R-ADM-45, R-ADM-46)."""
    pages = seed_admin()
    page.goto(f"{live_url}{pages['workflow_reattempted']}")
    policies = " ".join(_texts(page, ".geneva-plan-policy"))
    assert "ExceptionPolicy(" not in policies
    assert "timedelta" not in policies
    assert "class-level: reattempt up to 2 times, 2 s apart, then pause" in policies
    assert "for tests.browser.admin_pages.GatewayTimeout" in policies
    reasons = _texts(page, ".geneva-reason")
    assert len(reasons) == len(set(reasons))
    assert len(set(reasons)) == len({r.split(": ", 1)[1] for r in reasons})
    actions = page.locator(".geneva-operator-actions .geneva-action-at")
    assert actions.count() == 2
    for index in range(2):
        cell = actions.nth(index).locator("time")
        assert EXACT_UTC.match(cell.inner_text())
        assert "." not in cell.inner_text()  # no microseconds
    failed_bar = page.locator(".geneva-chart .bar.st-failed .wait").first
    fill = page.evaluate(
        "(el) => getComputedStyle(el).fill", failed_bar.element_handle()
    )
    assert fill != "rgb(220, 53, 69)"  # the failure colour
    assert page.locator(".geneva-timeline .geneva-badge--failed").count() == 1
    deferred = _texts(page, ".geneva-timeline .geneva-deferred")
    assert "geneva:deferred" not in page.inner_text(".geneva-timeline")
    assert deferred in ([], ["waiting for the dispatcher"])


def test_ended_workflows_have_no_next_step_or_upcoming(live_url, page):
    """A canceled or finished workflow shows no "Next step" and no "upcoming" step; all its disabled buttons share one reason line (R-ADM-45, R-ADM-46)."""
    pages = seed_admin()
    for name in ("workflow_canceled", "workflow_finished"):
        page.goto(f"{live_url}{pages[name]}")
        body = page.inner_text("body")
        assert "Next step" not in body
        assert "upcoming" not in body
        reasons = _texts(page, ".geneva-reason")
        state = name.split("_")[1]
        assert reasons == [
            f"Pause, Resume, Resume from the beginning, Cancel, Skip current step, Run now: "
            f"not possible: workflow is {state}",
            "Recover running step: no step execution is in progress",
        ]


def test_deferred_job_reads_waiting_for_the_dispatcher(live_url, page):
    """The internal job id geneva:deferred is shown as "waiting for the dispatcher" (R-ADM-46)."""
    seed_admin()
    page.goto(f"{live_url}/geneva/workflows/?sort=id&dir=asc")
    page.click(".geneva-workflows tbody tr:first-child td:nth-child(2) a")
    # The click starts the navigation; wait until the workflow page has loaded
    # (read at once, a loaded machine showed the list page's empty result).
    page.wait_for_url(re.compile(r"/geneva/workflows/\d+$"))
    page.wait_for_load_state()
    assert _texts(page, ".geneva-timeline .geneva-deferred") == [
        "waiting for the dispatcher"
    ]
    assert "geneva:deferred" not in page.inner_text("body")


def test_execution_page_shows_the_backtrace_once(live_url, page):
    """A failed execution's page shows its backtrace once, under Error; the metadata points there (R-ADM-48)."""
    pages = seed_admin()
    page.goto(f"{live_url}{pages['execution_failed']}")
    html = page.content()
    assert html.count("in charge_card") == 1
    assert "shown under Error above" in page.inner_text(".geneva-metadata")
    assert page.locator(".geneva-badge--failed").count() == 1 + 0  # header, once


def test_overview_zero_counts_are_not_links(live_url, page):
    """On the overview a count of 0 is plain text; other counts link to their rows (R-ADM-46)."""
    seed_admin()
    page.goto(f"{live_url}/geneva/")
    links = page.locator(".geneva-overview a")
    assert links.count() > 0
    assert "0" not in _texts(page, ".geneva-overview a")
    assert page.locator(".geneva-overview .geneva-zero").count() > 0
    assert page.locator("a.geneva-stuck-count").count() == 0
    assert page.locator("h2").count() == 1


def _measure_and_capture(page: Any, name: str) -> list[tuple[str, int, int]]:
    """Overflow at each size and a screenshot of the page as it is now."""
    too_wide = []
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        scroll_width, inner_width = page.evaluate(OVERFLOW)
        if scroll_width > inner_width:
            too_wide.append((name, width, scroll_width))
        page.screenshot(
            path=str(ARTIFACTS / f"admin-{name}-{width}x{height}.png"), full_page=True
        )
    page.set_viewport_size({"width": 1280, "height": 800})
    return too_wide


def test_confirmation_and_bulk_pages_fit_the_window_at_three_sizes(live_url, page):
    """The confirmation page, the bulk confirmations (checked rows, all matching) and the bulk result fit at the three sizes; screenshots are saved (R-ADM-42)."""
    pages = seed_admin()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    too_wide = []
    page.goto(f"{live_url}{pages['workflow_reattempted']}")
    page.click('button[data-geneva-action="cancel"]')
    page.wait_for_selector('button[data-geneva-confirm="cancel"]')
    too_wide += _measure_and_capture(page, "confirm")
    page.goto(f"{live_url}{pages['workflows_paused']}")
    page.check('tr[data-workflow-id] input[name="ids"]')
    page.click('button[data-geneva-bulk="cancel"]')
    page.wait_for_selector('button[data-geneva-confirm="bulk-cancel"]')
    too_wide += _measure_and_capture(page, "bulk_confirm")
    page.goto(f"{live_url}{pages['workflows_paused']}")
    page.click('button[data-geneva-bulk-all="resume"]')
    page.wait_for_selector('button[data-geneva-confirm="bulk-all-resume"]')
    too_wide += _measure_and_capture(page, "bulk_all_confirm")
    page.click('button[data-geneva-confirm="bulk-all-resume"]')
    page.wait_for_selector(".geneva-bulk-summary")
    too_wide += _measure_and_capture(page, "bulk_result")
    assert too_wide == []


def test_a_long_idempotency_key_does_not_squeeze_the_signals_panel(live_url, page):
    """On the workflow page's signals panel a 100-character idempotency key is cut to its cell (whole on hover), so the payload keeps its width (R-WSIG-67, R-ADM-42)."""
    pages = seed_admin()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_url}{pages['workflow_waiting']}")
    key = page.locator(".geneva-signals .geneva-signal-key .geneva-clip").first
    assert key.get_attribute("title").startswith("refund-7f3a9c21")
    assert key.bounding_box()["height"] <= 24  # one line
    payload = page.locator(".geneva-signals pre.geneva-payload").first
    assert payload.bounding_box()["width"] >= 300
