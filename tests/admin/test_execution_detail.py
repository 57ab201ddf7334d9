"""The step execution detail page (R-ADM-14, R-ADM-06, R-ADM-31, R-ADM-32)."""

from __future__ import annotations

import html
import re

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva import reset_column_caches
from flask_geneva.admin.presenters import CURSOR_PREVIEW_BYTES
from flask_geneva.admin.presenters import describe_policy_decision
from flask_geneva.admin.presenters import pretty_json
from tests import conftest
from tests.admin.execution_support import ESCAPED_SCRIPT
from tests.admin.execution_support import SCRIPT
from tests.admin.execution_support import detail_url
from tests.admin.execution_support import finished_resumable_chain
from tests.admin.execution_support import flaky_workflow
from tests.admin.support import failed_workflow
from tests.admin.support import ready_workflow
from tests.apps.basic import db
from tests.support.fuzzing import with_fixtures
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow


def page_text(client, execution_id) -> str:
    """GET the detail page, assert 200 and return its HTML."""
    page = client.get(detail_url(execution_id))
    assert page.status_code == 200, page.get_data(as_text=True)[:2000]
    return page.get_data(as_text=True)


def column_cell(text: str, name: str) -> str:
    """The inner HTML of the value cell of column ``name`` in the columns table."""
    match = re.search(
        rf'<tr data-column="{name}">\s*<th scope="row">{name}</th>\s*<td>(.*?)</td>',
        text,
        re.S,
    )
    assert match is not None, f"no row for column {name}"
    return match.group(1).strip()


def section(text: str, css_class: str) -> str:
    """The inner HTML of the first element with ``css_class`` (one line of markup)."""
    match = re.search(rf'class="[^"]*\b{css_class}\b[^"]*"[^>]*>(.*?)</dd>', text, re.S)
    assert match is not None, css_class
    return match.group(1)


def test_failed_execution_shows_every_column_error_backtrace_and_policy(client):
    """A failed execution's page lists every stored column, the error with a collapsible backtrace and the policy sentence (R-ADM-14, R-PDR-01)."""
    workflow = failed_workflow()
    row = execution_rows(workflow.id)[0]
    text = page_text(client, row["id"])
    # Every column of the row, the optional deferred ones included.
    shown = re.findall(r'<tr data-column="([^"]+)">', text)
    assert shown == list(row.keys())
    assert column_cell(text, "state") == "failed"
    assert column_cell(text, "error_class_name") == "RuntimeError"
    assert column_cell(text, "job_id") == row["job_id"]
    assert column_cell(text, "completed_at") == '<span class="text-muted">NULL</span>'
    assert column_cell(text, "failed_at") == row["failed_at"].strftime(
        "%Y-%m-%d %H:%M:%S.%f UTC"
    )
    assert column_cell(text, "metadata") == '<a href="#metadata">object with 2 keys</a>'
    # The error, escaped, and the backtrace in a <details> (collapsed without JS).
    assert "<strong>RuntimeError</strong>" in text
    assert "<script>alert(" not in text
    assert "&lt;script&gt;alert(&#39;boom&#39;)&lt;/script&gt;" in text
    backtrace = re.search(
        r'<details class="geneva-backtrace" id="backtrace"><summary>backtrace</summary>'
        r"<pre>(.*?)</pre></details>",
        text,
        re.S,
    )
    assert backtrace is not None
    assert html.unescape(backtrace.group(1)) == row["error_backtrace"]
    assert "in explode" in backtrace.group(1)
    sentence = describe_policy_decision(row["metadata"]["policy_decision"])
    assert sentence.startswith("pause — default policy")
    assert f'<li class="geneva-policy">Policy: {html.escape(sentence)}</li>' in text
    # The whole metadata, pretty-printed; its backtrace copy points to the Error
    # section instead of repeating it (R-ADM-48).
    metadata = re.search(r'<pre class="geneva-metadata"[^>]*>(.*?)</pre>', text, re.S)
    lines = len(row["metadata"]["exception"]["backtrace"])
    shown = {
        **row["metadata"],
        "exception": {
            **row["metadata"]["exception"],
            "backtrace": f"({lines} lines: shown under Error above)",
        },
    }
    assert html.unescape(metadata.group(1)) == pretty_json(shown)
    assert text.count("Traceback (most recent call last)") == 1
    # Links: the workflow, and no neighbours in a one-execution workflow.
    assert section(text, "geneva-workflow-link").startswith(
        f'<a href="/geneva/workflows/{workflow.id}">AdminFailing #{workflow.id}</a>'
    )
    assert "none (first execution)" in text
    assert "none (latest execution)" in text


