"""Keyset pages of the admin lists and their estimated counts (R-ADM-150..153).

Each list is walked with its own "next" links from the first page to the last,
then back with its "previous" links: every matching row is shown exactly once,
in the list's order, whatever the sort (ties on the sort column, NULL
``transitioned_at`` rows) and the filters.
"""

from __future__ import annotations

import html
import re
import uuid
from datetime import UTC
from datetime import datetime
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva.admin import filters
from flask_geneva.admin import signals_view
from flask_geneva.admin import step_executions_view
from flask_geneva.admin import workflow_list
from flask_geneva.admin.list_counts import about
from flask_geneva.admin.list_counts import match_label
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import recorded_statements
from tests.support.workflow import executions_table
from tests.support.workflow import external_writer
from tests.support.workflow import workflows_table

WORKFLOWS = "/geneva/workflows/"
EXECUTIONS = "/geneva/step-executions/"
SIGNALS = "/geneva/signals/"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
STATES = ("ready", "paused", "finished")
ROW = {
    WORKFLOWS: r'<tr data-workflow-id="([^"]+)"',
    EXECUTIONS: r'<tr data-execution-id="([^"]+)"',
    SIGNALS: r'<tr data-signal-id="([^"]+)"',
}


def _link(text: str, rel: str) -> str | None:
    found = re.search(rf'<a rel="{rel}" href="([^"]+)"', text)
    return html.unescape(found.group(1)) if found else None


def _get(client: Any, url: str, **params: Any) -> str:
    response = client.get(url, query_string=params or None)
    assert response.status_code == 200, (url, response.data[:300])
    return response.get_data(as_text=True)


def walk(client: Any, base: str, **params: Any) -> tuple[list[str], list[str]]:
    """The ids shown following "next" from the first page to the last, then
    following "previous" from the last back to the first (in list order)."""
    text = _get(client, base, **params)
    pages = [re.findall(ROW[base], text)]
    urls = []
    while (following := _link(text, "next")) is not None:
        assert "offset" not in following
        urls.append(following)
        text = _get(client, following)
        pages.append(re.findall(ROW[base], text))
        assert len(pages) < 200, "the next links never end"
    forward = [row for page in pages for row in page]
    backward_pages = [pages[-1]]
    while (previous := _link(text, "prev")) is not None:
        text = _get(client, previous)
        backward_pages.insert(0, re.findall(ROW[base], text))
        assert len(backward_pages) < 200, "the previous links never end"
    backward = [row for page in backward_pages for row in page]
    return forward, backward


# -- rows -----------------------------------------------------------------------------


