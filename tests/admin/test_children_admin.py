"""Child workflows in the admin (SPEC §25.5).

R-CHD-61: a child's page links its parent (with the step, execution and key
that started it); a parent's page has a "Children" panel: the counts row, the
execution waiting for them (a link), the counts per state, a page of children
by id (``children_after``, 50 a page) linking to each, and "Act on all N
children". R-CHD-62: the workflows list's ``parent`` filter (validated, a bad
value ignored with a note) lets the bulk actions on "all matching" act on a
parent's children. Without the add_child_workflows unit nothing is read.
"""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from flask_geneva.admin.children_panel import CHILDREN_PAGE_SIZE
from tests.admin.conftest import WORKFLOW_BULK
from tests.admin.conftest import WORKFLOW_LIST
from tests.admin.conftest import csrf_token
from tests.admin.support import detail_url
from tests.admin.support import listed
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.operator_children import OpsChild
from tests.support.operator_children import OpsParent
from tests.support.operator_children import build_family
from tests.support.operator_children import waiting_execution_id
from tests.support.statements import recorded_statements
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row


def _page(client, url, **params):
    response = client.get(url, query_string=params)
    assert response.status_code == 200, response.data[:500]
    return response.get_data(as_text=True)


def _panel(text):
    match = re.search(r'<h3 id="children">.*?</section>', text, re.S)
    assert match is not None, "no children panel"
    return match.group(0)


def _listed_children(panel):
    return [int(i) for i in re.findall(r'<tr data-child-id="([^"]+)"', panel)]


def _words(html):
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


# -- R-CHD-61: the parent's page --------------------------------------------------


def test_a_parent_page_has_the_children_panel(client, geneva_jobs):
    """R-CHD-61: the counts row, the waiting execution with its link and
    threshold, the counts per state linking to the filtered list, each child
    with its link, key, starting step and how it settled."""
    parent_id, child_ids = build_family(geneva_jobs, failing={"part-1"})
    waiting = waiting_execution_id(parent_id)
    panel = _panel(_page(client, detail_url(parent_id)))
    words = _words(panel)
    assert "Started 3 , settled 1 , failed 1 ." in words
    assert f"Execution {waiting} waits until 3 have settled." in words
    assert f'href="/geneva/step-executions/{waiting}"' in panel
    states = re.findall(r'<a class="geneva-child-state" data-state="(\w+)"', panel)
    assert states == ["ready", "paused"]
    assert f"/geneva/workflows/?parent={parent_id}&amp;state=ready" in panel
    assert "ready 2" in words
    assert "paused 1" in words
    assert _listed_children(panel) == child_ids
    for child_id in child_ids:
        assert f'href="/geneva/workflows/{child_id}"' in panel
    failed_row = re.search(
        rf'<tr data-child-id="{child_ids[1]}">.*?</tr>', panel, re.S
    ).group(0)
    assert "part-1" in failed_row
    assert "fan_out" in failed_row
    assert '<td class="geneva-child-settled-as">failed</td>' in failed_row
    act = re.search(r'<a class="[^"]*geneva-act-on-children" href="([^"]+)">', panel)
    assert act.group(1) == f"/geneva/workflows/?parent={parent_id}"
    assert "Act on all 3 children" in words
    assert "geneva-children-next" not in panel


def test_the_parked_step_says_it_waits_for_children(client, geneva_jobs):
    """R-CHD-61: the waiting line of the execution parked at the
    wait_for_children gate names the settled children it needs, not a signal;
    once enough settled, the counts row says its wake is on its way."""
    parent_id, child_ids = build_family(geneva_jobs, failing={"part-1"})
    text = _page(client, detail_url(parent_id))
    line = re.search(r'<p class="geneva-waiting".*?</p>', text, re.S).group(0)
    assert "Step collect is waiting for 3 settled children (1 settled now)" in (
        _words(line)
    )
    assert "signal" not in line
    assert "reached" not in _panel(text)
    for child_id in (child_ids[0], child_ids[2]):
        OpsChild.get(child_id).cancel()
    assert "3 have settled: reached, its wake is on its way." in _words(
        _panel(_page(client, detail_url(parent_id)))
    )


def test_a_child_page_links_its_parent(client, geneva_jobs):
    """R-CHD-61: the Parent fact links the parent (class, id, state), names the
    starting step with its execution and the key, and how the child settled;
    a child without children has no panel."""
    parent_id, child_ids = build_family(geneva_jobs, failing={"part-1"})
    fan_out = execution_rows(parent_id)[0]["id"]
    text = _page(client, detail_url(child_ids[0]))
    fact = re.search(r'<dd class="col-sm-10 geneva-parent".*?</dd>', text, re.S)
    fact = fact.group(0)
    assert f'href="/geneva/workflows/{parent_id}">OpsParent #{parent_id}</a>' in fact
    assert f'href="/geneva/step-executions/{fan_out}"' in fact
    assert _words(fact).endswith(
        f"started by step fan_out (execution {fan_out} ), key part-0 ; not "
        "settled yet; canceling the parent cancels it."
    )
    assert 'id="children"' not in text
    failed = _page(client, detail_url(child_ids[1]))
    assert "settled for the parent as" in failed
    assert '<span class="geneva-parent-settled">failed</span>' in failed