def test_viewing_an_execution_writes_nothing(client):
    """Rendering the detail page leaves the stored row untouched (R-ADM-32)."""
    workflow = failed_workflow()
    before = execution_rows(workflow.id)[0]
    page_text(client, before["id"])
    db.session.rollback()
    assert execution_row(before["id"]) == before


def test_reattempted_execution_shows_the_reattempt_sentence_and_next_execution(client):
    """A reattempted execution shows 'reattempt … in 30 s' and links the next attempt (R-ADM-14, R-PDR-01)."""
    workflow = flaky_workflow()
    first, second = execution_rows(workflow.id)
    text = page_text(client, first["id"])
    decision = first["metadata"]["policy_decision"]
    sentence = describe_policy_decision(decision)
    assert "reattempt 1 of 2 in 30 s" in sentence
    assert html.escape(sentence) in text
    assert "Reattempt reason: exception_policy" in text
    assert SCRIPT not in text
    assert ESCAPED_SCRIPT in text
    following = section(text, "geneva-next")
    assert f'href="{detail_url(second["id"])}"' in following
    assert "call_api" in following
    text = page_text(client, second["id"])
    assert f'href="{detail_url(first["id"])}"' in section(text, "geneva-previous")
    assert '<span class="geneva-overdue">overdue</span>' not in text  # due in 30 s


def test_resumable_chain_links_predecessor_successor_and_neighbours(client):
    """Each execution of a resumable chain links its predecessor, successor and timeline neighbours, and shows its cursor (R-ADM-14)."""
    _, rows = finished_resumable_chain()
    first, middle, last, done = (row["id"] for row in rows)

    text = page_text(client, middle)
    assert f'href="{detail_url(first)}"' in section(text, "geneva-predecessor")
    assert f'href="{detail_url(last)}"' in section(text, "geneva-successors")
    assert f'href="{detail_url(first)}"' in section(text, "geneva-previous")
    assert f'href="{detail_url(last)}"' in section(text, "geneva-next")
    assert '<pre class="geneva-cursor">4</pre>' in text
    assert "Interrupted: max_iterations after 2 iterations" in text
    assert column_cell(text, "continues_from_id") == (
        f'<a href="{detail_url(first)}">{first}</a>'
    )

    text = page_text(client, first)
    assert section(text, "geneva-predecessor") == "none"
    assert f'href="{detail_url(middle)}"' in section(text, "geneva-successors")
    assert "none (first execution)" in text

    text = page_text(client, last)
    assert section(text, "geneva-successors") == "none"
    # The next execution of the workflow is another step, not a successor.
    assert f'href="{detail_url(done)}"' in section(text, "geneva-next")
    assert '<pre class="geneva-cursor">5</pre>' in text

    text = page_text(client, done)
    assert section(text, "geneva-predecessor") == "none"
    assert "none (latest execution)" in text
    assert column_cell(text, "cursor") == '<span class="text-muted">NULL</span>'
    assert 'id="cursor"' not in text


def test_a_cursor_over_2_kb_is_truncated_with_an_expand_control(client):
    """A cursor longer than 2 KB shows a 2 KB preview and the full value in <details>, escaped (R-ADM-14, R-ADM-06)."""
    _, rows = finished_resumable_chain()
    cursor = {"position": SCRIPT, "seen": ["é" * 50 for _ in range(60)]}
    update_execution(rows[1]["id"], cursor=cursor)
    text = page_text(client, rows[1]["id"])
    assert SCRIPT not in text
    full = pretty_json(cursor)
    assert len(full.encode()) > CURSOR_PREVIEW_BYTES
    preview = re.search(
        r'<pre class="geneva-cursor geneva-cursor-preview">(.*?)…</pre>', text, re.S
    )
    assert preview is not None
    assert len(html.unescape(preview.group(1)).encode()) <= CURSOR_PREVIEW_BYTES
    assert full.startswith(html.unescape(preview.group(1)))
    expanded = re.search(
        r'<details class="geneva-cursor"><summary>[^<]*</summary><pre>(.*?)</pre>'
        r"</details>",
        text,
        re.S,
    )
    assert expanded is not None
    assert html.unescape(expanded.group(1)) == full
    assert ESCAPED_SCRIPT in expanded.group(1)


