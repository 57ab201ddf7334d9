"""A realistic admin to look at: workflows in every state, run through the engine.

:func:`seed_admin` fills the database the way an operator's day does (failures with
backtraces, reattempts, a deferred job, operator actions, canceled and finished
workflows) and returns the URL path of every admin page. The layout tests
(``test_admin_layout_browser.py``) and the README screenshots use it.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest

from flask_geneva import on_exception
from flask_geneva import step
from flask_geneva.core import clock
from flask_geneva.testing import perform_next_step
from tests.admin.support import new_user
from tests.admin.workflows import AdminFailing
from tests.admin.workflows import AdminSignalWait
from tests.admin.workflows import AdminTwoStep
from tests.apps.basic import db
from tests.apps.basic import geneva
from tests.support.workflow import execution_rows
from tests.support.workflow import update_execution
from tests.support.workflow import update_workflow


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time."""


class ChargeCustomer(geneva.Workflow):
    """Charges a card: the gateway times out, reattempted twice 2 s apart, then paused."""

    exception_policies = [
        on_exception(GatewayTimeout, action="reattempt", wait=2, max_reattempts=2)
    ]

    @step
    def reserve_stock(self):
        pass

    @step
    def charge_card(self):
        raise GatewayTimeout(
            "POST https://gateway.example.com/v2/charges timed out after 10 s "
            "(order 17, amount 129.90 EUR, idempotency key 7f3a9c21-5be0-4f8e-"
            "9d1b-2c6e0a4d8f10); the gateway's status page reports degraded service"
        )

    @step(wait=timedelta(hours=2))
    def send_receipt(self):
        pass


def _run(workflow: Any, steps: int) -> None:
    for _ in range(steps):
        # A failing step is part of the picture.
        with contextlib.suppress(GatewayTimeout):
            perform_next_step(workflow)


def seed_admin() -> dict[str, str]:
    """Create the workflows; return ``{page name: URL path}`` of every admin page.

    Pages: overview, a class page, workflows list, executions list, signals
    list, the limits and schedules pages, the start page with a hero found, a
    failed workflow, a reattempted-then-paused one, a finished one, a
    canceled one, one whose step waits for a signal, a failed and a waiting
    execution's page, the filtered lists, and the 404 page (the other error
    pages are reached in ``test_error_pages_browser.py``).
    """
    now = clock.now()
    ready = [
        AdminTwoStep.create(hero=new_user(f"ready{i}@example.com")) for i in range(14)
    ]
    # One scheduled execution waits for the dispatcher; one is overdue.
    update_execution(execution_rows(ready[0].id)[0]["id"], job_id="geneva:deferred")
    update_execution(
        execution_rows(ready[1].id)[0]["id"], scheduled_for=now - timedelta(minutes=7)
    )
    update_execution(
        execution_rows(ready[2].id)[0]["id"], scheduled_for=now + timedelta(minutes=14)
    )
    for index, workflow in enumerate(ready[3:], start=1):  # due over the next hours
        update_execution(
            execution_rows(workflow.id)[0]["id"],
            scheduled_for=now + timedelta(minutes=20 * index),
        )
    finished = AdminTwoStep.create(hero=new_user("done@example.com"))
    perform_next_step(finished)
    update_execution(execution_rows(finished.id)[-1]["id"], scheduled_for=clock.now())
    perform_next_step(finished)
    failed = AdminFailing.create(hero=new_user("failing@example.com"))
    with pytest.raises(RuntimeError):
        perform_next_step(failed)
    charge = ChargeCustomer.create(hero=new_user("customer@example.com"))
    perform_next_step(charge)
    for _ in range(3):
        rows = execution_rows(charge.id)
        update_execution(rows[-1]["id"], scheduled_for=clock.now())
        _run(charge, 1)
    charge.resume(actor="ops@example.com", via="admin")
    charge.pause(actor="ops@example.com", via="admin")
    canceled = AdminTwoStep.create(hero=new_user("canceled@example.com"))
    canceled.cancel(actor="ops@example.com", via="admin")
    for i in range(6):
        paused = AdminTwoStep.create(hero=new_user(f"paused{i}@example.com"))
        paused.pause()
    # A step parked at a wait_for gate beside a pending signal that does not match
    # it (a long payload and key); another woken by its signal (claimed).
    waiting = AdminSignalWait.create(hero=new_user("parked@example.com"))
    waiting.signal(
        "refund_requested",
        {"reason": "duplicate charge " * 40, "order": 17},
        idempotency_key="refund-" + "7f3a9c21" * 12,
        warn_unawaited=False,
    )
    perform_next_step(waiting)
    signalled = AdminSignalWait.create(hero=new_user("signalled@example.com"))
    perform_next_step(signalled)
    signalled.signal("payment_confirmed", {"amount": "129.90", "currency": "EUR"})
    waiting_execution = execution_rows(waiting.id)[-1]["id"]
    failed_execution = [
        row["id"] for row in execution_rows(charge.id) if row["state"] == "failed"
    ][-1]
    ids = {
        "hero": failed.hero_id,
        "failed": failed.id,
        "charge": charge.id,
        "finished": finished.id,
        "canceled": canceled.id,
        "waiting": waiting.id,
    }
    db.session.remove()
    return {
        "overview": "/geneva/",
        "workflows": "/geneva/workflows/",
        "workflows_paused": "/geneva/workflows/?state=paused",
        "executions": "/geneva/step-executions/",
        "executions_failed": "/geneva/step-executions/?state=failed",
        "workflow_reattempted": f"/geneva/workflows/{ids['charge']}",
        "workflow_failed": f"/geneva/workflows/{ids['failed']}",
        "workflow_finished": f"/geneva/workflows/{ids['finished']}",
        "workflow_canceled": f"/geneva/workflows/{ids['canceled']}",
        "execution_failed": f"/geneva/step-executions/{failed_execution}",
        "executions_waiting": "/geneva/step-executions/?state=waiting",
        "workflow_waiting": f"/geneva/workflows/{ids['waiting']}",
        "execution_waiting": f"/geneva/step-executions/{waiting_execution}",
        "signals": "/geneva/signals/",
        "signals_pending": "/geneva/signals/?state=pending",
        "class_page": "/geneva/class/ChargeCustomer",
        "limits": "/geneva/limits/",
        "schedules": "/geneva/schedules/",
        # The start page with its hero found: the start form shows (R-ADM-203).
        "start": "/geneva/workflows/start?type=AdminTwoStep&hero_type=User"
        f"&hero_id={ids['hero']}",
        "error_404": "/geneva/workflows/999999",
    }