def test_a_workflow_without_family_shows_neither(client):
    """R-CHD-61: a top-level workflow that started no child has no Parent fact
    and no panel."""
    text = _page(client, detail_url(ready_workflow().id))
    assert "geneva-parent" not in text
    assert 'id="children"' not in text


def test_a_parent_that_is_gone_is_said(client, geneva_jobs):
    """R-CHD-61: a child whose parent row was deleted names its id, no link."""
    parent_id, child_ids = build_family(geneva_jobs)
    for table, column in (
        (geneva.StepExecution.__table__, "workflow_id"),
        (geneva.Workflow.__table__, "id"),
    ):
        db.session.execute(sa.delete(table).where(table.c[column] == parent_id))
    db.session.commit()
    text = _page(client, detail_url(child_ids[0]))
    fact = re.search(r'<dd class="col-sm-10 geneva-parent".*?</dd>', text, re.S)
    assert f"#{parent_id}" in fact.group(0)
    assert "parent not found (deleted or cleaned up)" in fact.group(0)
    assert f'href="/geneva/workflows/{parent_id}"' not in fact.group(0)


def test_children_page_by_id_with_children_after(client, geneva_jobs):
    """R-CHD-61: 50 children a page by id; "next" carries the last id as
    children_after; a bad value is ignored with a note."""
    keys = [f"part-{n:02}" for n in range(CHILDREN_PAGE_SIZE + 5)]
    parent_id, child_ids = build_family(geneva_jobs, keys)
    panel = _panel(_page(client, detail_url(parent_id)))
    assert _listed_children(panel) == child_ids[:CHILDREN_PAGE_SIZE]
    last = child_ids[CHILDREN_PAGE_SIZE - 1]
    assert (
        f'href="/geneva/workflows/{parent_id}?children_after={last}#children"' in panel
    )
    assert "geneva-children-first" not in panel
    assert "Act on all 55 children" in _words(panel)
    second = _panel(_page(client, detail_url(parent_id), children_after=last))
    assert _listed_children(second) == child_ids[CHILDREN_PAGE_SIZE:]
    assert "geneva-children-next" not in second
    assert f'href="/geneva/workflows/{parent_id}#children"' in second
    past = _panel(_page(client, detail_url(parent_id), children_after=child_ids[-1]))
    assert f"No children after id {child_ids[-1]}." in past
    for bad in ("abc", "-3", "9" * 40, "1\x00"):
        panel = _panel(_page(client, detail_url(parent_id), children_after=bad))
        assert "is not a workflow id: the children are listed from the first" in panel
        assert _listed_children(panel) == child_ids[:CHILDREN_PAGE_SIZE]


def test_the_panel_costs_the_same_statements_for_3_or_55_children(client, geneva_jobs):
    """R-CHD-61: the panel's reads are bounded (a row by key, one grouped
    count, one page), whatever the number of children."""
    small, _ = build_family(geneva_jobs, email="small@example.com")
    keys = [f"k{n}" for n in range(CHILDREN_PAGE_SIZE + 5)]
    large, _ = build_family(geneva_jobs, keys, email="large@example.com")
    counts = []
    for parent_id in (small, large):
        db.session.remove()
        with recorded_statements() as statements:
            _page(client, detail_url(parent_id))
        counts.append(len(statements))
        # Of the children: one grouped count and one page (LIMIT 51).
        reads = [
            s
            for s in statements
            if "WHERE geneva_drive_workflows.parent_workflow_id =" in s
        ]
        assert len(reads) == 2, reads
        assert sum("GROUP BY" in s for s in reads) == 1
        assert sum("LIMIT" in s for s in reads) == 1
    assert counts[0] == counts[1]


def test_stored_keys_are_escaped(client, geneva_jobs):
    """R-CHD-61, R-ADM-06: a child key with markup is shown as text."""
    key = '<script>alert("k")</script>&amp;'
    parent_id, child_ids = build_family(geneva_jobs, [key, "plain"])
    for url in (detail_url(parent_id), detail_url(child_ids[0])):
        text = _page(client, url)
        assert "<script>alert" not in text
        assert "&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;&amp;amp;" in text


# -- R-CHD-62: the parent filter and bulk actions ---------------------------------


def test_the_parent_filter_lists_the_children(client, geneva_jobs):
    """R-CHD-62: ?parent=<id> lists that workflow's children only, says so,
    and links back to the parent; with state=, its children in that state."""
    parent_id, child_ids = build_family(geneva_jobs, failing={"part-1"})
    other_id, other_children = build_family(
        geneva_jobs, ["x"], email="other@example.com"
    )
    assert sorted(map(int, listed(client, parent=parent_id))) == child_ids
    text = _page(client, WORKFLOW_LIST, parent=str(parent_id))
    assert f"child of workflow {parent_id}" in text
    assert f'Children of <a href="/geneva/workflows/{parent_id}">' in text
    assert f'<input type="hidden" name="parent" value="{parent_id}">' in text
    assert 'name="parent" class="form-control' in text
    assert listed(client, parent=parent_id, state="paused") == [str(child_ids[1])]
    assert listed(client, parent=other_id) == [str(other_children[0])]
    assert listed(client, parent=child_ids[0]) == []  # a child without children