@pytest.mark.parametrize(
    "cursor",
    [
        [1, "two", {"three": [3]}],
        "a plain string </pre><script>alert(1)</script>",
        3.5,
        True,
        {"nested": {"deeper": {"deepest": [None, False]}}},
        [],
        {},
    ],
    ids=["array", "string", "float", "bool", "nested", "empty-array", "empty-object"],
)
def test_a_cursor_of_any_json_shape_renders(client, cursor):
    """Cursors of every JSON shape render pretty-printed and escaped, never a 500 (R-ADM-31, R-ADM-06)."""
    _, rows = finished_resumable_chain()
    update_execution(rows[0]["id"], cursor=cursor)
    text = page_text(client, rows[0]["id"])
    assert SCRIPT not in text
    shown = re.search(r'<pre class="geneva-cursor">(.*?)</pre>', text, re.S)
    assert shown is not None
    assert html.unescape(shown.group(1)) == pretty_json(cursor)


@pytest.mark.backends("sqlite", "mysql")  # jsonb cannot hold unparsable text
def test_unparsable_metadata_and_cursor_render_with_markers(client):
    """Metadata and cursor text that does not parse show markers and the raw text, escaped, never a 500 (R-ADM-31, R-ADM-06)."""
    _, rows = finished_resumable_chain()
    execution_id = rows[1]["id"]
    with external_writer() as connection:
        quote = connection.dialect.identifier_preparer.quote  # CURSOR is reserved
        connection.execute(
            sa.text(
                "UPDATE geneva_drive_step_executions "
                f"SET metadata = :meta, {quote('cursor')} = :cursor WHERE id = :id"
            ),
            {"meta": "{not json " + SCRIPT, "cursor": "[" + SCRIPT, "id": execution_id},
        )
    db.session.expunge_all()  # the test shares the request's session (pytest-flask)
    text = page_text(client, execution_id)
    assert SCRIPT not in text
    assert '<span class="geneva-marker">unparsable metadata</span>' in text
    assert "unparsable cursor" in text
    metadata = re.search(r'<pre class="geneva-metadata"[^>]*>(.*?)</pre>', text, re.S)
    assert html.unescape(metadata.group(1)) == "{not json " + SCRIPT
    cursor = re.search(r'<pre class="geneva-cursor">(.*?)</pre>', text, re.S)
    assert html.unescape(cursor.group(1)) == "[" + SCRIPT
    # The chain links still work from the parsed columns.
    assert f'href="{detail_url(rows[0]["id"])}"' in section(text, "geneva-predecessor")


def test_metadata_of_the_wrong_shape_renders_with_a_marker(client):
    """Metadata that is JSON but not an object, or a garbage policy record, shows markers (R-ADM-31)."""
    workflow = failed_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    update_execution(execution_id, metadata=["not", "an", SCRIPT])
    text = page_text(client, execution_id)
    assert "metadata is not an object (list)" in text
    assert SCRIPT not in text
    metadata = re.search(r'<pre class="geneva-metadata"[^>]*>(.*?)</pre>', text, re.S)
    assert html.unescape(metadata.group(1)) == pretty_json(["not", "an", SCRIPT])
    # The error still shows from the columns.
    assert "<strong>RuntimeError</strong>" in text
    update_execution(execution_id, metadata={"policy_decision": SCRIPT})
    text = page_text(client, execution_id)
    assert "unreadable policy decision" in text
    assert SCRIPT not in text


