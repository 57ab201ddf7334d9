"""The admin's "Start a workflow" page (R-ADM-200..204)."""

from __future__ import annotations

import html
import logging
import re
from datetime import timedelta

import pytest

from flask_geneva.admin.audit import AUDIT_LOGGER
from flask_geneva.core import clock
from tests.admin.support import new_user
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

START = "/geneva/workflows/start"


def _page(client, **params):
    response = client.get(START, query_string=params)
    assert response.status_code == 200, response.data[:500]
    return html.unescape(response.get_data(as_text=True))


def _token(client, **params):
    page = _page(client, **params)
    match = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', page)
    assert match is not None, "no start form on the page"
    return match.group(1)


def _start(client, token, **fields):
    data = {"csrf_token": token, "type": "AdminTwoStep", **fields}
    return client.post(START, data=data)


def _error(response):
    assert response.status_code == 200, response.data[:500]
    found = re.search(
        r'geneva-start-error"[^>]*>([^<]*)<', html.unescape(response.get_data(True))
    )
    return found.group(1) if found else None


def _count():
    return db.session.query(geneva.Workflow).count()


def test_the_page_offers_startable_classes_and_hero_types(client):
    """Only classes not marked admin_startable = False are offered (abstract bases
    neither), the hero types are the mapped models with one key column, geneva's
    own left out; a POST naming another class is 400 listing the startable ones
    (R-ADM-200, R-ADM-203)."""
    page = _page(client)
    classes = re.findall(r'<option value="(\w+)"', page.split('name="hero_type"')[0])
    assert "AdminTwoStep" in classes
    assert "AdminInternal" not in classes
    hero_types = re.findall(
        r'<option value="(\w+)"',
        page.split('name="hero_type"')[1].split("</select>")[0],
    )
    assert hero_types == ["User"]
    token = _token(client, type="Tick")  # a class that needs no hero: form shown
    response = _start(client, token, type="AdminInternal")
    assert response.status_code == 400
    text = html.unescape(response.get_data(as_text=True))
    assert "class 'AdminInternal' cannot be started here; startable classes:" in text
    assert "AdminTwoStep" in text


def test_start_finds_the_hero_by_id_and_starts_through_create(client, app, caplog):
    """Find the hero by type and id, start it with a priority and a start time: the
    workflow is create()'s (first step due at that time, priority stored), its
    operator actions name the actor via admin, an INFO record audits it, and the
    answer is the workflow's page with the flash (R-ADM-201, R-ADM-202, R-ADM-203)."""
    app.config["GENEVA_ADMIN_ACTOR"] = lambda: "dana"
    hero = new_user("dana-hero@example.com")
    page = _page(client, type="AdminTwoStep", hero_type="User", hero_id=hero.id)
    shown = re.search(r'<p class="geneva-start-hero">(.*?)</p>', page).group(1)
    assert shown == f"Hero: <strong>User#{hero.id}</strong> — <User {hero.id}>"
    token = _token(client, type="AdminTwoStep", hero_type="User", hero_id=hero.id)
    later = (clock.now() + timedelta(hours=2)).replace(microsecond=0)
    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        response = _start(
            client,
            token,
            hero_type="User",
            hero_id=str(hero.id),
            priority="9",
            start_at=later.strftime("%Y-%m-%dT%H:%M"),
        )
    assert response.status_code == 303
    [workflow_id] = re.findall(
        r"/geneva/workflows/(\d+)$", response.headers["Location"]
    )
    row = workflow_row(int(workflow_id))
    assert (row["type"], row["hero_type"], row["hero_id"]) == (
        "AdminTwoStep",
        "User",
        hero.id,
    )
    assert row["metadata"]["step_job_options"]["priority"] == 9
    [entry] = row["metadata"]["operator_actions"]
    assert (entry["action"], entry["actor"], entry["via"]) == ("start", "dana", "admin")
    [execution] = execution_rows(int(workflow_id))
    assert execution["scheduled_for"] == later.replace(second=0)
    [record] = [r for r in caplog.records if r.name == AUDIT_LOGGER]
    assert record.geneva_action == "start"
    assert record.geneva_hero == f"User#{hero.id}"
    detail = client.get(response.headers["Location"]).get_data(as_text=True)
    assert (
        f"Started AdminTwoStep workflow {workflow_id} for hero User#{hero.id}, "
        f"first step at {later:%Y-%m-%d %H:%M} UTC; state is ready"
    ) in html.unescape(detail)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"priority": "high"}, "priority must be a whole number"),
        ({"priority": str(2**31)}, "job option 'priority' must be between"),
        ({"start_at": "2001-01-01T00:00"}, "is not in the future; leave it empty"),
        ({"start_at": "next tuesday"}, "start time 'next tuesday' is not a time"),
        ({"hero_id": "abc"}, "hero id 'abc' is not a valid User id (a int)"),
        ({"hero_id": "987654"}, "no User with id '987654'"),
        ({"hero_type": "Order"}, "unknown hero type 'Order'; hero types: User"),
        ({"hero_id": ""}, "give the User hero's id"),
        ({"hero_type": "", "hero_id": ""}, "a AdminTwoStep workflow needs a hero"),
    ],
)
def test_refusals_are_said_on_the_form_and_write_nothing(client, fields, message):
    """Whatever the form cannot use and whatever create() refuses is said on the
    page with the values kept; nothing is written (R-ADM-204)."""
    hero = new_user()
    token = _token(client, type="AdminTwoStep", hero_type="User", hero_id=hero.id)
    response = _start(
        client, token, **{"hero_type": "User", "hero_id": str(hero.id), **fields}
    )
    assert message in _error(response)
    assert _count() == 0


