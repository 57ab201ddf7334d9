"""A rate limit of 1 start per window (6 s) with several waiters and a paused head.

R-LIM-14: a paused workflow's waiter is not granted; R-LIM-24: the head
eligible waiter is woken when the window allows, one at a time; R-EXE-12: a
granted waiter delivered while its workflow is paused is dropped, and its
grant goes on (R-LIM-21). Every start stays a full window after the one
before it (R-LIM-23), by the database's clock, and every body runs once.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime
from datetime import timedelta

from flask_geneva import Limit
from flask_geneva import step
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.limits.test_rate import drain_until
from tests.support.limits import assert_consistent
from tests.support.limits import assert_idle
from tests.support.limits import first_execution
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import workflow_row

NAME = "test-rate-one-a-second"
#: 6 s, not 1: the head must still be waiting for its grant's eta when the
#: first drain ends, however long a loaded machine takes to get there (with
#: 3 s, one CI run under load started a second waiter within the first drain).
WINDOW = timedelta(seconds=6)
RUNS: Counter[str] = Counter()


class OneASecond(geneva.Workflow):
    @step(limit=Limit(NAME, rate=1, per=WINDOW))
    def call(self):
        RUNS[self.hero.email] += 1


def _starts(workflow_ids):
    return sorted(
        datetime.fromisoformat(row["limit_holds"]["rate_starts"][NAME])
        for workflow_id in workflow_ids
        for row in execution_rows(workflow_id)
        if row["state"] == "completed"
    )


def test_a_paused_head_waiter_is_passed_over_and_served_once_resumed(app, geneva_jobs):
    RUNS.clear()
    first = first_execution(OneASecond, "r0@example.com")
    head = first_execution(OneASecond, "head@example.com", priority=5)
    rest = [first_execution(OneASecond, f"w{i}@example.com") for i in range(2)]
    db.session.remove()
    geneva_jobs.drain(respect_eta=True)
    assert dict(RUNS) == {"r0@example.com": 1}
    # The head (priority 5) is granted for the window's end; pause it now.
    granted = [w for w in waiter_rows(NAME, "") if w["granted_at"] is not None]
    assert [w["execution_id"] for w in granted] == [head[1]]
    externally(head[0], "pause")
    assert_consistent(NAME, "")
    others = [first[0], *(wf for wf, _ in rest)]
    drain_until(
        geneva_jobs,
        lambda: all(workflow_row(wf)["state"] == "finished" for wf in others),
    )
    assert workflow_row(head[0])["state"] == "paused"
    assert RUNS["head@example.com"] == 0
    externally(head[0], "resume")
    drain_until(geneva_jobs, lambda: workflow_row(head[0])["state"] == "finished")
    assert_idle(NAME, "")
    assert set(RUNS.values()) == {1}
    assert len(RUNS) == 4
    starts = _starts([*others, head[0]])
    assert len(starts) == 4
    for earlier, later in itertools.pairwise(starts):
        assert later - earlier >= WINDOW, (earlier, later)