def test_removed_class_and_removed_step_render_with_markers(client):
    """An execution of a step or class no longer in the code shows a marker, never a 500 (R-ADM-31)."""
    workflow = ready_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    update_execution(execution_id, step_name=SCRIPT)
    text = page_text(client, execution_id)
    assert "step no longer defined in the code" in text
    assert SCRIPT not in text
    update_workflow(workflow.id, type="RemovedWorkflowClass")
    db.session.expunge_all()
    text = page_text(client, execution_id)
    assert "class no longer defined in the code" in text
    assert "RemovedWorkflowClass #" in section(text, "geneva-workflow-link")


def test_overdue_and_stuck_markers(client):
    """A scheduled execution past its time is marked overdue; an old in-progress one stuck (R-ADM-14, R-HK-20)."""
    from datetime import timedelta

    from tests.admin.execution_support import overdue_by

    workflow = ready_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    update_execution(execution_id, scheduled_for=overdue_by(timedelta(minutes=1)))
    assert '<span class="geneva-overdue">overdue</span>' in page_text(
        client, execution_id
    )
    update_execution(
        execution_id, state="in_progress", started_at=overdue_by(timedelta(hours=2))
    )
    text = page_text(client, execution_id)
    assert "stuck in progress" in text
    assert '<span class="geneva-overdue">overdue</span>' not in text


def test_unknown_or_garbage_ids_are_404_not_500(client):
    """Unknown or malformed execution ids answer 404 (R-ADM-14, R-ADM-31)."""
    ready_workflow()
    for raw in ("999999", "abc", "-1", "1e9", "9" * 40, "١٢", "0x1", "1.0"):
        response = client.get(detail_url(raw))
        assert response.status_code == 404, raw


@with_fixtures(max_examples=40)
@given(raw=st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s))
def test_random_ids_never_give_a_500(client, raw):
    """Any text as an execution id answers 200 or 404, never a 500 (R-ADM-31)."""
    response = client.get(detail_url(raw))
    assert response.status_code in (200, 404), raw


def test_list_and_timeline_link_each_id_to_the_detail_page(client):
    """The executions list and the workflow timeline link each execution id to its page (R-ADM-13, R-ADM-12)."""
    workflow_id, rows = finished_resumable_chain()
    listing = client.get("/geneva/step-executions/").get_data(as_text=True)
    timeline = client.get(f"/geneva/workflows/{workflow_id}").get_data(as_text=True)
    for row in rows:
        link = f'<td><a href="{detail_url(row["id"])}">{row["id"]}</a></td>'
        assert link in listing
        assert link in timeline


def _drop_optional_execution_columns() -> None:
    db.session.remove()
    engine = db.engine
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as connection:
        if engine.dialect.name == "sqlite":
            # SQLite refuses to drop an indexed column.
            for index in (
                "on_continues_from_id",
                "on_worker_id",
                "recorded_errors",
                "on_error_class_name",
            ):
                connection.execute(
                    sa.text(
                        "DROP INDEX IF EXISTS "
                        f"index_geneva_drive_step_executions_{index}"
                    )
                )
        for column in (
            "metadata",
            "error_class_name",
            "cursor",
            "continues_from_id",
            "worker_id",
        ):
            connection.execute(
                sa.text(
                    f"ALTER TABLE {quote('geneva_drive_step_executions')} "
                    f"DROP COLUMN {quote(column)}"
                )
            )
    reset_column_caches()


def test_without_the_optional_columns_the_page_marks_them_absent(client):
    """Without the optional columns the page marks them 'not in this database' and still shows the error (R-ADM-14, R-DM-30, R-ADM-31, R-WRK-08)."""
    _drop_optional_execution_columns()
    try:
        workflow = failed_workflow()
        execution_id = db.session.scalar(
            sa.text("SELECT id FROM geneva_drive_step_executions")
        )
        db.session.rollback()
        text = page_text(client, execution_id)
        for name in (
            "metadata",
            "error_class_name",
            "cursor",
            "continues_from_id",
            "worker_id",
        ):
            assert column_cell(text, name) == (
                '<span class="geneva-marker">not in this database</span>'
            )
        assert column_cell(text, "step_name") == "explode"
        assert "&lt;script&gt;alert(&#39;boom&#39;)&lt;/script&gt;" in text
        assert '<details class="geneva-backtrace" id="backtrace">' in text
        assert section(text, "geneva-workflow-link").startswith(
            f'<a href="/geneva/workflows/{workflow.id}">'
        )
        listing = client.get(
            "/geneva/step-executions/?error_class=RuntimeError&only=has_cursor"
        ).get_data(as_text=True)
        assert "this database has no error_class_name column" in listing
        assert "this database has no cursor column" in listing
    finally:
        db.session.remove()
        reset_column_caches()
        # The server schema is shared by the session: have it rebuilt.
        conftest._server_schema_ready = False


