"""The dispatcher's pass over keys with a free slot and waiters (R-LIM-16).

A key whose only waiters belong to paused workflows has a free slot on every
pass and nothing to grant. With more such keys than the batch, the pass must
still reach a key behind them that does have a grantable waiter.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import sqlalchemy as sa

from flask_geneva import Limit
from flask_geneva import step
from flask_geneva.ext.tasks import perform_step_execution
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.engine.limits.test_claim import DURING
from tests.support.limits import counters
from tests.support.limits import deliver
from tests.support.limits import first_execution
from tests.support.limits import published_ids
from tests.support.workflow import externally
from tests.support.workflow import update_workflow

by_initial = Limit(
    "test-by-initial", concurrency=1, key=lambda wf: wf.hero.email.split("-")[0]
)


class KeyedByInitial(geneva.Workflow):
    @step(limit=by_initial)
    def work(self):
        while DURING:
            DURING.pop(0)()


def _queue_behind(holder_email: str, waiter_email: str) -> tuple[object, object]:
    """Run ``holder``'s step while ``waiter`` is delivered (it parks) and paused;
    return the waiter's (workflow id, execution id). The holder's release then
    grants nothing: the key has a free slot and a paused waiter."""
    _, holder_id = first_execution(KeyedByInitial, holder_email)
    waiter_workflow, waiter_id = first_execution(KeyedByInitial, waiter_email)

    def while_holding() -> None:
        deliver(waiter_id)
        externally(waiter_workflow, "pause")

    DURING.append(while_holding)
    perform_step_execution(holder_id, continue_inline=False)
    return waiter_workflow, waiter_id


def test_keys_with_nothing_to_grant_do_not_starve_the_others(app, geneva_jobs):
    """R-LIM-16: batch of 1; key ``p`` (older, its waiter paused) is passed
    over once stamped, and key ``r``'s waiter is granted on the next pass."""
    _queue_behind("p-holder@example.com", "p-waiter@example.com")
    r_workflow, r_waiter = _queue_behind("r-holder@example.com", "r-waiter@example.com")
    assert counters("test-by-initial", "p") == (0, 0, 1)
    assert counters("test-by-initial", "r") == (0, 0, 1)
    # r's workflow is ready again, as if resumed by a process whose message
    # to the worker was lost: only the dispatcher can grant it now.
    update_workflow(r_workflow, state="ready")
    keys = db.metadata.tables["geneva_drive_limit_keys"]
    with db.engine.begin() as connection:
        for key, year in (("p", 2020), ("r", 2021)):
            connection.execute(
                sa.update(keys)
                .where(keys.c.limit_key == key)
                .values(updated_at=datetime(year, 1, 1, tzinfo=UTC))
            )
    app.config["GENEVA_HOUSEKEEPING_BATCH_SIZE"] = 1
    geneva.reload_settings(app)
    geneva_jobs.clear()
    geneva.dispatch_due()  # reaches p only: nothing to grant
    geneva.dispatch_due()  # p was stamped: r is the oldest now
    db.session.remove()
    assert r_waiter in published_ids(geneva_jobs)
    assert counters("test-by-initial", "r") == (0, 1, 0)
    assert counters("test-by-initial", "p") == (0, 0, 1)
