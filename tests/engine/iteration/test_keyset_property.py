"""Keyset iteration visits every row exactly once, however it is chunked (R-IT-21..23).

Property-based: rows whose cursor column has many duplicates, random batch sizes
and random interruption points (``max_iterations`` per execution). Every row is
processed once and in ``(column, pk)`` order, across the whole chain.
"""

from __future__ import annotations

import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from flask_geneva import resumable_step
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.fuzzing import with_fixtures
from tests.support.workflow import execution_rows
from tests.support.workflow import workflow_row

VISITED: list[int] = []
PLAN: dict[str, object] = {}


class KeysetWalk(geneva.Workflow):
    @resumable_step
    def walk(self, it):
        column = str(PLAN["column"])
        size = int(PLAN["batch_size"])  # type: ignore[call-overload]
        query = sa.select(User)
        if PLAN["mode"] == "batches":
            for batch in it.iterate_over_batches(
                query, batch_size=size, cursor_column=column
            ):
                VISITED.extend(batch.ids)
                db.session.execute(
                    sa.update(User).where(batch.where).values(counter=User.counter + 1)
                )
        else:
            for row in it.iterate_over_records(
                query, cursor_column=column, batch_size=size
            ):
                VISITED.append(row.id)
                row.counter += 1


def _reset_tables() -> None:
    db.session.remove()
    with db.engine.begin() as connection:
        connection.execute(sa.delete(geneva.StepExecution.__table__))
        connection.execute(sa.delete(geneva.Workflow.__table__))
        connection.execute(sa.delete(User.__table__))


@with_fixtures(max_examples=40)
@given(
    emails=st.lists(st.sampled_from(["a", "b", "c"]), min_size=0, max_size=12),
    batch_size=st.integers(min_value=1, max_value=5),
    chunks=st.lists(st.integers(min_value=1, max_value=4), min_size=0, max_size=6),
    column=st.sampled_from(["email", "id"]),
    mode=st.sampled_from(["records", "batches"]),
)
def test_every_row_is_processed_exactly_once_across_interruptions(
    app, geneva_jobs, emails, batch_size, chunks, column, mode
):
    """Rows sharing a cursor value are neither skipped nor repeated at any interruption point (R-IT-21, R-IT-22, R-IT-23, R-INT-02)."""
    _reset_tables()
    VISITED.clear()
    PLAN.update(column=column, batch_size=batch_size, mode=mode)
    hero = User(email="a")
    db.session.add(hero)
    db.session.add_all([User(email=email) for email in emails])
    db.session.commit()
    expected = [
        user_id
        for user_id, _ in db.session.execute(
            sa.select(User.id, User.email).order_by(
                *((User.email, User.id) if column == "email" else (User.id,))
            )
        )
    ]
    workflow = KeysetWalk.create(hero=hero)
    for count in chunks:
        if workflow_row(workflow.id)["state"] == "finished":
            break
        run_iterations(workflow, count)
    speedrun_workflow(workflow)
    assert workflow_row(workflow.id)["state"] == "finished"
    assert expected == VISITED
    db.session.expire_all()
    assert set(db.session.scalars(sa.select(User.counter))) == {1}
    walk = execution_rows(workflow.id)
    assert all(r["outcome"] == "continued" for r in walk[:-1])
    assert walk[-1]["outcome"] == "success"