def store_workflows(count: int) -> list[dict[str, Any]]:
    """``count`` workflows: created_at in groups of three equal instants (ties),
    transitioned_at in groups of two, NULL for the ready ones (R-WF-03)."""
    rows = []
    for n in range(count):
        state = STATES[n % 3]
        rows.append(
            {
                "type": "AdminTwoStep",
                "hero_type": "User",
                "hero_id": 10_000 + n,
                "state": state,
                "allow_multiple": True,
                "next_step_name": "first" if state != "finished" else None,
                "created_at": T0 + timedelta(minutes=n // 3),
                "transitioned_at": None
                if state == "ready"
                else T0 + timedelta(hours=1, seconds=(count - n) // 2),
                "updated_at": T0,
            }
        )
    with external_writer() as connection:
        connection.execute(sa.insert(workflows_table()), rows)
        stored = connection.execute(
            sa.select(workflows_table()).order_by(workflows_table().c.id)
        ).mappings()
        return [dict(row) for row in stored]


def expected(rows: list[dict[str, Any]], sort: str, direction: str) -> list[str]:
    """Ids in the list's order: by ``sort`` then id, NULL values last (R-ADM-151)."""
    descending = direction == "desc"
    valued = sorted(
        (row for row in rows if row[sort] is not None),
        key=lambda row: (row[sort], row["id"]),
        reverse=descending,
    )
    nulls = sorted(
        (row for row in rows if row[sort] is None),
        key=lambda row: row["id"],
        reverse=descending,
    )
    return [str(row["id"]) for row in valued + nulls]


@pytest.fixture
def small_pages(monkeypatch):
    for view in (workflow_list, step_executions_view, signals_view):
        monkeypatch.setattr(view, "PAGE_SIZE", 4)


# -- R-ADM-150, R-ADM-151: the workflows list -----------------------------------------


@pytest.mark.parametrize("sort", ["id", "created_at", "transitioned_at"])
@pytest.mark.parametrize("direction", ["desc", "asc"])
def test_next_and_previous_walk_every_workflow_once_in_order(
    client, small_pages, sort, direction
):
    """Under each sort and direction, following "next" shows every workflow
    exactly once in the list's order (ties on the sort column by id, NULL
    transitioned_at last), and "previous" walks the same pages back
    (R-ADM-150, R-ADM-151)."""
    rows = store_workflows(23)
    forward, backward = walk(client, WORKFLOWS, sort=sort, dir=direction)
    assert forward == expected(rows, sort, direction)
    assert backward == forward


@pytest.mark.parametrize("sort", ["created_at", "transitioned_at"])
@pytest.mark.parametrize("state", ["ready", "paused"])
def test_the_walk_keeps_the_filters(client, small_pages, sort, state):
    """With a filter the links carry it and the walk shows exactly the
    matching workflows once (the ready ones: only NULL transitioned_at)
    (R-ADM-150)."""
    rows = store_workflows(26)
    forward, backward = walk(client, WORKFLOWS, sort=sort, dir="desc", state=state)
    matching = [row for row in rows if row["state"] == state]
    assert forward == expected(matching, sort, "desc")
    assert backward == forward


def test_a_deep_page_reads_no_offset(client, small_pages):
    """A page reached by "next" is read from the previous page's last row with
    a row-value (or range) condition, never OFFSET; its number is the page
    count followed (R-ADM-150)."""
    store_workflows(15)
    text = _get(client, WORKFLOWS, sort="created_at")
    for _ in range(2):
        text = _get(client, _link(text, "next"))
    following = _link(text, "next")
    assert following is not None
    assert "page=4" in following
    assert re.search(r"after=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6},\d+", following)
    with recorded_statements() as statements:
        fourth = _get(client, following)
    assert "<span>page 4</span>" in fourth
    pages = [s for s in statements if "ORDER BY" in s and "geneva_drive_workflows" in s]
    assert pages
    for statement in pages:
        flat = " ".join(statement.split())
        if db.engine.dialect.name == "sqlite":
            # SQLite's compiler always writes OFFSET: with the literal 0.
            assert flat.endswith("LIMIT ? OFFSET ?"), flat
        else:
            assert "OFFSET" not in flat.upper(), flat
    flat = " ".join(pages[0].split())
    if db.engine.dialect.name in ("mysql", "mariadb"):
        assert "geneva_drive_workflows.created_at <= " in flat, flat
    else:
        row_value = "(geneva_drive_workflows.created_at, geneva_drive_workflows.id) <"
        assert row_value in flat, flat


def test_a_bookmarked_page_number_still_works(client, small_pages):
    """``?page=N`` without a key (the former links) shows that page, and its
    next link continues by key (R-ADM-151)."""
    rows = store_workflows(14)
    order = expected(rows, "id", "desc")
    text = _get(client, WORKFLOWS, page="2")
    assert re.findall(ROW[WORKFLOWS], text) == order[4:8]
    assert "<span>page 2</span>" in text
    text = _get(client, _link(text, "next"))
    assert re.findall(ROW[WORKFLOWS], text) == order[8:12]
    previous = _link(text, "prev")
    assert "before=" in previous
    assert re.findall(ROW[WORKFLOWS], _get(client, previous)) == order[4:8]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"after": "not-a-key"}, "ignored after 'not-a-key'"),
        ({"after": "2025-03-01T09:00:00.000000,1"}, "ignored after"),  # id sort
        ({"sort": "created_at", "after": "17"}, "ignored after '17'"),
        ({"sort": "created_at", "after": "2025-02-30T09:00:00,1"}, "ignored after"),
        ({"sort": "created_at", "after": "null,3"}, "ignored after 'null,3'"),
        ({"sort": "created_at", "before": "2025-03-01T09:00:00,x"}, "ignored before"),
        ({"sort": "transitioned_at", "after": "0099-01-01T00:00:00,1"}, "ignored"),
        ({"sort": "transitioned_at", "after": "\x00,1"}, "ignored after"),
        ({"after": "1", "before": "2"}, "ignored after and before"),
        ({"after": "9" * 60}, "ignored after"),
    ],
)
def test_a_bad_key_shows_the_first_page_with_a_note(client, small_pages, params, named):
    """A key that is not this list's (text, another sort's key, an impossible
    date, both after and before) shows the first page with a note naming it,
    never a 500 (R-ADM-151, R-ADM-31)."""
    rows = store_workflows(6)
    sort = params.get("sort", "id")
    text = html.unescape(_get(client, WORKFLOWS, **params))
    assert named in text
    assert "showing the first page" in text
    assert re.findall(ROW[WORKFLOWS], text) == expected(rows, sort, "desc")[:4]
    assert "<span>page 1</span>" in text