def test_a_second_start_for_the_same_hero_says_which_workflow_is_ongoing(client):
    """The one-ongoing rule is create()'s: the second start names the ongoing
    workflow on the form, 200, no second row (R-ADM-204, R-UNQ-02)."""
    hero = new_user()
    token = _token(client, type="AdminTwoStep", hero_type="User", hero_id=hero.id)
    fields = {"hero_type": "User", "hero_id": str(hero.id)}
    first = _start(client, token, **fields)
    assert first.status_code == 303
    error = _error(_start(client, token, **fields))
    assert error.startswith(
        "Not started: An ongoing workflow of this type already exists for this hero"
    )
    assert f"AdminTwoStep for hero User#{hero.id} (workflow " in error
    assert _count() == 1
    assert client.post(START, data={"type": "AdminTwoStep"}).status_code == 400


def test_a_class_without_hero_starts_without_one(client):
    """A class with may_proceed_without_hero starts with no hero chosen (R-ADM-203)."""
    token = _token(client, type="Tick")
    response = _start(client, token, type="Tick")
    assert response.status_code == 303
    row = workflow_row(int(response.headers["Location"].rsplit("/", 1)[1]))
    assert (row["type"], row["hero_type"]) == ("Tick", None)


def test_label_search_lists_a_bounded_prefix_match(client, monkeypatch):
    """With __geneva_hero_label__ the text is a prefix of that column (% and _ as
    themselves), at most 20 listed with a note when there are more; without it a
    note says to find the hero by id (R-ADM-203)."""
    page = _page(client, type="AdminTwoStep", hero_type="User", q="ann")
    assert "User names no label column (__geneva_hero_label__" in page
    monkeypatch.setattr(User, "__geneva_hero_label__", "email", raising=False)
    db.session.add_all(
        [User(email=f"ann{n:02d}@example.com") for n in range(21)]
        + [User(email="a%z@example.com"), User(email="abz@example.com")]
    )
    db.session.commit()
    page = _page(client, type="AdminTwoStep", hero_type="User", q="ann")
    listed = re.findall(r'<tr data-hero-id="(\d+)">', page)
    assert len(listed) == 20
    assert "The first 20 matches" in page
    assert "ann00@example.com" in page
    assert "ann20@example.com" not in page
    page = _page(client, type="AdminTwoStep", hero_type="User", q="a%")
    assert re.findall(r"<td>User#\d+</td><td><span[^>]*>([^<]*)<", page) == [
        "a%z@example.com"
    ]
    monkeypatch.setattr(User, "__geneva_hero_label__", "mail", raising=False)
    page = _page(client, type="AdminTwoStep", hero_type="User", q="ann")
    assert "User.__geneva_hero_label__ = 'mail' names no column of User" in page


def test_the_page_is_refused_when_no_class_may_be_started(app, client, caplog):
    """GENEVA_ADMIN_AUTHORIZE asked 'start' with each class: none allowed → the page
    is 403 and audited, the list shows no start link (R-ADM-200, R-ADM-213)."""
    asked = set()

    def authorize(user, action, target):
        if action == "start":
            asked.add(target.__geneva_type__)
            return False
        return True

    app.config["GENEVA_ADMIN_AUTHORIZE"] = authorize
    geneva.reload_settings(app)
    assert "geneva-start-link" not in client.get("/geneva/workflows/").get_data(True)
    with caplog.at_level(logging.WARNING, logger=AUDIT_LOGGER):
        assert client.get(START).status_code == 403
    assert "AdminTwoStep" in asked
    assert "AdminInternal" not in asked
    assert [r.geneva_action for r in caplog.records if r.name == AUDIT_LOGGER] == [
        "start"
    ]
