"""Adversarial checks of issue 21's admin work: the paged timeline (R-ADM-57), the
stored outcome hours (R-ADM-58), the created range (R-ADM-11) and every page's
query parameters (R-ADM-31: a bad value never fails a page)."""

from __future__ import annotations

import random
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from flask_geneva.admin import outcome_cache
from flask_geneva.core import clock
from flask_geneva.db.optional_columns import optional_columns
from flask_geneva.engine.operators.outcome_rollup import roll_up_outcome_hours
from flask_geneva.ext.app_state import current_context
from tests.admin.support import T0
from tests.admin.support import WORKFLOW_LIST_FILTERS
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import ready_workflow
from tests.admin.support import store_executions
from tests.admin.test_timeline_pages import NEWER
from tests.admin.test_timeline_pages import OLDER
from tests.admin.test_timeline_pages import link
from tests.admin.test_timeline_pages import timeline_ids
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer

HOURS_TABLE = "geneva_drive_outcome_hours"


def _walk(client, url):
    """Every page's timeline ids, following the older links from ``url``."""
    pages = []
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200
        text = response.get_data(as_text=True)
        pages.append(timeline_ids(text))
        url = link(OLDER, text)
    return pages


@pytest.mark.parametrize("extra", [0, 99, 100, 199, 200])
def test_every_execution_is_on_exactly_one_page_at_page_edges(client, extra):
    """1, 100, 101, 200 and 201 executions: each on one page, in order; no pager up
    to 100 (R-ADM-57)."""
    workflow_id = ready_workflow().id
    every = store_executions(workflow_id, extra) if extra else None
    every = every or [str(row["id"]) for row in execution_rows(workflow_id)]
    pages = _walk(client, detail_url(workflow_id))
    assert [i for page in reversed(pages) for i in page] == every
    assert len(pages) == max(1, -(-len(every) // 100))
    assert all(pages)


def test_executions_created_at_the_same_instant_are_each_on_one_page(client):
    """250 executions with one created_at (a bulk insert, a coarse clock): the id
    breaks the tie, so the pages hold each exactly once (R-ADM-57)."""
    workflow_id = ready_workflow().id
    rows = [
        {
            "workflow_id": workflow_id,
            "step_name": "first",
            "state": "completed",
            "outcome": "success",
            "scheduled_for": T0,
            "started_at": T0,
            "completed_at": T0,
            "finished_at": T0,
            "created_at": T0,
            "updated_at": T0,
        }
        for _ in range(250)
    ]
    with external_writer() as connection:
        connection.execute(sa.insert(executions_table()), rows)
    every = {str(row["id"]) for row in execution_rows(workflow_id)}
    seen = [i for page in _walk(client, detail_url(workflow_id)) for i in page]
    assert len(seen) == len(set(seen)) == len(every) == 251
    assert set(seen) == every


def test_going_to_a_newer_page_after_new_executions_skips_none(client):
    """Page 3 read, 50 executions added (a running workflow: newer than every
    execution), then its "newer" link: together the two pages still show every
    execution between them, as the links count from the newest execution the
    first page saw (``upto``, R-ADM-57)."""
    workflow_id = ready_workflow().id
    before = store_executions(workflow_id, 299)  # 300 with the scheduled one
    page3 = client.get(detail_url(workflow_id) + "?page=3").get_data(as_text=True)
    newer = link(NEWER, page3)
    assert newer is not None
    rows = [
        {
            "workflow_id": workflow_id,
            "step_name": "first",
            "state": "completed",
            "outcome": "success",
            "scheduled_for": clock.now() + timedelta(minutes=n + 1),
            "created_at": clock.now() + timedelta(minutes=n + 1),
            "updated_at": clock.now() + timedelta(minutes=n + 1),
        }
        for n in range(50)
    ]
    with external_writer() as connection:
        connection.execute(sa.insert(executions_table()), rows)
    page2 = client.get(newer).get_data(as_text=True)
    shown = set(timeline_ids(page3)) | set(timeline_ids(page2))
    # Positions 101-300 counted from the newest when page 3 was read.
    assert set(before[:200]) <= shown


def test_the_overview_still_renders_when_the_outcome_hours_table_goes(client):
    """The add_outcome_hours unit downgraded while the web process runs (its
    table detected earlier): the overview and a class page count live, they
    do not fail (R-ADM-58, R-ADM-31)."""
    failed_workflow()
    now = clock.now()
    with clock.frozen(now):
        assert client.get("/geneva/").status_code == 200
    assert optional_columns(db.session).outcome_hours
    db.session.remove()
    outcome_cache.forget_kept_hours()
    with db.engine.begin() as connection:
        connection.execute(sa.text(f"DROP TABLE {HOURS_TABLE}"))
    try:
        with clock.frozen(now + timedelta(hours=2)):
            for url in ("/geneva/", "/geneva/class/AdminFailing"):
                response = client.get(url)
                assert response.status_code == 200, url
                assert "1 failed" in response.get_data(as_text=True)
            # Housekeeping's roll-up logs and goes on (R-ADM-58).
            assert roll_up_outcome_hours(current_context().session) == 0
    finally:
        db.session.remove()
        from tests import conftest

        conftest._server_schema_ready = False
        from flask_geneva import reset_column_caches

        reset_column_caches()


_VALUES = [
    "",
    " ",
    "0",
    "-1",
    "1.5",
    "1e3",
    "99999999999999999999999999",
    "9" * 5000,
    "٣",
    "²",
    "NaN",
    "inf",
    "\x00",
    "a\x00b",
    "%",
    "_",
    "'; DROP TABLE geneva_drive_workflows; --",
    "' OR 1=1 --",
    '"',
    "\\",
    "<script>alert(1)</script>",
    "{{7*7}}",
    "Order#17",
    "Order#",
    "#",
    "#17",
    "User#-1",
    "User#99999999999999999999999",
    "AdminTwoStep",
    "paused",
    "failed",
    "2026-13-01",
    "2026-02-30",
    "0000-01-01",
    "0001-01-01T00:00+01:00",
    "9999-12-31",
    "9998-12-31",
    "9998-12-31T23:59:59-05:00",
    "2026-01-01T00:00",
    "2026-01-01T00:00:00+14:00",
    "2026-01-01T00:00Z",
    "2026-01-01 00:00:00.123456",
    "1000-01-01",
    "x" * 300,
    "é" * 200,
    "\U0001f600",
    "\ud800",
    "1,2",
    "true",
    "desc",
    "asc",
    "created_at",
    "id",
]
_NAMES = [
    "page",
    "sort",
    "dir",
    *WORKFLOW_LIST_FILTERS,
    "only",
    "workflow_state",
    "workflow_type",
    "received_from",
    "received_to",
    "name",
    "refresh",
    "tz",
    "children_after",
]


def _query(rng):
    parts = []
    for _ in range(rng.randint(1, 5)):
        name = rng.choice(_NAMES)
        value = rng.choice(_VALUES)
        parts.append(f"{quote(name)}={quote(value, safe='', errors='surrogatepass')}")
        if rng.random() < 0.2:  # the same parameter twice
            parts.append(
                f"{quote(name)}={quote(rng.choice(_VALUES), safe='', errors='surrogatepass')}"
            )
    return "&".join(parts)


def test_fuzzed_query_parameters_never_fail_a_page(client):
    """Random, huge, SQL-like, unicode and repeated query parameters on every
    page: a page or a 4xx, never a 500 (R-ADM-31)."""
    workflow_id = ready_workflow().id
    store_executions(workflow_id, 120)
    failing = failed_workflow()
    execution_id = execution_rows(failing.id)[0]["id"]
    paths = [
        "/geneva/",
        "/geneva/class/AdminTwoStep",
        "/geneva/workflows/",
        detail_url(workflow_id),
        "/geneva/step-executions/",
        f"/geneva/step-executions/{execution_id}",
        "/geneva/signals/",
    ]
    rng = random.Random(21)  # noqa: S311 - a fixed seed, not secrets
    urls = [f"{path}?{_query(rng)}" for _ in range(40) for path in paths]
    # Each value alone on each page, and as a path segment.
    for value in _VALUES:
        quoted = quote(value, safe="", errors="surrogatepass")
        urls += [f"{path}?{rng.choice(_NAMES)}={quoted}" for path in paths]
        urls += [
            f"/geneva/class/{quoted}",
            f"/geneva/workflows/{quoted}",
            f"/geneva/step-executions/{quoted}",
        ]
    failures = []
    for url in urls:
        try:
            status = client.get(url).status_code
        except Exception as error:  # noqa: BLE001 - the test client re-raises a 500's error
            failures.append((url, type(error).__name__))
        else:
            if status >= 500:
                failures.append((url, status))
        db.session.rollback()
        db.session.remove()
    assert failures == []


@pytest.mark.parametrize(
    ("created_from", "created_to", "expected"),
    [
        ("2026-03-02", "2026-03-01", 0),  # inverted
        ("2026-03-01", "2026-03-01", 1),  # one whole day
        ("2026-03-01T10:00:00", "2026-03-01T10:00:00", 1),  # one instant
        ("2026-03-01T11:00:00+01:00", "2026-03-01T10:00:00Z", 1),  # offsets
        ("2026-03-01T10:00:00.000001", "2026-03-01T23:00", 0),
        ("2030-01-01", "", 0),  # no rows
    ],
)
def test_created_ranges_match_exactly_and_never_fail(
    client, created_from, created_to, expected
):
    """A created range, inverted, equal, naive or with an offset, on its own and
    with the other filters and sorts, lists what it says (R-ADM-11, R-ADM-31)."""
    instant = datetime(2026, 3, 1, 10, tzinfo=UTC)
    with clock.frozen(instant):
        workflow_id = ready_workflow().id
    for extra in ("", "&sort=id&dir=asc", "&state=ready&sort=created_at", "&page=2"):
        response = client.get(
            f"/geneva/workflows/?created_from={quote(created_from)}"
            f"&created_to={quote(created_to)}{extra}"
        )
        assert response.status_code == 200
        text = response.get_data(as_text=True)
        shown = f'/geneva/workflows/{workflow_id}"' in text
        assert shown == (expected == 1 and extra != "&page=2"), extra


def test_a_class_whose_code_is_gone_is_counted_stored_and_live(client):
    """Executions of a class no longer in the code: housekeeping stores its hour,
    the overview, the class page and the class filter show it (R-ADM-58, R-ADM-55)."""
    from tests.support.workflow import update_workflow

    now = clock.now().replace(minute=30, second=0, microsecond=0)
    with clock.frozen(now - timedelta(hours=3)):
        workflow = failed_workflow()
    update_workflow(workflow.id, type="GoneClass")
    db.session.remove()
    outcome_cache.forget_kept_hours()
    with clock.frozen(now):
        assert roll_up_outcome_hours(current_context().session) >= 1
        db.session.remove()
        for url in (
            "/geneva/",
            "/geneva/class/GoneClass",
            "/geneva/workflows/?type=GoneClass",
        ):
            response = client.get(url)
            assert response.status_code == 200, url
            assert "GoneClass" in response.get_data(as_text=True)
        text = client.get("/geneva/class/GoneClass").get_data(as_text=True)
        assert "1 failed" in text
