"""The deadline on the admin's workflow page (SPEC §27.1, R-DL-60, R-DL-21)."""

from __future__ import annotations

import re

from flask_geneva.core import clock
from tests.admin.support import detail_url
from tests.apps.basic import db
from tests.engine.deadlines.workflows import HOUR
from tests.engine.deadlines.workflows import T0
from tests.engine.deadlines.workflows import PausedByDeadline
from tests.engine.deadlines.workflows import TwoDays
from tests.engine.deadlines.workflows import dispatch
from tests.support.workflow import make_user


def _words(html):
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _page(client, workflow_id):
    response = client.get(detail_url(workflow_id))
    assert response.status_code == 200, response.data[:500]
    return _words(response.get_data(as_text=True))


def test_the_workflow_page_shows_the_deadline_and_who_acted(client, geneva_jobs):
    """The header facts name the deadline and what happens then; after the
    dispatcher's cancel the operator actions say "via deadline" and the
    deadline (R-DL-60, R-DL-21)."""
    with clock.frozen(T0):
        canceled = TwoDays.create(hero=make_user("a@example.com"), deadline=HOUR)
        paused = PausedByDeadline.create(hero=make_user("b@example.com"))
        plain = TwoDays.create(hero=make_user("c@example.com"))
        geneva_jobs.drain()
    ids = canceled.id, paused.id, plain.id
    db.session.remove()
    text = _page(client, ids[0])
    assert "Deadline" in text
    assert "the dispatcher cancels the workflow if it has not ended" in text
    assert "the dispatcher pauses the workflow" in _page(client, ids[1])
    assert "Deadline" not in _page(client, ids[2])
    with clock.frozen(T0 + 2 * HOUR):
        assert dispatch().deadlines == 2
    text = _page(client, ids[0])
    assert "cancel at the deadline 2030-05-01T11:00:00+00:00" in text
    assert "deadline ready canceled" in text  # the via, from and to columns
