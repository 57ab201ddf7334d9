"""Stored text renders escaped; odd rows render with markers, never a 500 (R-ADM-06, R-ADM-31)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from tests.admin.conftest import csrf_token
from tests.admin.support import WORKFLOW_LIST_FILTERS
from tests.admin.support import detail_url
from tests.admin.support import failed_workflow
from tests.admin.support import paused_resumable_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.support.fuzzing import with_fixtures
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row

SCRIPT = "<script>alert(1)</script>"


def test_error_message_with_script_renders_as_text(client):
    """An error message containing <script> is escaped in the timeline (R-ADM-06)."""
    workflow = failed_workflow()
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert "<script>alert(" not in text
    assert "&lt;script&gt;alert(&#39;boom&#39;)&lt;/script&gt;" in text


def test_cursor_value_with_script_renders_as_text(client):
    """A cursor value containing <script> is escaped in the chain view (R-ADM-06, R-ADM-12)."""
    workflow = paused_resumable_workflow()
    first = execution_rows(workflow.id)[0]
    update_execution(first["id"], cursor={"position": SCRIPT})
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_hero_label_with_script_renders_as_text(client):
    """A hero type and hero label containing <script> are escaped (R-ADM-06, R-ADM-31)."""
    workflow = ready_workflow()
    update_workflow(workflow.id, hero_type=SCRIPT)
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert SCRIPT not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;#" in text
    assert "hero type cannot be resolved" in text
    listing = client.get("/geneva/workflows/").get_data(as_text=True)
    assert SCRIPT not in listing


def test_step_name_with_script_renders_as_text(client):
    """A stored step name containing <script> is escaped and marked as undefined (R-ADM-06, R-ADM-31)."""
    workflow = ready_workflow()
    update_execution(execution_rows(workflow.id)[0]["id"], step_name=SCRIPT)
    text = client.get(detail_url(workflow.id)).get_data(as_text=True)
    assert SCRIPT not in text
    assert "no longer defined" in text


def test_workflow_of_a_removed_class_renders_with_a_marker(client):
    """A row whose class is gone renders with a marker on the detail, list and overview pages (R-ADM-31)."""
    workflow_id = ready_workflow().id
    update_workflow(workflow_id, type="RemovedWorkflowClass")
    db.session.expunge_all()  # the test shares the request's session (pytest-flask)
    for url in (detail_url(workflow_id), "/geneva/workflows/", "/geneva/"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert "class no longer defined" in page.get_data(as_text=True)


def test_deleted_hero_renders_with_a_marker(client):
    """A workflow whose hero row was deleted shows 'hero not found' (R-ADM-31)."""
    workflow = ready_workflow()
    hero_id = workflow.hero_id
    with external_writer() as connection:
        connection.execute(
            sa.delete(User.__table__).where(User.__table__.c.id == hero_id)
        )
    page = client.get(detail_url(workflow.id))
    assert page.status_code == 200
    assert "hero not found" in page.get_data(as_text=True)


def test_metadata_of_the_wrong_shape_renders_with_a_marker(client):
    """Metadata that is JSON but not an object renders a marker, not a 500 (R-ADM-31)."""
    workflow = failed_workflow()
    update_execution(
        execution_rows(workflow.id)[0]["id"], metadata=["not", "an", "object"]
    )
    update_workflow(workflow.id, metadata="a string")
    page = client.get(detail_url(workflow.id))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "metadata is not an object (list)" in text
    assert "metadata is not an object (str)" in text


@pytest.mark.backends("sqlite", "mysql")  # jsonb cannot hold unparsable text
def test_unparsable_metadata_renders_with_a_marker(client):
    """Metadata text that does not parse as JSON renders 'unparsable metadata' (R-ADM-31)."""
    workflow = failed_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    with external_writer() as connection:
        connection.execute(
            sa.text(
                "UPDATE geneva_drive_step_executions SET metadata = :raw WHERE id = :id"
            ),
            {"raw": "{not json", "id": execution_id},
        )
    page = client.get(detail_url(workflow.id))
    assert page.status_code == 200
    assert "unparsable metadata" in page.get_data(as_text=True)


@pytest.mark.backends("sqlite", "mysql")  # jsonb cannot hold unparsable text
def test_unparsable_cursor_renders_with_a_marker(client):
    """Cursor text that does not parse renders raw with a marker on both pages (R-ADM-31)."""
    workflow = failed_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    with external_writer() as connection:
        column = connection.dialect.identifier_preparer.quote("cursor")  # reserved
        connection.execute(
            sa.text(
                f"UPDATE geneva_drive_step_executions SET {column} = :raw "
                "WHERE id = :id"
            ),
            {"raw": "{broken <cursor", "id": execution_id},
        )
    page = client.get(detail_url(workflow.id))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "unparsable cursor" in text
    assert "{broken &lt;cursor" in text
    detail = client.get(f"/geneva/step-executions/{execution_id}")
    assert detail.status_code == 200
    assert "{broken &lt;cursor" in detail.get_data(as_text=True)


def test_unknown_or_garbage_ids_are_404_not_500(client):
    """Detail URLs with unknown or malformed ids answer 404 (R-ADM-31)."""
    for raw in ("999999", "abc", "-1", "1e9", "9" * 40):
        assert client.get(f"/geneva/workflows/{raw}").status_code == 404, raw


_LIST_PARAMS = [
    *WORKFLOW_LIST_FILTERS,
    "sort",
    "dir",
    "page",
    "only",
    "step_name",
]
# Text plus values close to valid ones (dates, ids, flags), so validation is reached.
_PARAM_VALUES = st.one_of(
    st.text(max_size=30),
    st.dates().map(str),
    st.datetimes().map(lambda value: value.isoformat()),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.sampled_from(["1", "0", "on", "paused", "AdminTwoStep", "RuntimeError"]),
)


@with_fixtures(max_examples=60)
@given(
    params=st.dictionaries(
        st.sampled_from(_LIST_PARAMS), _PARAM_VALUES, max_size=len(_LIST_PARAMS)
    )
)
def test_random_list_filters_never_give_a_500(client, params):
    """Random filter/sort/page query strings on the list URLs never produce a 500 (R-ADM-11, R-ADM-13, R-ADM-31)."""
    for url in ("/geneva/", "/geneva/workflows/", "/geneva/step-executions/"):
        response = client.get(url, query_string=params)
        assert response.status_code == 200, (url, params)


@with_fixtures(max_examples=40)
@given(
    params=st.dictionaries(
        st.sampled_from(_LIST_PARAMS), _PARAM_VALUES, max_size=len(_LIST_PARAMS)
    ),
    action=st.sampled_from(["pause", "resume", "cancel"]),
)
def test_random_filters_on_the_bulk_all_confirmation_never_give_a_500(
    client, params, action
):
    """Random filter fields in an "all matching" bulk POST give a confirmation page, never a 500, and change nothing (R-ADM-23, R-ADM-31)."""
    workflow_id = ready_workflow().id
    token = csrf_token(client, "/geneva/workflows/")
    response = client.post(
        "/geneva/workflows/bulk",
        data={**params, "csrf_token": token, "action": action, "scope": "all"},
    )
    assert response.status_code == 200, params
    text = response.get_data(as_text=True)
    assert (
        "data-geneva-confirm" in text
        or "no workflows match" in text
        or "all matching: nothing was changed" in text
    )
    assert workflow_row(workflow_id)["state"] == "ready"


def test_nul_bytes_and_non_ascii_digits_in_filters_are_ignored_with_a_note(client):
    """NUL bytes and digits like '²' in filters are ignored with a note, never a 500 (R-ADM-31)."""
    for params in ({"type": "\x00"}, {"page": "²"}, {"hero_id": "²"}, {"q": "١٢"}):
        response = client.get("/geneva/workflows/", query_string=params)
        assert response.status_code == 200, params
    text = client.get("/geneva/workflows/", query_string={"type": "a\x00b"}).get_data(
        as_text=True
    )
    assert "contains a NUL byte" in text