def throughput_pattern(now: Any) -> list[tuple[Any, str, str]]:
    """A day of finished executions for the overview's charts (R-ADM-130), as
    :func:`tests.admin.support.store_finished` takes them: each minute of the
    last hour 3 to 7 succeeded, a reattempt every 4 minutes and a failure every
    13; each earlier hour of the day 20 to 79 succeeded, 0 to 2 reattempted, a
    failure every 7 hours and a cancel every 5. About 2,000 rows."""
    rows: list[tuple[Any, str, str]] = []
    minute = now.replace(second=0, microsecond=0)
    for back in range(60):
        start = minute - timedelta(minutes=back)
        at = [start + timedelta(seconds=1 + 7 * n) for n in range(8)]
        if start + timedelta(seconds=57) > now:
            at = [now - timedelta(milliseconds=10)] * 8  # the minute under way
        rows += [(at[n], "completed", "success") for n in range(3 + back * 7 % 5)]
        if back % 4 == 0:
            rows.append((at[-1], "completed", "reattempted"))
        if back % 13 == 0:
            rows.append((at[-2], "failed", "failed"))
    hour = now.replace(minute=0, second=0, microsecond=0)
    for back in range(1, 24):
        start = hour - timedelta(hours=back)
        count = 20 + back * 37 % 60
        at = [start + timedelta(seconds=3600 * n / count) for n in range(count)]
        rows += [(moment, "completed", "success") for moment in at]
        rows += [(at[n], "completed", "reattempted") for n in range(back % 3)]
        if back % 7 == 0:
            rows.append((at[0], "failed", "failed"))
        if back % 5 == 0:
            rows.append((at[1], "canceled", "canceled"))
    return rows


def seed_throughput() -> dict[str, str]:
    """A finished workflow with :func:`throughput_pattern`'s executions and one
    running its step, beside :func:`seed_admin`'s (the overview at a glance,
    R-ADM-130..131); returns the overview's URL path."""
    from tests.admin.support import store_finished

    now = clock.now()
    done = AdminTwoStep.create(hero=new_user("throughput@example.com"))
    perform_next_step(done)
    update_execution(execution_rows(done.id)[-1]["id"], scheduled_for=now)
    perform_next_step(done)
    store_finished(done.id, throughput_pattern(now))
    running = AdminTwoStep.create(hero=new_user("running@example.com"))
    update_execution(
        execution_rows(running.id)[0]["id"], state="in_progress", started_at=now
    )
    update_workflow(running.id, state="performing")
    db.session.remove()
    return {"overview": "/geneva/"}
