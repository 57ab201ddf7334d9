"""``flask geneva show`` and ``dispatch`` with deadlines (SPEC §27.1, R-DL-60,
R-DL-21)."""

from __future__ import annotations

from flask_geneva.core import clock
from tests.apps.basic import db
from tests.cli.test_cli import geneva_cli  # noqa: F401 - the fixture
from tests.engine.deadlines.workflows import HOUR
from tests.engine.deadlines.workflows import T0
from tests.engine.deadlines.workflows import TwoDays
from tests.support.workflow import make_user


def test_show_prints_the_deadline_and_the_deadline_cancel(geneva_cli, geneva_jobs):  # noqa: F811
    """`show` has a deadline line after the header's times; the dispatcher
    prints what its deadline pass did, and `show` then lists the cancel "via
    deadline" with the deadline (R-DL-60, R-DL-21)."""
    with clock.frozen(T0):
        workflow = TwoDays.create(hero=make_user(), deadline=HOUR)
        plain = TwoDays.create(hero=make_user("plain@example.com"))
        geneva_jobs.drain()
    ids = workflow.id, plain.id
    db.session.remove()
    line = (
        "  deadline:     2030-05-01 11:00:00+00:00 (the dispatcher cancels the "
        "workflow if it has not ended"
    )
    with clock.frozen(T0):
        assert f"{line})" in geneva_cli("show", str(ids[0])).stdout.splitlines()
    with clock.frozen(T0 + 2 * HOUR):
        shown = geneva_cli("show", str(ids[0])).stdout.splitlines()
    assert f"{line}; passed, so on its next run)" in shown
    assert "deadline:" not in geneva_cli("show", str(ids[1])).stdout
    with clock.frozen(T0 + 2 * HOUR):
        dispatched = geneva_cli("dispatch").stdout
    assert "1 workflow(s) reached their deadline (canceled or paused)" in dispatched
    shown = geneva_cli("show", str(ids[0])).stdout
    assert "cancel via deadline by - (ready -> canceled) at the deadline " in shown
    assert "2030-05-01T11:00:00+00:00" in shown
    # Ended: the deadline line no longer says what the dispatcher will do.
    assert (
        "  deadline:     2030-05-01 11:00:00+00:00 (the workflow has ended: the "
        "deadline no longer applies)"
    ) in shown.splitlines()
    assert "if it has not ended" not in shown