def test_a_key_past_the_end_says_so_and_links_the_first_page(client, small_pages):
    """``after`` the last row: no rows, a note and the first page's link; the
    ``before`` of the first row shows the first page (R-ADM-151)."""
    rows = store_workflows(5)
    order = expected(rows, "id", "desc")
    text = html.unescape(_get(client, WORKFLOWS, after=order[-1], page="3"))
    assert "no rows come after that row: the list ends before it" in text
    assert _link(text, "first") == f"{WORKFLOWS}?sort=id&dir=desc"
    text = html.unescape(_get(client, WORKFLOWS, before=order[0], page="2"))
    assert "no rows come before that row: showing the first page" in text
    assert re.findall(ROW[WORKFLOWS], text) == order[:4]


# -- R-ADM-150: the executions and signals lists --------------------------------------


def store_executions(workflow_id: Any, count: int) -> list[dict[str, Any]]:
    rows = [
        {
            "workflow_id": workflow_id,
            "step_name": "first",
            "state": "completed" if n % 3 else "failed",
            "outcome": "success" if n % 3 else None,
            "scheduled_for": T0,
            "created_at": T0,  # every one ties on created_at: the list is by id
            "updated_at": T0,
        }
        for n in range(count)
    ]
    with external_writer() as connection:
        connection.execute(sa.insert(executions_table()), rows)
        return [
            dict(row)
            for row in connection.execute(
                sa.select(executions_table()).where(
                    executions_table().c.workflow_id == workflow_id
                )
            ).mappings()
        ]


@pytest.mark.parametrize("state", [None, "completed", "failed"])
def test_the_executions_list_walks_every_execution_once(client, small_pages, state):
    """The executions list, newest id first, with or without a state filter:
    "next" shows each matching execution once, "previous" walks back
    (R-ADM-150)."""
    workflows = store_workflows(3)
    rows = store_executions(workflows[0]["id"], 11) + store_executions(
        workflows[1]["id"], 8
    )
    params = {"state": state} if state else {}
    forward, backward = walk(client, EXECUTIONS, **params)
    matching = [row for row in rows if state is None or row["state"] == state]
    assert forward == [
        str(row["id"]) for row in sorted(matching, key=lambda r: r["id"], reverse=True)
    ]
    assert backward == forward
    text = html.unescape(_get(client, EXECUTIONS, after="x1", **params))
    assert "ignored after 'x1': use the id of a listed row" in text


