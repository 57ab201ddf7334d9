"""A delivered plain step is claimed by its locking statement (R-EXE-84).

On PostgreSQL the claim's locking read carries the claim's UPDATEs. Each case
runs twice: ``statement`` as the executor runs, ``locked`` with the one-statement
claim turned off (the locking read, the checks, then the claim's UPDATE), and
both must end the same way: the rows the claim writes, a duplicate, early or
stopped delivery, a missing hero, a step that is not plain, an operator's
pause that commits while the claim waits for the row lock.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from flask_geneva import Executor
from flask_geneva import step
from flask_geneva.engine.executor import statement_claim
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import recorded_statements
from tests.support.workflow import delete_user
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import external_writer
from tests.support.workflow import start_without_jobs
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow
from tests.support.workflow import workflow_row
from tests.support.workflow import workflows_table

pytestmark = pytest.mark.backends("postgresql")

#: What each body saw of its own rows, read through another connection.
SEEN: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
#: The claim statement's mark: its data-modifying CTE.
CLAIM_CTE = "geneva_claimed_execution"
#: The separate claim UPDATE of the locked path: it starts the execution.
LOCKED_CLAIM = re.compile(
    r"UPDATE geneva_drive_step_executions SET state=\S+, started_at="
)


def _see(workflow: Any, name: str) -> None:
    execution = workflow.current_execution
    SEEN.append(
        (name, dict(workflow_row(workflow.id)), dict(execution_row(execution.id)))
    )


class PlainPair(geneva.Workflow):
    """Two plain steps."""

    @step
    def first(self):
        _see(self, "first")

    @step
    def second(self):
        _see(self, "second")


class ConditionedPair(geneva.Workflow):
    """The same two steps, the second with a skip condition: not plain."""

    @step
    def first(self):
        _see(self, "first")

    @step(skip_if=lambda workflow: workflow.hero.email.startswith("skip"))
    def second(self):
        _see(self, "second")


@pytest.fixture(autouse=True)
def _clean():
    SEEN.clear()
    yield
    SEEN.clear()


@pytest.fixture(params=["statement", "locked"])
def claim_mode(request, monkeypatch):
    """``locked`` turns the one-statement claim off: the outcome to compare with."""
    if request.param == "locked":
        monkeypatch.setattr(
            statement_claim, "claim", lambda run: statement_claim.StatementClaim()
        )
    return request.param


def _second_delivery(workflow_cls, user, geneva_jobs):
    """Run the first step alone; return (workflow id, the second's execution id)."""
    workflow_id, first_id = start_without_jobs(workflow_cls, user, geneva_jobs)
    Executor.execute(first_id)
    db.session.remove()
    rows = execution_rows(workflow_id)
    assert [row["state"] for row in rows] == ["completed", "scheduled"]
    return workflow_id, rows[-1]["id"]


def _claims(statements: list[str]) -> tuple[int, int]:
    """(claim statements, separate claim UPDATEs) among ``statements``."""
    return (
        sum(CLAIM_CTE in s for s in statements),
        sum(bool(LOCKED_CLAIM.search(s)) for s in statements if CLAIM_CTE not in s),
    )


def _locks(statements: list[str]) -> int:
    """The locking statements among ``statements``."""
    return sum("FOR UPDATE" in s for s in statements)


def test_a_plain_step_is_claimed_by_its_locking_statement(app, user, geneva_jobs):
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    with recorded_statements() as statements:
        Executor.execute(second_id)
    # The claim's read wrote the claim; no UPDATE of its own followed.
    assert _claims(statements) == (1, 0)
    # The first locking statement is the claim's (the last step's finalize locks).
    locking = [s for s in statements if "FOR UPDATE" in s]
    assert CLAIM_CTE in locking[0]
    assert [s.split()[0].upper() for s in locking] == ["WITH", "SELECT"]
    assert workflow_row(workflow_id)["state"] == "finished"
    assert execution_row(second_id)["state"] == "completed"
    assert [name for name, _, _ in SEEN] == ["first", "second"]


def test_the_statement_writes_what_the_locked_claim_writes(
    app, user, geneva_jobs, monkeypatch
):
    """The rows the body finds, claimed by the statement and by the locked path."""
    _, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    Executor.execute(second_id)
    by_statement = SEEN[-1]
    db.session.remove()
    other = type(user)(email="other@example.com")
    db.session.add(other)
    db.session.commit()
    monkeypatch.setattr(
        statement_claim, "claim", lambda run: statement_claim.StatementClaim()
    )
    _, locked_second_id = _second_delivery(PlainPair, other, geneva_jobs)
    Executor.execute(locked_second_id)
    by_lock = SEEN[-1]
    assert _comparable(by_statement) == _comparable(by_lock)
    _, workflow, execution = by_statement
    assert (workflow["state"], execution["state"]) == ("performing", "in_progress")
    assert workflow["current_step_name"] == "second"
    # The first claim set started_at; the second kept it.
    assert workflow["started_at"] < execution["started_at"]
    assert execution["started_at"] == execution["updated_at"] == workflow["updated_at"]


def _comparable(seen: tuple[str, dict[str, Any], dict[str, Any]]) -> Any:
    """The rows with ids, heroes and times reduced to what must be equal."""
    name, workflow, execution = seen

    def reduced(row: dict[str, Any]) -> dict[str, Any]:
        return {
            key: (value is not None)
            if isinstance(value, dt.datetime) or key in {"id", "workflow_id", "hero_id"}
            else value
            for key, value in row.items()
            if key not in {"job_id"}
        }

    return name, reduced(workflow), reduced(execution)


def test_a_step_that_is_not_plain_is_claimed_after_its_checks(
    app, user, geneva_jobs, claim_mode
):
    """A skip condition is user code: the statement locks, the checks skip it."""
    user.email = "skip@example.com"
    db.session.commit()
    workflow_id, second_id = _second_delivery(ConditionedPair, user, geneva_jobs)
    with recorded_statements() as statements:
        Executor.execute(second_id)
    assert _claims(statements)[1] == 0  # skipped: nothing claimed
    assert execution_row(second_id)["state"] == "skipped"
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [name for name, _, _ in SEEN] == ["first"]


def test_a_duplicate_delivery_changes_nothing(app, user, geneva_jobs, claim_mode):
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    Executor.execute(second_id)
    before = (dict(workflow_row(workflow_id)), dict(execution_row(second_id)))
    with recorded_statements() as statements:
        Executor.execute(second_id)
    assert (dict(workflow_row(workflow_id)), dict(execution_row(second_id))) == before
    assert _claims(statements)[1] == 0
    assert _locks(statements) == 1  # the statement's guard refused: no second lock
    assert [name for name, _, _ in SEEN] == ["first", "second"]


def test_an_early_delivery_is_not_claimed(app, user, geneva_jobs, claim_mode):
    """R-EXE-18: beyond the clock-skew tolerance the step waits for its time."""
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    update_execution(second_id, scheduled_for=later)
    with recorded_statements() as statements:
        Executor.execute(second_id)
    assert _locks(statements) == 1
    assert execution_row(second_id)["state"] == "scheduled"
    assert workflow_row(workflow_id)["state"] == "ready"
    assert [name for name, _, _ in SEEN] == ["first"]


def test_a_paused_workflow_is_not_claimed(app, user, geneva_jobs, claim_mode):
    """R-EXE-12: the delivered execution of a stopped workflow is canceled."""
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    update_workflow(workflow_id, state="paused")
    with recorded_statements() as statements:
        Executor.execute(second_id)
    assert _locks(statements) == 1
    assert execution_row(second_id)["state"] == "canceled"
    assert workflow_row(workflow_id)["state"] == "paused"
    assert [name for name, _, _ in SEEN] == ["first"]


@pytest.mark.parametrize("probed", [True, False], ids=["probed", "loaded"])
def test_a_missing_hero_cancels_the_workflow(
    app, user, geneva_jobs, claim_mode, probed, monkeypatch
):
    """R-EXE-13: whether the statement probed the hero or the claim loads it."""
    user_id = user.id
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    if not probed:
        from flask_geneva.engine.executor import hero_probes

        monkeypatch.setattr(hero_probes, "claim_probes", lambda session: ())
    delete_user(user_id)
    with recorded_statements() as statements:
        Executor.execute(second_id)
    # Not probed, the hero is loaded after the statement claimed: rolled back,
    # Phase 1 locks again and cancels.
    assert _locks(statements) == (2 if claim_mode == "statement" and not probed else 1)
    assert execution_row(second_id)["state"] == "canceled"
    assert workflow_row(workflow_id)["state"] == "canceled"
    assert [name for name, _, _ in SEEN] == ["first"]


def test_a_pause_committed_while_the_claim_waits_wins(
    app, user, geneva_jobs, claim_mode
):
    """The claim waits for the operator's row lock, then sees the pause."""
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    table = workflows_table()
    finished = threading.Event()
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            with app.app_context():
                Executor.execute(second_id)
                db.session.remove()
        except BaseException as error:  # noqa: BLE001 - asserted below
            errors.append(error)
        finally:
            finished.set()

    with external_writer() as connection:
        connection.execute(
            sa.select(table.c.id).where(table.c.id == workflow_id).with_for_update()
        )
        worker = threading.Thread(target=deliver)
        worker.start()
        time.sleep(0.5)
        assert not finished.is_set()  # waiting for the workflow's row lock
        connection.execute(
            sa.update(table).where(table.c.id == workflow_id).values(state="paused")
        )
    worker.join(timeout=30)
    assert finished.is_set()
    assert errors == []
    assert execution_row(second_id)["state"] == "canceled"
    assert workflow_row(workflow_id)["state"] == "paused"
    assert [name for name, _, _ in SEEN] == ["first"]


def test_a_claim_the_transition_disagrees_with_is_made_again(
    app, user, geneva_jobs, monkeypatch, caplog
):
    """Rolled back and claimed by the locked path, logged; the body runs once."""
    from flask_geneva.db import write_path

    monkeypatch.setattr(write_path, "settle_written_claim", lambda *args: False)
    workflow_id, second_id = _second_delivery(PlainPair, user, geneva_jobs)
    with recorded_statements() as statements:
        Executor.execute(second_id)
    assert _claims(statements) == (1, 1)
    assert "wrote other values than the claim transition" in caplog.text
    assert execution_row(second_id)["state"] == "completed"
    assert workflow_row(workflow_id)["state"] == "finished"
    assert [name for name, _, _ in SEEN] == ["first", "second"]
