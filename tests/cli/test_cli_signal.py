"""``flask geneva signal ID NAME`` (R-WSIG-60..62), run in-process like tests/cli/test_cli.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.apps.basic import db
from tests.apps.cli_app import CliAwaiting
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.db.test_workflow_signals_schema import without_signals  # noqa: F401
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user
from tests.support.workflow import update_execution
from tests.support.workflow import workflow_row


def _signals(workflow_id):
    rows = db.session.execute(
        db.text(
            "SELECT name, payload, idempotency_key, state FROM geneva_drive_signals "
            "WHERE workflow_id = :id ORDER BY id"
        ),
        {"id": workflow_id},
    ).all()
    db.session.rollback()
    return [
        (
            name,
            json.loads(payload) if isinstance(payload, str) else payload,
            key,
            state,
        )
        for name, payload, key, state in rows
    ]


def assert_usage_error(result, fragment):
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert fragment in error, result.stderr


def test_signal_wakes_the_parked_execution_and_says_so(geneva_cli):  # noqa: F811
    """The signal is delivered through workflow.signal(): the parked step is woken and the output names the execution (R-WSIG-60)."""
    workflow = CliAwaiting.create(hero=make_user("w@example.com"))
    perform_next_step(workflow)
    parked = execution_rows(workflow.id)[-1]
    assert parked["state"] == "waiting"
    result = geneva_cli(
        "signal", str(workflow.id), "paid", "--payload", '{"amount": 100}'
    )
    assert result.returncode == 0, result
    assert f"woke execution {parked['id']}" in result.stdout
    assert execution_rows(workflow.id)[-1]["state"] == "scheduled"
    [(name, payload, key, state)] = _signals(workflow.id)
    assert (name, key, state) == ("paid", None, "claimed")
    assert payload == {"amount": 100}


def test_signal_buffers_and_a_repeated_key_is_a_duplicate(geneva_cli):  # noqa: F811
    """Without a parked step the signal is stored pending; the same idempotency key again changes nothing and says so (R-WSIG-60, R-WSIG-22)."""
    workflow = CliAwaiting.create(hero=make_user("b@example.com"))
    first = geneva_cli("signal", str(workflow.id), "paid", "--idempotency-key", "k1")
    assert first.returncode == 0, first
    assert "stored, pending" in first.stdout
    again = geneva_cli("signal", str(workflow.id), "paid", "--idempotency-key", "k1")
    assert again.returncode == 0, again
    assert "duplicate of signal" in again.stdout
    assert "nothing changed" in again.stdout
    assert _signals(workflow.id) == [("paid", None, "k1", "pending")]


def test_a_signal_no_step_waits_for_is_stored_with_a_note(geneva_cli):  # noqa: F811
    """A misspelt name was stored pending with nothing to tell it from a good one;
    it stays pending until the workflow ends. It is still stored (a later deploy
    may wait for it), but the output names what the steps wait for (R-WSIG-60).
    """
    workflow = CliAwaiting.create(hero=make_user("typo@example.com"))
    typo = geneva_cli("signal", str(workflow.id), "piad")
    assert typo.returncode == 0, typo
    assert typo.stdout.strip().endswith(
        "stored, pending (no step of CliAwaiting waits for 'piad'; its steps "
        "wait for 'paid')"
    )
    # The note is the warning: no Python warning besides it (R-WSIG-73).
    assert "Warning" not in typo.stderr, typo.stderr
    good = geneva_cli("signal", str(workflow.id), "paid")
    assert good.stdout.strip().endswith("stored, pending"), good.stdout
    assert [row[0] for row in _signals(workflow.id)] == ["piad", "paid"]


def test_signal_is_not_an_operator_action(geneva_cli):  # noqa: F811
    """The signal row is the record; the workflow's operator actions stay untouched (R-WSIG-62)."""
    workflow = CliAwaiting.create(hero=make_user("o@example.com"))
    result = geneva_cli("signal", str(workflow.id), "paid")
    assert result.returncode == 0, result
    metadata = workflow_row(workflow.id).get("metadata") or {}
    assert "operator_actions" not in metadata


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("nope", "paid"), "invalid workflow id 'nope'"),
        (("987654", "paid"), "workflow 987654 not found"),
        (("{id}", "paid", "--payload", "{not json"), "is not valid JSON"),
        (("{id}", "paid", "--payload", json.dumps("x" * 300)), "more than"),
        (("{id}", "x" * 256), "at most 255 characters"),
    ],
)
def test_signal_refusals_are_usage_errors(geneva_cli, args, fragment, monkeypatch):  # noqa: F811
    """Bad ids, invalid JSON, a payload over the cap and a bad name exit 2 in one line, nothing stored (R-WSIG-61)."""
    monkeypatch.setenv("GENEVA_TEST_MAX_SIGNAL_PAYLOAD_SIZE", "100")
    workflow = CliAwaiting.create(hero=make_user("u@example.com"))
    result = geneva_cli("signal", *(a.replace("{id}", str(workflow.id)) for a in args))
    assert_usage_error(result, fragment)
    assert _signals(workflow.id) == []


