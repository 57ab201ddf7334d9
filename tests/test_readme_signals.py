"""The README's workflow signals guide runs as written (issue 18, R-WSIG-11..41).

The block after the ``signals-guide-example`` marker in README.md (the same
block is in docs/signals.md) is written to a module and driven in a fresh
interpreter on a SQLite file, with the recording task backend standing in for
the broker: the webhook route verifies the signature, delivers the signal with
the provider's event id as idempotency key, a duplicate changes nothing, a
signal that arrives first is claimed at the gate, and a wait that times out
cancels the workflow.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Sends no statement of its own: runs once, in the SQLite pass (checked there).
pytestmark = pytest.mark.database_independent

REPO_ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- signals-guide-example"

DRIVER = r"""
import hashlib
import hmac
import json
import sys
from datetime import timedelta

import sqlalchemy as sa

import shop_example as shop
from flask_geneva.core import clock
from flask_geneva.testing import RecordingJobs
from flask_geneva.testing import WaitingForSignal
from flask_geneva.testing import assert_waiting_for_signal
from flask_geneva.testing import speedrun_workflow

app = shop.create_app(
    SQLALCHEMY_DATABASE_URI=sys.argv[1], GENEVA_TASK_BACKEND="recording"
)
jobs = RecordingJobs(app.extensions["geneva"].recording_backend)
client = app.test_client()
results = {}


def post(event, *, secret=shop.WEBHOOK_SECRET):
    body = json.dumps(event).encode()
    signature = hmac.new(secret, body, hashlib.sha256).hexdigest()
    response = client.post(
        "/webhooks/payments", data=body, headers={"X-Signature": signature}
    )
    return response.status_code, response.get_json(silent=True)


def paid(event_id, order_id, amount):
    return {
        "id": event_id,
        "type": "payment.succeeded",
        "data": {"id": f"pi_{event_id}", "order_id": order_id, "amount": amount},
    }


def snapshot(order_id, workflow_id):
    order = shop.db.session.get(shop.Order, order_id)
    workflow = shop.db.session.get(shop.Checkout, workflow_id)
    signals = shop.geneva.WorkflowSignal
    states = shop.db.session.scalars(
        sa.select(signals.state)
        .where(signals.workflow_id == workflow_id)
        .order_by(signals.id)
    ).all()
    executions = shop.geneva.StepExecution
    parked = shop.db.session.scalars(
        sa.select(executions.step_name)
        .where(executions.workflow_id == workflow_id)
        .where(executions.waiting_since.is_not(None))
    ).all()
    return {
        "workflow": workflow.state,
        "order": [order.status, order.paid_cents, order.payment_id],
        "signals": states,
        "parked": parked,
    }


with app.app_context():
    shop.db.create_all()
    orders = [shop.Order() for _ in range(3)]
    shop.db.session.add_all(orders)
    shop.db.session.commit()
    ids = [order.id for order in orders]
    # 1. The step first: it parks; the webhook wakes it.
    first = shop.Checkout.create(hero=orders[0]).id
    jobs.drain()
    assert_waiting_for_signal(shop.db.session.get(shop.Checkout, first), "payment_confirmed")
    try:
        speedrun_workflow(shop.db.session.get(shop.Checkout, first))
    except WaitingForSignal as error:
        results["speedrun"] = [error.step_name, error.awaited]
    shop.db.session.remove()

results["forged"] = post(paid("evt_1", ids[0], 1999), secret=b"wrong")[0]
results["other_event"] = post({"id": "evt_0", "type": "charge.pending"})
results["delivered"] = post(paid("evt_1", ids[0], 1999))
results["duplicate"] = post(paid("evt_1", ids[0], 1999))
results["unknown_order"] = post(paid("evt_x", 999999, 1))[0]
with app.app_context():
    results["woken_publications"] = len(jobs.enqueued)
    jobs.drain()
    results["step_first"] = snapshot(ids[0], first)
    # 2. The signal first: buffered, claimed at the gate, never parked.
    second = shop.Checkout.create(hero=shop.db.session.get(shop.Order, ids[1])).id
    shop.db.session.remove()