def test_a_bad_parent_value_is_ignored_with_a_note(client, geneva_jobs):
    """R-CHD-62, R-ADM-31: a parent value that is no id is ignored with a note,
    and acting on all matching is refused while it is."""
    parent_id, _ = build_family(geneva_jobs)
    everything = listed(client)
    for bad in ("abc", "-1", "9" * 40, "1\x00", "x" * 300):
        text = _page(client, WORKFLOW_LIST, parent=bad)
        assert "ignored parent filter" in text
        assert "not a valid workflow id" in text
        assert "geneva-bulk-all-off" in text
        assert listed(client, parent=bad) == everything
    token = csrf_token(client, WORKFLOW_LIST)
    before = workflow_row(parent_id)["state"]
    response = client.post(
        WORKFLOW_BULK,
        data={
            "csrf_token": token,
            "action": "cancel",
            "scope": "all",
            "confirm": "yes",
            "parent": "abc",
        },
    )
    assert response.status_code == 200
    assert "nothing was changed" in response.get_data(as_text=True)
    assert workflow_row(parent_id)["state"] == before
    assert {workflow_row(int(i))["state"] for i in everything} != {"canceled"}


def test_bulk_cancel_all_children_of_a_parent(client, geneva_jobs):
    """R-CHD-62: "Cancel all matching" with parent=<id> confirms with the
    filter's words and cancels exactly the children; each settles for the
    parent (settled and failed counts), nothing else changes."""
    parent_id, child_ids = build_family(geneva_jobs)
    other_id, other_children = build_family(
        geneva_jobs, ["x"], email="other@example.com"
    )
    token = csrf_token(client, WORKFLOW_LIST)
    data = {
        "csrf_token": token,
        "action": "cancel",
        "scope": "all",
        "parent": str(parent_id),
    }
    confirm = client.post(WORKFLOW_BULK, data=data).get_data(as_text=True)
    assert "Cancel all 3 workflows matching the filter?" in confirm
    assert f"<li>child of workflow {parent_id}</li>" in confirm
    assert f'<input type="hidden" name="parent" value="{parent_id}">' in confirm
    done = client.post(WORKFLOW_BULK, data={**data, "confirm": "yes"})
    assert "3 succeeded, 0 refused" in done.get_data(as_text=True)
    assert {workflow_row(i)["state"] for i in child_ids} == {"canceled"}
    assert workflow_row(parent_id)["state"] == "ready"
    assert workflow_row(other_id)["state"] == "ready"
    assert workflow_row(other_children[0])["state"] == "ready"
    counts = OpsParent.get(parent_id).child_counts
    assert (counts.started, counts.settled, counts.failed) == (3, 3, 3)
    panel = _panel(_page(client, detail_url(parent_id)))
    assert "Started 3 , settled 3 , failed 3 ." in _words(panel)
    assert re.findall(r'data-state="(\w+)"', panel) == ["canceled"]


# -- without the unit -------------------------------------------------------------


@pytest.fixture
def without_children(without_unit):
    without_unit("add_child_workflows")


def test_without_the_unit_nothing_is_read(client, without_children):
    """R-CHD-61/62: without add_child_workflows the workflow page reads nothing
    of children and shows neither; the list has no parent field and ignores
    parent= with a note naming the unit."""
    workflow_id = ready_workflow().id
    db.session.remove()
    with recorded_statements() as statements:
        text = _page(client, detail_url(workflow_id))
    assert not [s for s in statements if "child" in s or "parent_workflow" in s]
    assert 'id="children"' not in text
    assert "geneva-parent" not in text
    listing = _page(client, WORKFLOW_LIST)
    assert 'name="parent"' not in listing
    text = _page(client, WORKFLOW_LIST, parent=str(workflow_id))
    assert (
        f"ignored parent filter &#39;{workflow_id}&#39;: child workflows are not "
        "installed in this database (install unit add_child_workflows" in text
    )
    assert listed(client, parent=workflow_id) == [str(workflow_id)]


def test_lists_and_run_now_say_a_parked_parent_waits_for_children(client, geneva_jobs):
    """R-CHD-21, R-ADM-51: the workflows and executions lists' Next run reads
    "waiting for children" (not a signal), and Run now is refused saying the
    step waits for its children."""
    from flask_geneva import InvalidStateError

    parent_id, _child_ids = build_family(geneva_jobs)
    workflows_page = _words(_page(client, WORKFLOW_LIST))
    assert "waiting for children" in workflows_page
    assert "waiting for a signal" not in workflows_page
    executions_page = _words(_page(client, "/geneva/step-executions/"))
    assert "waiting for children" in executions_page
    assert "waiting for a signal" not in executions_page
    import html

    detail = html.unescape(_page(client, detail_url(parent_id)))
    assert "waits for its workflow's children to settle" in detail
    with pytest.raises(InvalidStateError, match="children to settle"):
        OpsParent.get(parent_id).run_now()
