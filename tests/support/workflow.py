"""Helpers shared by the workflow suites: read stored rows, act from another session."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from flask import current_app

from flask_geneva import signals
from flask_geneva.testing import perform_next_step
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva


def workflows_table() -> sa.Table:
    """The workflows table object (typed columns decode timestamps and JSON)."""
    return geneva.Workflow.__table__


def executions_table() -> sa.Table:
    """The step executions table object."""
    return geneva.StepExecution.__table__


def _reader() -> Any:
    """A separate connection that sees committed rows only and takes no lock.

    Autocommit: on SQLite every transaction begins IMMEDIATE (BTR-13), so a reading
    transaction would queue behind the test session's own open transaction.
    """
    return db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


@contextlib.contextmanager
def external_writer() -> Iterator[Any]:
    """A separate connection in a transaction, as another process would write.

    The shared test session's transaction is committed first: on SQLite it would
    hold the write lock this connection needs.
    """
    session = db.session()
    if session.in_transaction():
        session.commit()
    with db.engine.begin() as connection:
        yield connection


def _row_by_id(table: sa.Table, row_id: Any) -> Any:
    """The ``table`` row ``row_id`` (a mapping, None if gone), read through a
    separate connection."""
    with _reader() as connection:
        return (
            connection.execute(sa.select(table).where(table.c.id == row_id))
            .mappings()
            .one_or_none()
        )


def workflow_row(workflow_id: Any) -> Any:
    """Read the stored workflow row through a separate connection (None if gone)."""
    return _row_by_id(workflows_table(), workflow_id)


def _rows_of_workflow(table: sa.Table, workflow_id: Any) -> list[Any]:
    """The ``table`` rows of the workflow, oldest first, read through a separate
    connection."""
    with _reader() as connection:
        return list(
            connection.execute(
                sa.select(table)
                .where(table.c.workflow_id == workflow_id)
                .order_by(table.c.created_at, table.c.id)
            ).mappings()
        )


def execution_rows(workflow_id: Any) -> list[Any]:
    """Read the workflow's stored executions, oldest first, through a separate
    connection.
    """
    return _rows_of_workflow(executions_table(), workflow_id)


def signal_rows(workflow_id: Any) -> list[Any]:
    """Read the signals stored for the workflow, oldest first, through a separate
    connection (R-WSIG-20)."""
    return _rows_of_workflow(geneva.WorkflowSignal.__table__, workflow_id)


def execution_history(workflow_id: Any) -> list[tuple[str, str, str | None]]:
    """``(step_name, state, outcome)`` of each of the workflow's stored executions,
    oldest first (:func:`execution_rows`)."""
    return [
        (r["step_name"], r["state"], r["outcome"]) for r in execution_rows(workflow_id)
    ]


def fail_next_step(workflow: Any, error_type: type[BaseException] = Exception) -> None:
    """Run the workflow's next step (``perform_next_step``); it must raise
    ``error_type``."""
    with pytest.raises(error_type):
        perform_next_step(workflow)


#: For each action of a step's exception policy: the executions and the workflow
#: state after a condition of the step (``skip_if``, a cancel condition) raised.
#: Parameters ``("action", "history", "workflow_state")`` for
#: ``pytest.mark.parametrize``; ``history`` as :func:`execution_history` gives it,
#: for a step ``work`` followed by a step ``tail``.
CONDITION_ERROR_OUTCOMES = pytest.mark.parametrize(
    ("action", "history", "workflow_state"),
    [
        ("pause", [("work", "failed", "failed")], "paused"),
        ("cancel", [("work", "failed", "canceled")], "canceled"),
        (
            "reattempt",
            [("work", "completed", "reattempted"), ("work", "scheduled", None)],
            "ready",
        ),
        (
            "skip",
            [("work", "skipped", "skipped"), ("tail", "scheduled", None)],
            "ready",
        ),
    ],
)


def execution_row(execution_id: Any) -> Any:
    """Read one stored execution row through a separate connection."""
    return _row_by_id(executions_table(), execution_id)


def count_workflows() -> int:
    """Number of stored workflow rows."""
    with _reader() as connection:
        return int(
            connection.scalar(sa.select(sa.func.count()).select_from(workflows_table()))
        )


def update_workflow(workflow_id: Any, **values: Any) -> None:
    """Change the workflow row from a separate connection (an "external" writer)."""
    table = workflows_table()
    with external_writer() as connection:
        connection.execute(
            sa.update(table).where(table.c.id == workflow_id).values(**values)
        )


def update_execution(execution_id: Any, **values: Any) -> None:
    """Change an execution row from a separate connection (an "external" writer)."""
    table = executions_table()
    with external_writer() as connection:
        connection.execute(
            sa.update(table).where(table.c.id == execution_id).values(**values)
        )


def hero_counter(user_id: Any) -> int:
    """The stored ``counter`` of a user."""
    table = User.__table__
    with _reader() as connection:
        return int(
            connection.scalar(sa.select(table.c.counter).where(table.c.id == user_id))
        )


def delete_user(user_id: Any) -> None:
    """Delete a hero row through a connection of its own, as another process would.

    The test session is not touched, so a receiver or hook may call it while the
    executor runs (between its transactions: on SQLite an open write transaction
    of the session would hold the lock this needs).
    """
    table = User.__table__
    with db.engine.begin() as connection:
        connection.execute(sa.delete(table).where(table.c.id == user_id))


def deleting_user_after_the_claim(user_id: Any) -> Any:
    """A context in which the hero is deleted between a step's claim and its body.

    The executor sends the ``precondition`` signal with outcome ``passed`` once
    Phase 1's claim committed (R-SIG-02); the receiver deletes the hero then,
    as another process might a few milliseconds after ``create()``.
    """

    def delete(sender: Any, payload: dict[str, Any]) -> None:
        if payload["outcome"] == "passed":
            delete_user(user_id)

    return signals.precondition.connected_to(delete)


def make_user(email: str = "other@example.com") -> Any:
    """Insert and commit another hero."""
    hero = User(email=email)
    db.session.add(hero)
    db.session.commit()
    return hero


def in_other_thread(action: Callable[[], Any]) -> Any:
    """Run ``action`` in a new thread with its own app context (and so its own session).

    Returns what ``action`` returned; re-raises what it raised. The step context of
    the calling thread does not follow into the new thread, so flow-control calls
    made there are external operations (R-FC-01).
    """
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    outcome: dict[str, Any] = {}

    def target() -> None:
        with app.app_context():
            try:
                outcome["result"] = action()
            except BaseException as error:  # noqa: BLE001 - handed back to the caller
                outcome["error"] = error
            finally:
                db.session.remove()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    if thread.is_alive():
        raise AssertionError("the other thread did not finish within 60 s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def externally(workflow_id: Any, operation: str, **kwargs: Any) -> Any:
    """Call ``operation`` on the workflow from another thread; return the result or its
    id.
    """

    def action() -> Any:
        workflow = geneva.Workflow.get(workflow_id)
        result = getattr(workflow, operation)(**kwargs)
        return getattr(result, "id", result)

    return in_other_thread(action)


def start_without_jobs(
    workflow_cls: Any, user: Any, geneva_jobs: Any
) -> tuple[Any, Any]:
    """Create ``workflow_cls`` for ``user`` and forget its published job.

    Returns ``(workflow id, first execution id)``; the session is removed, so
    the test runs the execution itself.
    """
    workflow = workflow_cls.create(hero=user)
    first_id = workflow.current_execution.id
    workflow_id = workflow.id
    geneva_jobs.clear()
    db.session.remove()
    return workflow_id, first_id


def run_together(app: Any, actions: list[Callable[[], Any]]) -> list[Any]:
    """Run ``actions`` in threads of their own, each in an app context, started
    at one barrier; return their results in order.

    Raises:
        AssertionError: An action raised; the message lists every such error.
    """
    barrier = threading.Barrier(len(actions))
    errors: list[BaseException] = []
    results: list[Any] = [None] * len(actions)

    def run(index: int, action: Callable[[], Any]) -> None:
        try:
            with app.app_context():
                barrier.wait(timeout=30)
                results[index] = action()
                db.session.remove()
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(index, action))
        for index, action in enumerate(actions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [], [f"{type(e).__name__}: {e}" for e in errors]
    return results
