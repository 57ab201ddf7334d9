"""The execution detail page shows a backoff decision in words (R-PDR-07, R-ADM-14)."""

from __future__ import annotations

import contextlib
import html

from flask_geneva import Backoff
from flask_geneva import ExceptionPolicy
from flask_geneva import step
from flask_geneva.testing import perform_next_step
from tests.admin.execution_support import detail_url
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows


class Overloaded(Exception):
    """Raised by the test step."""


class AdminBackoffCalls(geneva.Workflow):
    @step(
        on_exception=ExceptionPolicy(
            "reattempt",
            max_reattempts=10,
            wait=Backoff.polynomial(offset=60, jitter=0),
        )
    )
    def call(self):
        raise Overloaded("busy")


def test_detail_page_shows_the_computed_wait_and_strategy(client, user, geneva_jobs):
    """'reattempt 2 of 10 in 1 min 16 s (polynomial backoff)' on the page (R-PDR-07)."""
    workflow = AdminBackoffCalls.create(hero=user)
    for _ in range(2):
        with contextlib.suppress(Overloaded):
            perform_next_step(workflow)
    db.session.remove()
    second = execution_rows(workflow.id)[1]
    page = client.get(detail_url(second["id"]))
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    # attempt 2: 2 ** 4 + 60 = 76 s
    assert (
        html.escape(
            "reattempt 2 of 10 in 1 min 16 s (polynomial backoff) — step policy"
        )
        in text
    )
