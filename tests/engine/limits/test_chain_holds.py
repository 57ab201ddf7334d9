"""A resumable step's chain keeps its slot with ``hold_across_chain=True``.

R-LIM-26: the executions of a resumable step's chain, one after the other,
hold the slots of its ``hold_across_chain`` limits without giving them back
in between: the successor is written holding them and its claim takes no
slot. A successor that leaves ``scheduled`` any other way gives them back,
and so does pausing its workflow (resumed, it takes its slots anew).
"""

from __future__ import annotations

from typing import Any

from flask_geneva import Limit
from flask_geneva import resumable_step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import geneva
from tests.engine.limits.test_claim import DURING
from tests.support.limits import counters
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import published_ids
from tests.support.limits import waiter_rows
from tests.support.workflow import execution_row
from tests.support.workflow import execution_rows
from tests.support.workflow import externally
from tests.support.workflow import workflow_row

NAME = "test-chain-hold"
chain_limit = Limit(NAME, concurrency=1, hold_across_chain=True)
HELD = [[NAME, ""]]


class ChainHoldsItsSlot(geneva.Workflow):
    @resumable_step(limit=chain_limit)
    def walk(self, it):
        while DURING:
            DURING.pop(0)()
        if not it.resumed:
            self.suspend()


def _first_link_with_a_waiter(geneva_jobs: Any) -> tuple[Any, Any, Any]:
    """Run A's first execution while B parks; return (a wf, successor id, b
    execution)."""
    a_wf, a_id = first_execution(ChainHoldsItsSlot, "a@example.com")
    _, b_id = first_execution(ChainHoldsItsSlot, "b@example.com")
    geneva_jobs.clear()
    DURING.append(lambda: deliver(b_id))
    perform_step_execution(a_id, continue_inline=False)
    first, successor = execution_rows(a_wf)
    assert (first["state"], first["outcome"]) == ("completed", "continued")
    assert first["limit_holds"]["passed_on"] == HELD
    assert successor["state"] == "scheduled"
    assert successor["limit_holds"] == {"held": HELD}
    return a_wf, successor["id"], b_id


def test_the_successor_keeps_the_slot_and_the_waiter_waits(app, geneva_jobs):
    """R-LIM-26: between A's executions the slot stays A's; B is granted when
    the chain's last execution ends."""
    a_wf, successor_id, b_id = _first_link_with_a_waiter(geneva_jobs)
    assert counters(NAME, "") == (1, 0, 1)  # held by the scheduled successor
    assert b_id not in published_ids(geneva_jobs)
    geneva_jobs.clear()
    perform_step_execution(successor_id, continue_inline=False)
    assert execution_row(successor_id)["state"] == "completed"
    assert execution_row(successor_id)["limit_holds"]["held"] == HELD
    assert counters(NAME, "") == (0, 1, 0)
    assert b_id in published_ids(geneva_jobs)
    geneva_jobs.drain()
    assert workflow_row(a_wf)["state"] == "finished"
    assert execution_row(b_id)["state"] == "completed"
    assert counters(NAME, "") == (0, 0, 0)
    assert waiter_rows(NAME) == []


def test_pausing_gives_the_chains_slot_back(app, geneva_jobs):
    """R-LIM-26: paused between two executions, A's chain lets B run; resumed,
    A's successor takes a slot anew, behind B."""
    a_wf, successor_id, b_id = _first_link_with_a_waiter(geneva_jobs)
    geneva_jobs.clear()
    externally(a_wf, "pause")
    assert execution_row(successor_id)["limit_holds"] is None
    assert counters(NAME, "") == (0, 1, 0)  # granted to B
    assert b_id in published_ids(geneva_jobs)
    externally(a_wf, "resume")
    geneva_jobs.drain()
    assert execution_row(b_id)["state"] == "completed"
    assert workflow_row(a_wf)["state"] == "finished"
    assert counters(NAME, "") == (0, 0, 0)
    assert waiter_rows(NAME) == []


def test_canceling_gives_the_chains_slot_back(app, geneva_jobs):
    """R-LIM-26, R-LIM-22: the successor canceled with its workflow gives its
    slot back in the cancel's transaction; B is granted."""
    a_wf, successor_id, b_id = _first_link_with_a_waiter(geneva_jobs)
    geneva_jobs.clear()
    externally(a_wf, "cancel")
    assert execution_row(successor_id)["state"] == "canceled"
    assert counters(NAME, "") == (0, 1, 0)
    assert b_id in published_ids(geneva_jobs)
    geneva_jobs.drain()
    assert execution_row(b_id)["state"] == "completed"
    assert counters(NAME, "") == (0, 0, 0)
