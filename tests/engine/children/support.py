"""Helpers the child-workflow break tests share: counts rows, children rows,
the parent's run of its fan-out step (SPEC §25)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import make_user

COUNTS_TABLE = "geneva_drive_child_counts"


def _reader() -> Any:
    return db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def counts_row(parent_id: Any) -> dict[str, Any] | None:
    """The parent's stored child counts row (all columns), or None."""
    table = db.metadata.tables[COUNTS_TABLE]
    with _reader() as connection:
        row = (
            connection.execute(
                sa.select(table).where(table.c.parent_workflow_id == parent_id)
            )
            .mappings()
            .first()
        )
    return None if row is None else dict(row)


def counts(parent_id: Any) -> tuple[int, int, int]:
    """``(started, settled, failed)`` of the parent, (0, 0, 0) without a row."""
    row = counts_row(parent_id)
    if row is None:
        return (0, 0, 0)
    return (row["started"], row["settled"], row["failed"])


def children_rows(parent_id: Any) -> list[Any]:
    """The parent's children rows, by id."""
    table = geneva.Workflow.__table__
    with _reader() as connection:
        return list(
            connection.execute(
                sa.select(table)
                .where(table.c.parent_workflow_id == parent_id)
                .order_by(table.c.id)
            ).mappings()
        )


def expected_counts(parent_id: Any) -> tuple[int, int, int]:
    """``(started, settled, failed)`` recomputed from the children rows: what the
    counts row must say (R-CHD-20)."""
    rows = children_rows(parent_id)
    settled = [row for row in rows if row["child_settled"] is not None]
    failed = [row for row in settled if row["child_settled"] in ("canceled", "failed")]
    return (len(rows), len(settled), len(failed))


def assert_counts_exact(parent_id: Any) -> tuple[int, int, int]:
    """The counts row equals what the children rows say, and every child's
    ``child_settled`` agrees with its state (R-CHD-20)."""
    for row in children_rows(parent_id):
        state, settled = row["state"], row["child_settled"]
        if state == "finished":
            assert settled == "finished", dict(row)
        elif state == "canceled":
            assert settled == "canceled", dict(row)
        elif state in ("ready", "performing"):
            assert settled is None, dict(row)
    stored = counts(parent_id)
    assert stored == expected_counts(parent_id)
    return stored


def heroes(prefix: str, count: int) -> list[Any]:
    """``count`` new heroes ``<prefix>-<n>@example.com``."""
    return [make_user(f"{prefix}-{index}@example.com") for index in range(count)]


def heroes_named(prefix: str) -> list[Any]:
    """The heroes :func:`heroes` made with ``prefix``, by id (in a step body)."""
    return list(
        db.session.scalars(
            sa.select(User).where(User.email.like(f"{prefix}-%")).order_by(User.id)
        )
    )


def run_fan_out(workflow_cls: Any, hero: Any, geneva_jobs: Any) -> tuple[Any, Any]:
    """Create a parent, run its first step (children started) without inline
    continuation; return ``(parent id, next execution id)`` with the
    publications cleared and the session removed."""
    parent = workflow_cls.create(hero=hero)
    parent_id, first_id = parent.id, parent.current_execution.id
    db.session.commit()
    geneva_jobs.clear()
    perform_step_execution(first_id, continue_inline=False)
    following = execution_rows(parent_id)[-1]
    geneva_jobs.clear()
    db.session.remove()
    return parent_id, following["id"]


def first_executions(parent_id: Any) -> list[Any]:
    """The scheduled execution id of each child, by child id."""
    found = []
    for row in children_rows(parent_id):
        executions = [e for e in execution_rows(row["id"]) if e["state"] == "scheduled"]
        found.extend(e["id"] for e in executions)
    return found


def deliver_now(execution_id: Any) -> None:
    """Deliver one execution in this thread, without inline continuation."""
    perform_step_execution(execution_id, continue_inline=False)
