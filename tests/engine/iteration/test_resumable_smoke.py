"""Resumable steps run through the executor: checkpoints, interruption, chains."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa

from flask_geneva import resumable_step
from flask_geneva import step
from flask_geneva.testing import run_iterations
from flask_geneva.testing import speedrun_workflow
from tests.apps.basic import User
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.statements import recorded_statements

PROCESSED: list[int] = []


class ResumableSmokeCount(geneva.Workflow):
    @resumable_step(max_iterations=3)
    def walk(self, it):
        for item in it.iterate_over(range(7)):
            PROCESSED.append(item)

    @step
    def done(self):
        pass


def test_interrupted_chunks_chain_and_finish(user, geneva_jobs):
    """max_iterations interrupts; successors continue from the cursor (R-RES-04, R-INT-01, R-SE-10)."""
    PROCESSED.clear()
    workflow = ResumableSmokeCount.create(hero=user)
    first = run_iterations(workflow, 3)
    assert first.state == "completed"
    assert first.outcome == "continued"
    assert PROCESSED == [0, 1, 2]
    speedrun_workflow(workflow)
    assert workflow.state == "finished"
    assert PROCESSED == [0, 1, 2, 3, 4, 5, 6]
    walk = [e for e in workflow.execution_history if e.step_name == "walk"]
    assert walk[0].outcome == "continued"
    assert walk[1].continues_from_id == walk[0].id


@pytest.mark.backends("mysql")
def test_every_statement_naming_the_cursor_column_quotes_it(user, geneva_jobs):
    """``cursor`` is a reserved word on MariaDB: each statement of a chain's life that
    names the column (insert, checkpoint, successor, rewind, reads) quotes it
    (R-DM-15)."""
    PROCESSED.clear()
    with recorded_statements() as statements:
        workflow = ResumableSmokeCount.create(hero=user)
        run_iterations(workflow, 3)
        workflow.pause()
        workflow.resume(rewind=True)
        speedrun_workflow(workflow)
        cursors = [e.cursor_value for e in workflow.execution_history]
    assert workflow.state == "finished"
    assert cursors[0] == 3
    naming = [s for s in statements if "cursor" in s.lower()]
    assert len(naming) >= 10, naming
    # Parameter placeholders such as %(cursor)s are names, not identifiers.
    unquoted = [
        s
        for s in naming
        if re.search(
            r"(?<![`\w])cursor(?![`\w])", re.sub(r"%\(\w+\)s", "", s), re.IGNORECASE
        )
    ]
    assert unquoted == []


class ResumableSmokeRecords(geneva.Workflow):
    @resumable_step(max_iterations=4)
    def touch(self, it):
        for row in it.iterate_over_records(
            sa.select(User), cursor_column="email", batch_size=3
        ):
            row.counter += 1


def test_records_keyset_on_non_unique_column_visits_each_row_once(app, geneva_jobs):
    """A non-pk cursor column uses (value, pk) so duplicates are neither skipped nor repeated (R-IT-22)."""
    users = [User(email=f"same{i % 3}@example.com") for i in range(10)]
    db.session.add_all(users)
    db.session.commit()
    workflow = ResumableSmokeRecords.create(hero=users[0])
    speedrun_workflow(workflow)
    db.session.expire_all()
    assert [
        u.counter for u in db.session.scalars(sa.select(User).order_by(User.id))
    ] == [1] * 10