# The provider retries evt_1 after the checkout finished: a duplicate, not a 500.
results["retried_after_finish"] = post(paid("evt_1", ids[0], 1999))
results["early"] = post(paid("evt_2", ids[1], 500))
with app.app_context():
    jobs.drain()
    results["signal_first"] = snapshot(ids[1], second)
    # 3. Nobody pays: after wait_timeout, on_wait_timeout="cancel".
    third = shop.Checkout.create(hero=shop.db.session.get(shop.Order, ids[2])).id
    jobs.drain()
    executions = shop.geneva.StepExecution
    shop.db.session.execute(
        sa.update(executions)
        .where(executions.workflow_id == third)
        .where(executions.state == "waiting")
        .values(wait_deadline=clock.now() - timedelta(seconds=1))
    )
    shop.db.session.commit()
    shop.geneva.dispatch_due()
    jobs.drain()
    results["timed_out"] = snapshot(ids[2], third)
# 4. The customer pays after the checkout was canceled: a late event, no 500.
results["late"] = post(paid("evt_3", ids[2], 700))
with app.app_context():
    results["workflows_of_late_order"] = len(
        shop.db.session.scalars(
            shop.Checkout.for_hero(shop.db.session.get(shop.Order, ids[2]))
        ).all()
    )
    results["late_order"] = snapshot(ids[2], third)
print(json.dumps(results))
"""


def _guide_block(path: Path) -> str:
    text = path.read_text()
    start = text.index(MARKER)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no python block after {MARKER} in {path}"
    return match.group(1)


def test_the_readme_and_the_docs_page_show_the_same_example():
    """docs/signals.md repeats the README's example word for word."""
    assert _guide_block(REPO_ROOT / "README.md") == _guide_block(
        REPO_ROOT / "docs" / "signals.md"
    )


def _run_guide(tmp_path):
    """Run the driver on the README's block; return its results."""
    (tmp_path / "shop_example.py").write_text(_guide_block(REPO_ROOT / "README.md"))
    (tmp_path / "driver.py").write_text(DRIVER)
    result = subprocess.run(
        [sys.executable, "driver.py", f"sqlite:///{tmp_path / 'shop.sqlite3'}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_readme_webhook_example_runs(tmp_path):
    """The guide's checkout and webhook behave as the guide says (R-WSIG-11,
    R-WSIG-13, R-WSIG-22, R-WSIG-41, R-WSIG-50)."""
    results = _run_guide(tmp_path)
    assert results["speedrun"] == ["ship", "payment_confirmed"]
    assert results["forged"] == 400
    assert results["other_event"] == [200, {"ignored": "charge.pending"}]
    assert results["delivered"][0] == 200
    assert results["delivered"][1]["duplicate"] is False
    assert results["duplicate"] == [
        200,
        {"signal": results["delivered"][1]["signal"], "duplicate": True},
    ]
    assert results["unknown_order"] == 404
    assert results["woken_publications"] == 1
    assert results["step_first"] == {
        "workflow": "finished",
        "order": ["shipped", 1999, "pi_evt_1"],
        "signals": ["consumed"],
        "parked": ["ship"],
    }
    assert results["early"][0] == 200
    assert results["signal_first"] == {
        "workflow": "finished",
        "order": ["shipped", 500, "pi_evt_2"],
        "signals": ["consumed"],
        "parked": [],
    }
    assert results["timed_out"]["workflow"] == "canceled"
    assert results["timed_out"]["order"] == ["awaiting_payment", None, None]
    assert results["timed_out"]["signals"] == []


def test_the_readme_webhook_answers_retries_and_late_events(tmp_path):
    """A retry after the checkout finished is a duplicate; a payment after it was
    canceled is a late event answered 200, starting no new checkout (issue 34,
    R-WSIG-24, R-WSIG-71, R-WSIG-25)."""
    results = _run_guide(tmp_path)
    assert results["retried_after_finish"] == [
        200,
        {"signal": results["delivered"][1]["signal"], "duplicate": True},
    ]
    assert results["late"] == [200, {"late": "evt_3"}]
    assert results["workflows_of_late_order"] == 1
    assert results["late_order"] == results["timed_out"]
