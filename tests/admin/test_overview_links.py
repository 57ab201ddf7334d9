"""Every number on the overview links to a list showing exactly the rows counted (R-ADM-10, R-ADM-13, R-HK-20)."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest

from flask_geneva.testing import perform_next_step
from tests.admin.execution_support import finished_resumable_chain
from tests.admin.execution_support import flaky_workflow
from tests.admin.execution_support import listed_ids
from tests.admin.execution_support import overdue_by
from tests.admin.support import failed_workflow
from tests.admin.support import new_user
from tests.admin.support import paused_workflow
from tests.admin.support import ready_workflow
from tests.admin.workflows import AdminFailing
from tests.apps.basic import db
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow


def listed_workflow_ids(text: str) -> list[str]:
    """The workflow ids of the rows of a workflows list page."""
    return re.findall(r'<tr data-workflow-id="([^"]+)"', text)


@pytest.fixture
def small_data_set(app):
    """A mix of classes and states, late and stuck executions, two failures.

    Returns:
        A dict naming the executions whose lateness matters.
    """
    ready_workflow()
    just_late = execution_rows(ready_workflow().id)[0]
    long_late = execution_rows(ready_workflow().id)[0]
    stuck = execution_rows(ready_workflow().id)[0]
    running = execution_rows(ready_workflow().id)[0]
    paused_workflow()
    failed_workflow()
    flaky_workflow()
    finished_resumable_chain()
    # Late within the housekeeping threshold (15 min) and beyond it.
    update_execution(just_late["id"], scheduled_for=overdue_by(timedelta(minutes=1)))
    update_execution(long_late["id"], scheduled_for=overdue_by(timedelta(hours=1)))
    # In progress beyond the stuck threshold (1 h) and within it.
    update_execution(
        stuck["id"], state="in_progress", started_at=overdue_by(timedelta(hours=2))
    )
    update_execution(
        running["id"], state="in_progress", started_at=overdue_by(timedelta(minutes=5))
    )
    # A second failure, in a workflow whose class is gone.
    removed = failed_workflow_of_removed_class()
    db.session.expunge_all()  # the test shares the request's session (pytest-flask)
    return {
        "just_late": just_late,
        "long_late": long_late,
        "stuck": stuck,
        "removed": removed,
    }


def failed_workflow_of_removed_class():
    """Another failed AdminFailing, then its stored class renamed to a removed one."""
    workflow = AdminFailing.create(hero=new_user("removed@example.com"))
    with pytest.raises(RuntimeError):
        perform_next_step(workflow)
    update_workflow(workflow.id, type="RemovedOverviewClass")
    return execution_rows(workflow.id)[0]


def overview(client) -> str:
    response = client.get("/geneva/")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def linked_number(text: str, css_class: str) -> tuple[str, int]:
    """The URL and the number of the overview link with ``css_class``."""
    match = re.search(rf'<a class="{css_class}" href="([^"]+)">([^<]+)</a>', text)
    assert match is not None, css_class
    return html.unescape(match.group(1)), int(match.group(2))


def test_each_class_and_state_count_links_to_exactly_those_workflows(
    client, small_data_set
):
    """Every class x state count and class total equals the rows of the workflows list it links to (R-ADM-10, R-ADM-11)."""
    text = overview(client)
    table = re.search(
        r'<table class="table table-sm geneva-overview">(.*?)</table>', text, re.S
    ).group(1)
    links = re.findall(r'<a href="(/geneva/workflows/\?[^"]+)">(\d+)</a>', table)
    checked = {}
    for url, number in links:
        url = html.unescape(url)
        page = client.get(url)
        assert page.status_code == 200, url
        assert len(listed_workflow_ids(page.get_data(as_text=True))) == int(number), url
        checked[url] = int(number)
    # 5 classes (one of them removed from the code) x (5 states + total); a
    # count of 0 is plain text, not a link to an empty list (R-ADM-46).
    zeros = re.findall(r'<span class="geneva-zero">0</span>', table)
    assert not [number for number in checked.values() if number == 0]
    assert len(checked) + len(zeros) == 5 * 6
    assert zeros
    assert checked["/geneva/workflows/?type=AdminTwoStep&state=ready"] == 5
    assert checked["/geneva/workflows/?type=AdminTwoStep&state=paused"] == 1
    assert checked["/geneva/workflows/?type=AdminTwoStep"] == 6
    assert checked["/geneva/workflows/?type=AdminFailing&state=paused"] == 1
    assert checked["/geneva/workflows/?type=RemovedOverviewClass&state=paused"] == 1
    assert checked["/geneva/workflows/?type=AdminResumable&state=finished"] == 1
    assert checked["/geneva/workflows/?type=ExecDetailFlaky&state=ready"] == 1
    assert "class no longer defined" in text


def test_stuck_count_links_to_exactly_the_stuck_executions(client, small_data_set):
    """The stuck in-progress count equals the rows of the 'stuck' list it links to (R-ADM-10, R-HK-20)."""
    url, number = linked_number(overview(client), "geneva-stuck-count")
    assert url == "/geneva/step-executions/?only=stuck"
    rows = listed_ids(client.get(url).get_data(as_text=True))
    assert number == len(rows) == 1
    assert rows == [str(small_data_set["stuck"]["id"])]


def test_overdue_count_links_to_the_housekeeping_overdue_list(client, small_data_set):
    """The overdue count (beyond GENEVA_STUCK_SCHEDULED_THRESHOLD) equals the rows of the list it links to, not the plain 'overdue' list (R-ADM-10, R-ADM-13, R-HK-20)."""
    url, number = linked_number(overview(client), "geneva-overdue-count")
    assert url == "/geneva/step-executions/?only=stuck_scheduled"
    page = client.get(url).get_data(as_text=True)
    rows = listed_ids(page)
    assert number == len(rows) == 1
    assert rows == [str(small_data_set["long_late"]["id"])]
    assert "overdue beyond the housekeeping threshold" in page
    # The plain R-ADM-13 'overdue' list also holds the one late within the threshold.
    plain = listed_ids(
        client.get("/geneva/step-executions/?only=overdue").get_data(as_text=True)
    )
    assert str(small_data_set["just_late"]["id"]) in plain
    assert len(plain) > number


def test_failed_count_and_latest_failures_link_to_the_failed_list(
    client, small_data_set
):
    """The failed count equals the rows of the failed list; each latest failure links to its execution (R-ADM-10, R-ADM-14)."""
    text = overview(client)
    url, number = linked_number(text, "geneva-failed-count")
    assert url == "/geneva/step-executions/?state=failed"
    rows = listed_ids(client.get(url).get_data(as_text=True))
    assert number == len(rows) == 2
    failures = re.search(
        r'<table class="table table-sm geneva-failures">(.*?)</table>', text, re.S
    ).group(1)
    shown = listed_ids(failures)
    assert sorted(shown) == sorted(rows)
    assert str(small_data_set["removed"]["id"]) in shown
    for execution_id in shown:
        assert f'<a href="/geneva/step-executions/{execution_id}">' in failures


def test_the_overview_lists_live_and_dead_workers(client):
    """The overview shows the worker registry: alive and dead workers and the
    executions dead workers abandoned (R-WRK-09)."""
    import uuid

    from flask_geneva.core import clock
    from flask_geneva.db import workers as worker_rows

    workers = db.metadata.tables["geneva_drive_workers"]
    now = clock.now()
    ids = []
    for age in (timedelta(0), timedelta(hours=1)):
        worker_id = str(uuid.uuid4())
        identity = worker_rows.WorkerIdentity(
            worker_id, "box<1>", 7, "celery@box", ("q",), "t"
        )
        db.session.remove()
        with db.engine.begin() as connection:
            worker_rows.insert_worker(connection, workers, identity)
            worker_rows.age_heartbeat(connection, workers, worker_id, age)
        ids.append(worker_id)
    workflow = ready_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    update_execution(
        execution_id, state="in_progress", started_at=now, worker_id=ids[1]
    )
    text = overview(client)
    assert "1 alive, 1 dead; executions abandoned by dead workers: 1." in text
    assert f'data-worker-id="{ids[0]}"' in text
    assert f'data-worker-id="{ids[1]}"' in text
    assert "box&lt;1&gt;" in text