def store_signals(workflow_id: Any, count: int) -> list[dict[str, Any]]:
    table = geneva.WorkflowSignal.__table__
    rows = [
        {
            "workflow_id": workflow_id,
            "name": "approval" if n % 2 else "shipment",
            "state": "pending",
            "created_at": T0,
            "updated_at": T0,
        }
        for n in range(count)
    ]
    with external_writer() as connection:
        connection.execute(sa.insert(table), rows)
        return [dict(row) for row in connection.execute(sa.select(table)).mappings()]


@pytest.mark.parametrize("name", [None, "approval"])
def test_the_signals_list_walks_every_signal_once(client, small_pages, name):
    """The signals list, newest first, with or without a name filter: "next"
    shows each matching signal once, "previous" walks back (R-ADM-150)."""
    workflow = store_workflows(1)[0]
    rows = store_signals(workflow["id"], 13)
    params = {"name": name} if name else {}
    forward, backward = walk(client, SIGNALS, **params)
    matching = [row for row in rows if name is None or row["name"] == name]
    assert forward == [
        str(row["id"]) for row in sorted(matching, key=lambda r: r["id"], reverse=True)
    ]
    assert backward == forward


# -- R-ADM-152: estimated counts --------------------------------------------------------


def test_estimates_read_for_people():
    """Two significant digits: "about 12,000", "about 4.9 M" (R-ADM-152)."""
    assert about(12_345) == "about 12,000"
    assert about(487_654) == "about 490,000"
    assert about(4_912_345) == "about 4.9 M"
    assert about(9_990_000) == "about 10 M"
    assert about(12_345_678) == "about 12 M"
    assert about(1_234_567_890) == "about 1.2 B"
    assert match_label(7, 10, lambda: 99) == "7"
    assert match_label(11, 10, lambda: None) == "10+"
    assert match_label(11, 10, lambda: 9) == "10+"  # under the cap: not believed
    assert match_label(10_001, 10_000, lambda: 4_912_345) == "about 4.9 M"


@pytest.fixture
def statistics_reset(app):
    """After the test, empty and re-analyze the tables it analyzed: the
    statistics of its many rows would otherwise outlive them (the tables are
    emptied with DELETE) and give later tests' lists an estimate."""
    yield
    if db.engine.dialect.name != "postgresql":
        return
    db.session.remove()
    tables = ("geneva_drive_signals", "geneva_drive_step_executions")
    with db.engine.connect().execution_options(
        isolation_level="AUTOCOMMIT"
    ) as connection:
        for table in (*tables, "geneva_drive_workflows"):
            connection.execute(sa.text(f"DELETE FROM {table}"))
            connection.execute(sa.text(f"VACUUM ANALYZE {table}"))


def _bulk_workflows(count: int) -> None:
    """``count`` workflows in one set-based INSERT ... SELECT (PostgreSQL)."""
    with external_writer() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO geneva_drive_workflows (type, hero_type, hero_id, state,"
                " allow_multiple, created_at, updated_at)"
                " SELECT 'AdminTwoStep', 'User', n,"
                " CASE WHEN n % 4 = 0 THEN 'paused' ELSE 'finished' END, true,"
                " now() - make_interval(secs => n), now()"
                " FROM generate_series(1, :count) AS n"
            ),
            {"count": count},
        )
        connection.execute(sa.text("ANALYZE geneva_drive_workflows"))


@pytest.mark.backends("postgresql")
def test_past_the_cap_postgresql_shows_the_planner_estimate(client, statistics_reset):
    """Past the 10,000 cap PostgreSQL's count line is the planner's estimate of
    the filtered list, written "about 12,000" (R-ADM-152)."""
    _bulk_workflows(16_000)  # 4,000 paused, 12,000 finished
    text = _get(client, WORKFLOWS)
    assert "about 16,000 workflows match (no filter: all workflows)." in text
    # The bulk buttons still name what was counted.
    assert "Cancel all 10,000+ workflows" in text
    text = _get(client, WORKFLOWS, state="finished")
    assert re.search(r"about 1[12],\d00 workflows match\.", text), text[:200]
    # Fewer than the cap match: the exact count, no estimate.
    assert "4,000 workflows match." in _get(client, WORKFLOWS, state="paused")