def test_signal_to_a_finished_workflow_is_a_usage_error(geneva_cli):  # noqa: F811
    """A canceled workflow refuses the signal: exit 2, one line (R-WSIG-61, R-WSIG-24)."""
    workflow = CliAwaiting.create(hero=make_user("c@example.com"))
    workflow.cancel()
    result = geneva_cli("signal", str(workflow.id), "paid")
    assert_usage_error(result, "Cannot signal a canceled workflow")
    assert _signals(workflow.id) == []


def test_a_retried_key_after_the_end_is_a_duplicate(geneva_cli):  # noqa: F811
    """The key the workflow already received, sent again after it was canceled,
    is a duplicate: exit 0, nothing changed (R-WSIG-24, R-WSIG-61)."""
    workflow = CliAwaiting.create(hero=make_user("r@example.com"))
    workflow.signal("paid", idempotency_key="evt_1")
    workflow.cancel()
    result = geneva_cli(
        "signal", str(workflow.id), "paid", "--idempotency-key", "evt_1"
    )
    assert result.returncode == 0, result
    assert "nothing changed" in result.stdout
    assert _signals(workflow.id) == [("paid", None, "evt_1", "expired")]


def test_signal_to_a_full_buffer_is_a_usage_error(geneva_cli, monkeypatch):  # noqa: F811
    """One signal more than GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW: exit 2 (R-WSIG-61, R-WSIG-23)."""
    monkeypatch.setenv("GENEVA_TEST_MAX_PENDING_SIGNALS", "1")
    workflow = CliAwaiting.create(hero=make_user("f@example.com"))
    assert geneva_cli("signal", str(workflow.id), "paid").returncode == 0
    result = geneva_cli("signal", str(workflow.id), "paid")
    assert_usage_error(result, "GENEVA_MAX_PENDING_SIGNALS_PER_WORKFLOW")
    assert len(_signals(workflow.id)) == 1


def test_signal_without_the_unit_is_a_usage_error(geneva_cli, without_signals):  # noqa: F811
    """Without the add_workflow_signals unit: exit 2 naming flask geneva install (R-WSIG-61, R-WSIG-04)."""
    workflow_id = db.session.execute(
        db.text("SELECT max(id) FROM geneva_drive_workflows")
    ).scalar()
    db.session.rollback()
    if workflow_id is None:
        workflow = CliAwaiting.create(hero=make_user("n@example.com"))
        workflow_id = workflow.id
    result = geneva_cli("signal", str(workflow_id), "paid")
    assert_usage_error(result, "flask geneva install")


def test_status_shows_signal_waits(geneva_cli):  # noqa: F811
    """status and status --json count waiting executions, long waits and pending signals (R-WSIG-65)."""
    parked = CliAwaiting.create(hero=make_user("s1@example.com"))
    perform_next_step(parked)
    update_execution(
        execution_rows(parked.id)[-1]["id"],
        waiting_since=clock.now() - timedelta(days=2),
    )
    fresh = CliAwaiting.create(hero=make_user("s2@example.com"))
    perform_next_step(fresh)
    fresh.signal("other", warn_unawaited=False)
    result = geneva_cli("status", "--json")
    assert result.returncode == 0, result.stderr
    waits = json.loads(result.stdout)["signal_waits"]
    assert (waits["waiting"], waits["waiting_long"], waits["pending_signals"]) == (
        2,
        1,
        1,
    )
    assert 0 <= waits["oldest_pending_signal_age_seconds"] < 600
    table = geneva_cli("status")
    assert table.returncode == 0, table.stderr
    assert (
        "signal waits: 2 executions waiting, 1 longer than "
        "GENEVA_SIGNAL_WAIT_WARN_AFTER; 1 pending signals" in table.stdout
    )


def test_status_without_the_unit_has_no_signal_waits(geneva_cli, without_signals):  # noqa: F811
    """Without add_workflow_signals status works and shows no signal line (R-WSIG-65, R-WSIG-04)."""
    result = geneva_cli("status", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["signal_waits"] is None
    table = geneva_cli("status")
    assert table.returncode == 0, table.stderr
    assert "signal waits" not in table.stdout