def test_the_page_names_the_worker_and_goes_by_its_liveness(client):
    """An in-progress execution names its worker and last heartbeat; it is stuck
    when the worker is dead, not for age while it lives (R-WRK-06, R-WRK-09)."""
    import uuid
    from datetime import timedelta

    from flask_geneva.db import workers as worker_rows
    from tests.admin.execution_support import overdue_by

    workflow = ready_workflow()
    execution_id = execution_rows(workflow.id)[0]["id"]
    workers = db.metadata.tables["geneva_drive_workers"]

    def add_worker(age):
        worker_id = str(uuid.uuid4())
        identity = worker_rows.WorkerIdentity(worker_id, "h", 1, None, (), "t")
        db.session.remove()
        with db.engine.begin() as connection:
            worker_rows.insert_worker(connection, workers, identity)
            worker_rows.age_heartbeat(connection, workers, worker_id, age)
        return worker_id

    live = add_worker(timedelta(0))
    update_execution(
        execution_id,
        state="in_progress",
        started_at=overdue_by(timedelta(hours=2)),
        worker_id=live,
    )
    text = page_text(client, execution_id)
    assert f"Claimed by worker {live}:" in text
    assert "alive" in section(text, "geneva-worker")
    assert "stuck in progress" not in text
    dead = add_worker(timedelta(hours=1))
    update_execution(execution_id, worker_id=dead)
    text = page_text(client, execution_id)
    assert "<strong>dead</strong>" in section(text, "geneva-worker")
    assert "stuck in progress" in text


def test_an_execution_recovered_from_a_dead_worker_says_so(client):
    """The recovered execution's page and its workflow's timeline show
    WorkerLostError with the worker's name and last heartbeat, also once the
    dead worker's row is pruned (R-HK-29, R-ADM-12, R-ADM-14, R-WRK-07)."""
    from datetime import timedelta

    from flask_geneva import run_housekeeping
    from flask_geneva.db import workers as worker_rows
    from tests.admin.support import detail_url as workflow_url
    from tests.support.common_workflows import CountingOneStep
    from tests.support.workers import insert_worker
    from tests.support.workers import running_on
    from tests.support.workers import workers_table

    insert_worker(timedelta(0))
    dead = insert_worker(timedelta(hours=1))
    workflow = running_on(CountingOneStep, dead)
    execution_id = execution_rows(workflow.id)[0]["id"]
    db.session.rollback()  # on SQLite a read holds the write lock
    with db.engine.connect() as connection:
        heartbeat = worker_rows.last_heartbeat(connection, workers_table(), dead)
    assert run_housekeeping()["stuck_in_progress_recovered"] == 1
    named = f"worker {dead} (celery@host, host host, pid 4242) was lost"
    last = f"last heartbeat {heartbeat:%Y-%m-%d %H:%M:%S} UTC"
    text = page_text(client, execution_id)
    error = text.split('<h3 id="error">Error</h3>', 1)[1].split("</div>", 1)[0]
    assert "<strong>flask_geneva.exceptions.WorkerLostError</strong>" in error
    assert named in error
    assert last in error
    assert "the worker row is gone" in section(text, "geneva-worker")  # pruned
    timeline = client.get(workflow_url(workflow.id)).get_data(as_text=True)
    row = timeline.split(f'data-execution-id="{execution_id}"', 1)[1]
    row = row.split("</tr>", 1)[0]
    assert "<strong>flask_geneva.exceptions.WorkerLostError</strong>" in row
    assert named in row