def test_past_the_cap_the_count_line_is_an_estimate_or_capped(
    client, monkeypatch, statistics_reset
):
    """With the cap lowered to 5: PostgreSQL shows "about N" for each list
    once its table's statistics know more than 5 rows, the other databases
    "5+" (R-ADM-152, R-ADM-127)."""
    monkeypatch.setattr(filters, "COUNT_CAP", 5)
    postgresql = db.engine.dialect.name == "postgresql"
    workflows = store_workflows(30)
    store_executions(workflows[0]["id"], 40)
    store_signals(workflows[0]["id"], 20)
    if postgresql:
        with external_writer() as connection:
            connection.execute(sa.text("ANALYZE"))
    for url, noun in (
        (WORKFLOWS, "workflows"),
        (EXECUTIONS, "step executions"),
        (SIGNALS, "signals"),
    ):
        text = _get(client, url)
        line = re.search(rf">([^<>]*?) {noun} match", text)
        assert line is not None, (url, text[:200])
        if postgresql:
            assert line.group(1).startswith("about "), line.group(0)
        else:
            assert line.group(1) == "5+", line.group(0)
    db.session.remove()


# -- UUID keys ------------------------------------------------------------------------


def test_uuid_keys_walk_by_created_at_then_id(tmp_path, small_pages):
    """With UUID keys the workflows list is newest created first and its keys
    are ``<created_at>,<uuid>``; the executions list pages by the UUID id; both
    walk every row once, ties on created_at included (R-ADM-150, R-ADM-11)."""
    from tests.apps import uuid_app

    app = uuid_app.create_app(
        f"sqlite:///{tmp_path / 'uuid.sqlite3'}",
        TESTING=True,
        SECRET_KEY="uuid-keyset",  # noqa: S106 - a test app
        GENEVA_ADMIN_ENABLED=True,
    )
    with app.app_context():
        uuid_app.db.create_all()
        table = uuid_app.geneva.Workflow.__table__
        executions = uuid_app.geneva.StepExecution.__table__
        rows = [
            {
                "id": uuid.uuid4(),
                "type": "UuidTwoSteps",
                "state": "ready",
                "allow_multiple": True,
                "created_at": T0 + timedelta(minutes=n // 3),
                "updated_at": T0,
            }
            for n in range(11)
        ]
        with uuid_app.db.engine.begin() as connection:
            connection.execute(sa.insert(table), rows)
            connection.execute(
                sa.insert(executions),
                [
                    {
                        "id": uuid.uuid4(),
                        "workflow_id": row["id"],
                        "step_name": "first",
                        "state": "scheduled",
                        "scheduled_for": T0,
                        "created_at": T0,
                        "updated_at": T0,
                    }
                    for row in rows
                ],
            )
            stored = [dict(r) for r in connection.execute(sa.select(table)).mappings()]
            execution_ids = [
                str(r.id) for r in connection.execute(sa.select(executions.c.id))
            ]
    client = app.test_client()
    with app.app_context():
        forward, backward = walk(client, WORKFLOWS)
        assert forward == expected(stored, "created_at", "desc")
        assert backward == forward
        first = _get(client, WORKFLOWS)
        assert re.search(
            r"after=\d{4}-\d\d-\d\dT[\d:.]+,[0-9a-f-]{36}", _link(first, "next")
        )
        forward, backward = walk(client, EXECUTIONS)
        assert forward == sorted(execution_ids, reverse=True)
        assert backward == forward
        text = html.unescape(_get(client, EXECUTIONS, after="17"))
        assert "ignored after '17'" in text
